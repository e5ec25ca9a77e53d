"""`rlcleanup doctor`: everything a command would use, on one screen (issue 47, the habit of `gh auth status`,
`gcloud info`, `wandb status`): the record store, the preserve root, credentials found per storage scheme and for
the Hub, the local stack, the approvers and their prefixes, the notification channels. `--json` for scripts.

It reads, never writes (no records file is created) and never prints a secret: a credential is named by where it
was found (a variable's name, a file's path), a webhook by its host. Exit 0 when every check passed, 3 when one
failed (its line says the fix)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import typer

from rlcleanup.cli.options import BackendOption, DbOption, JsonOption, ProjectOption, backend_name, db_path
from rlcleanup.cli.stores import EXIT_FAILURE, OperatorError, open_store

OK, WARN, FAIL = "ok", "note", "fail"


def _check(status: str, what: str, **details: Any) -> dict[str, Any]:
    return {"status": status, "what": what, **details}


def _records(backend: str | None, db: Path | None, project: str | None) -> dict[str, Any]:
    from rlcleanup.runtime.backends import StoreBackend, chosen_backend

    chosen = chosen_backend(backend_name(backend))
    if chosen == StoreBackend.sqlite and not db_path(db).exists():
        return _check(WARN, f"no records yet at {db_path(db)} (`rlcleanup run RUN_ROOT` creates it)", runs=0)
    try:
        opened = open_store(backend_name(backend), db_path(db), project)
        runs = sum(1 for _ in opened.store.list_runs(limit=1000))
    except OperatorError as exc:
        return _check(FAIL, str(exc))
    return _check(OK, f"{opened.where}: {runs if runs < 1000 else '1000+'} run(s)", runs=runs, where=opened.where)


def _preserve_root() -> dict[str, Any]:
    from rlcleanup.paths import default_preserve_root
    from rlcleanup.settings import load_settings

    configured = load_settings().preserve_root
    root = configured or str(default_preserve_root())
    origin = "RLCLEANUP_PRESERVE_ROOT" if configured else "the default"
    if root.startswith("gs://"):
        from rlcleanup.runtime.backends import StorageUnreachable, check_storage_reachable

        try:
            check_storage_reachable(root)
        except StorageUnreachable as exc:
            return _check(FAIL, str(exc), root=root)
        return _check(OK, f"{root} ({origin})", root=root)
    local = Path(root)
    parent = next((p for p in (local, *local.parents) if p.exists()), None)
    if parent is None or not os.access(parent, os.W_OK):
        return _check(FAIL, f"{root} ({origin}) cannot be created: {parent} is not writable", root=root)
    return _check(OK, f"{root} ({origin}{'' if local.exists() else ', created on first run'})", root=root)


def _credentials() -> dict[str, dict[str, Any]]:
    """Where each scheme's credentials would come from: names and paths, never values."""
    from rlcleanup.settings import platform, s3_endpoint_specs

    found: dict[str, dict[str, Any]] = {"file": _check(OK, "local files: no credentials needed")}
    emulator = platform().storage_emulator_host
    if emulator:
        from rlcleanup.runtime.backends import StorageUnreachable, check_storage_reachable

        try:
            check_storage_reachable("gs://")
            found["gs"] = _check(OK, f"the storage emulator at {emulator} (STORAGE_EMULATOR_HOST)")
        except StorageUnreachable as exc:
            found["gs"] = _check(FAIL, str(exc))
    else:
        found["gs"] = _google_credentials()
    endpoints = sorted(s3_endpoint_specs())
    aws = [n for n in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE") if os.environ.get(n)]
    if aws or endpoints or Path("~/.aws/credentials").expanduser().is_file():
        where = [*aws, *(f"RLCLEANUP_S3_ENDPOINT_{n.upper()}" for n in endpoints)] or ["~/.aws/credentials"]
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS"
        found["s3"] = _check(OK, f"{', '.join(where)} (default endpoint {endpoint})", endpoints=endpoints)
    else:
        found["s3"] = _check(WARN, "none: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or one "
                             "RLCLEANUP_S3_ENDPOINT_<NAME> per endpoint (docs/s3.md)")  # fmt: skip
    token = next((n for n in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN") if os.environ.get(n)), None)
    cached = Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser() / "token"
    if token or cached.is_file():
        found["hf"] = _check(OK, f"{token or cached} (endpoint {os.environ.get('HF_ENDPOINT', 'huggingface.co')})")
    else:
        found["hf"] = _check(WARN, "none: set HF_TOKEN (a write token) to hand off to the Hub (docs/hub.md)")
    return found


def _google_credentials() -> dict[str, Any]:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        _creds, project = google.auth.default()
    except DefaultCredentialsError:
        return _check(WARN, "none: set GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login`")
    where = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or "application-default credentials"
    return _check(OK, f"{where} (project {project or '?'})")


def _stack() -> dict[str, Any]:
    from rlcleanup.paths import stack_dir
    from rlcleanup.stack import status

    where = stack_dir()
    states = status(where)
    if not states:
        return _check(OK, f"not running (none recorded in {where})", running=0, servers=0)
    running = sum(states.values())
    tone = OK if running == len(states) else FAIL
    text = f"{running} of {len(states)} server(s) running in {where}"
    if tone == FAIL:
        text += ": `rlcleanup stack down` then `rlcleanup stack up`"
    return _check(tone, text, running=running, servers=len(states))


def _approvers(backend: str | None, db: Path | None, project: str | None) -> dict[str, Any]:
    from rlcleanup.authority.approvers import list_approvers
    from rlcleanup.runtime.backends import StoreBackend, chosen_backend

    if chosen_backend(backend_name(backend)) == StoreBackend.sqlite and not db_path(db).exists():
        return _check(WARN, "none registered", approvers=[])
    try:
        approvers = list_approvers(open_store(backend_name(backend), db_path(db), project).store)
    except OperatorError as exc:
        return _check(FAIL, str(exc), approvers=[])
    rows = [
        {"id": a.approver_id, "prefixes": a.allowed_prefixes, "revoked": a.revoked_at is not None} for a in approvers
    ]
    active = [a for a in approvers if a.revoked_at is None]
    if not active:
        return _check(WARN, "none active: `rlcleanup keygen --id NAME`, then `rlcleanup approver add`", approvers=rows)
    text = "; ".join(f"{a.approver_id}: {', '.join(a.allowed_prefixes) or 'no prefix'}" for a in active)
    return _check(OK, text, approvers=rows)


def _notifications() -> dict[str, Any]:
    from rlcleanup.settings import NotifySettings as Notify
    from rlcleanup.settings import SettingsError, read

    try:
        conf = read(Notify)
    except SettingsError as exc:
        return _check(FAIL, str(exc))
    channels = []
    if conf.webhook_url:
        channels.append(f"{conf.webhook_kind} webhook at {urlsplit(conf.webhook_url).hostname}")
    if conf.webhook_secret:
        channels.append(f"{conf.webhook_kind} webhook from Secret Manager ({conf.webhook_secret.split('/')[3]})")
    if conf.smtp_host and conf.smtp_to:
        channels.append(f"e-mail via {conf.smtp_host}:{conf.smtp_port} to {len(conf.smtp_to)} recipient(s)")
    if not channels:
        return _check(WARN, "none: a run that needs a person is only on its record (RLCLEANUP_NOTIFY_*)", channels=[])
    return _check(OK, "; ".join(channels), channels=channels)


def doctor(
    db: DbOption = None,
    backend: BackendOption = None,
    project: ProjectOption = None,
    as_json: JsonOption = False,
) -> None:
    """What every command would use, on one screen: record store, preserve root, credentials per scheme, the
    local stack, approvers and prefixes, notification channels. Reads only; never prints a secret."""
    report: dict[str, Any] = {
        "records": _records(backend, db, project),
        "preserve_root": _preserve_root(),
        "credentials": _credentials(),
        "stack": _stack(),
        "approvers": _approvers(backend, db, project),
        "notifications": _notifications(),
    }
    checks = [v for k, v in report.items() if k != "credentials"] + list(report["credentials"].values())
    failed = any(c["status"] == FAIL for c in checks)
    if as_json:
        typer.echo(json.dumps(report | {"ok": not failed}, indent=2))
    else:
        from rlcleanup.textsafe import neutralise

        mark = {OK: "✓", WARN: "·", FAIL: "✗"}
        for name, check in report.items():
            if name == "credentials":
                for scheme, found in check.items():
                    typer.echo(neutralise(f"{mark[found['status']]} credentials {scheme + ':':6} {found['what']}"))
                continue
            typer.echo(neutralise(f"{mark[check['status']]} {name.replace('_', ' '):18} {check['what']}"))
    if failed:
        raise typer.Exit(EXIT_FAILURE)


def register(app: typer.Typer) -> None:
    app.command(epilog="Exit codes: 0 every check passed, 3 one failed (its line says the fix).")(doctor)
