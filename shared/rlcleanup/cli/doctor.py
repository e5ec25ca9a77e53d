"""`rlcleanup doctor [--json]`: one screen of what this rlcleanup would use, and what is missing.

Like `gh auth status`, `gcloud info` or `sky check`: the record store, the preserve root, the credentials found per
storage scheme, the local stack, the approvers and the notification channels, each as one line with its fix when
it is not usable. Nothing is taken from memory: each emulator variable set is probed, the stack's servers are
probed. Every probe runs under a deadline (`_bounded`), so doctor answers within seconds even when an emulator or
the metadata server never answers; a probe that fails is a line with the fix, never a traceback.

Exit 0 when everything `rlcleanup run` needs is usable, 1 when something needed is missing (the lines marked
`FAIL` say which). What only some runs need (Google credentials for gs://, S3 keys, a Hub token) is reported, and
never fails the check.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, TypeVar

import typer
from pydantic import BaseModel, Field

from rlcleanup.cli.options import StoreChoice, backend_name, db_path, store_options
from rlcleanup.textsafe import neutralise

State = Literal["ok", "info", "fail"]
_T = TypeVar("_T")
Facts = Mapping[str, object]
STORE_DEADLINE_SECONDS = 5.0  # opening the store and listing approvers (a real Firestore answers in well under it)
PROBE_DEADLINE_SECONDS = 4.0  # anything else: credentials, the stack's servers, an emulator


class Finding(BaseModel):
    """One line of the doctor's screen."""

    check: str
    state: State
    detail: str
    fix: str | None = None
    facts: dict[str, object] = Field(default_factory=dict)  # for --json: the same facts, as fields

    # One constructor a state: a check's findings then say only what differs (what was found, the fix, the facts).
    @classmethod
    def ok(cls, check: str, detail: str, *, facts: Facts | None = None) -> Finding:
        return cls(check=check, state="ok", detail=detail, facts=dict(facts or {}))

    @classmethod
    def info(cls, check: str, detail: str, fix: str | None = None, facts: Facts | None = None) -> Finding:
        return cls(check=check, state="info", detail=detail, fix=fix, facts=dict(facts or {}))

    @classmethod
    def fail(cls, check: str, detail: str, fix: str | None = None, facts: Facts | None = None) -> Finding:
        return cls(check=check, state="fail", detail=detail, fix=fix, facts=dict(facts or {}))


class Diagnosis(BaseModel):
    version: str
    commit: str | None
    usable: bool
    missing: list[str]  # the checks that failed: what `rlcleanup run` would need
    findings: list[Finding]


class ProbeTimeout(Exception):
    pass


def _bounded(seconds: float, probe: Callable[[], _T]) -> _T:
    """`probe()` on a daemon thread, waited on for `seconds`: a probe that never returns is abandoned (the process
    exits without it) and reported as a timeout, so doctor itself never hangs."""
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["value"] = probe()
        except BaseException as exc:  # handed to the caller's thread, which reports it as a line
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True, name="rlcleanup-doctor-probe")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise ProbeTimeout(f"no answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def _one_line(exc: BaseException) -> str:
    """An error as one line: a typed refusal (PermanentError, a timeout) by its own words, anything else with its
    type, which is all a defect's message may lack."""
    from rlcleanup.errors import PermanentError

    text = " ".join(str(exc).split())
    return text if isinstance(exc, PermanentError | ProbeTimeout) else f"{type(exc).__name__}: {text}"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlcleanup")
    except PackageNotFoundError:  # a source tree without an install
        from rlcleanup import __version__

        return __version__


def version_line() -> str:
    """`rlcleanup X.Y.Z (commit abc1234)`: the version and the commit it runs from (`--version`, doctor's head)."""
    from rlcleanup.runtime.diagnostics import source_commit

    commit = source_commit()
    return f"rlcleanup {_version()} ({f'commit {commit}' if commit else 'commit unknown'})"


def _settings() -> Finding:
    from rlcleanup.settings import SettingsError, load_settings

    try:
        load_settings()
    except SettingsError as exc:  # names the variable; a secret one's value is never in it
        return Finding.fail("settings", str(exc), "correct or unset the variable named")
    return Finding.ok("settings", "every RLCLEANUP_* variable set is valid")


def _emulators() -> list[Finding]:
    """Each emulator variable the shell has: a stopped stack's leftovers make every command that reads them fail."""
    found = []
    for variable in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST"):  # STORAGE_EMULATOR_HOST: the gs:// line
        host = os.environ.get(variable, "").strip()
        if not host:
            continue
        found.append(_emulator(variable, variable, host))
    return found


def _emulator(check: str, variable: str, host: str) -> Finding:
    """One emulator variable, probed now (a TCP connect under its deadline)."""
    from rlcleanup.runtime.backends import STACK_FIX
    from rlcleanup.runtime.diagnostics import reachable

    facts: dict[str, object] = {"variable": variable, "host": host}
    try:
        up = _bounded(PROBE_DEADLINE_SECONDS, lambda: reachable(host))
    except ProbeTimeout:
        up = False
    if up:
        return Finding.ok(check, f"emulator at {host} ({variable}) answers", facts=facts | {"reachable": True})
    return Finding.fail(
        check, f"emulator at {host} ({variable}) is not reachable", STACK_FIX, facts | {"reachable": False}
    )


def _record_store(backend: str | None, db: Path, project: str | None) -> tuple[Finding, Finding]:
    """The record store and, read from it, the approvers and their prefixes."""
    from rlcleanup.authority.approvers import list_approvers
    from rlcleanup.runtime.backends import StoreBackend, StoreSetupError, chosen_backend, open_store

    chosen = chosen_backend(backend)
    if chosen == StoreBackend.sqlite and not db.exists():
        parent = next((p for p in (db, *db.parents) if p.exists()), Path("/"))
        if not os.access(parent, os.W_OK):
            return Finding.fail(
                "record store",
                f"SQLite {db}: cannot be created ({parent} is not writable)",
                "pass --db PATH (or set RLCLEANUP_DB) to a writable place",
                {"backend": "sqlite", "path": str(db)},
            ), Finding.info(check="approvers", detail="none (no record store)")
        store = Finding.ok(
            "record store",
            f"SQLite {db} (no records yet: the first `rlcleanup run` creates it)",
            facts={"backend": "sqlite", "path": str(db), "exists": False},
        )
        return store, _no_approvers()

    def open_and_list() -> tuple[str, list[tuple[str, list[str], bool]]]:
        opened = open_store(chosen, db, project)
        approvers = list_approvers(opened.store)
        return opened.where, [(a.approver_id, list(a.allowed_prefixes), a.revoked_at is None) for a in approvers]

    facts: dict[str, object] = {"backend": str(chosen)}
    facts |= (
        {"path": str(db)}
        if chosen == StoreBackend.sqlite
        else {"project": project or os.environ.get("GOOGLE_CLOUD_PROJECT")}
    )
    try:
        where, approvers = _bounded(STORE_DEADLINE_SECONDS, open_and_list)
    except Exception as exc:
        # A StoreSetupError's own words name the fix; anything else (a timeout, a defect) gets the general one.
        fix = None if isinstance(exc, StoreSetupError) else "check the --backend/--db/--project given, and the network"
        return Finding.fail("record store", _one_line(exc), fix, facts | {"reachable": False}), Finding.info(
            check="approvers", detail="not read (the record store is not usable)"
        )
    store = Finding.ok("record store", where, facts=facts | {"reachable": True})
    if not approvers:
        return store, _no_approvers()
    active = [(a, prefixes) for a, prefixes, live in approvers if live]
    lines = "; ".join(f"{a}: {', '.join(prefixes)}" for a, prefixes in active) or "every one revoked"
    revoked = len(approvers) - len(active)
    return store, Finding.ok(
        check="approvers",
        detail=lines + (f" ({revoked} revoked)" if revoked else ""),
        facts={"approvers": [{"approver_id": a, "prefixes": p, "active": live} for a, p, live in approvers]},
    )


def _no_approvers() -> Finding:
    return Finding.info(
        check="approvers",
        detail="none registered (needed only to grant a publish or a reclaim)",
        fix="`rlcleanup keygen --id NAME` then `rlcleanup approver add NAME --public-key KEY --prefix DEST`",
        facts={"approvers": []},
    )


def _preserve_root() -> list[Finding]:
    """Where `rlcleanup run` preserves evidence (its default), and the functions' own root when one is set."""
    from rlcleanup.paths import default_preserve_root

    root = default_preserve_root()
    existing = next((p for p in (root, *root.parents) if p.exists()), Path("/"))
    writable = existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)
    facts: dict[str, object] = {"path": str(root), "writable": writable}
    found = [
        Finding.ok("preserve root", f"{root} (writable; `run --preserve-to` overrides)", facts=facts)
        if writable
        else Finding.fail(
            "preserve root",
            f"{root} is not writable ({existing} refuses)",
            "set XDG_STATE_HOME to a writable directory, or pass `run --preserve-to DIR`",
            facts,
        )
    ]
    functions_root = os.environ.get("RLCLEANUP_PRESERVE_ROOT", "").strip()
    if functions_root:
        found.append(
            Finding.info(
                "functions preserve to",
                f"{functions_root} (RLCLEANUP_PRESERVE_ROOT: the stack's and a deployment's functions)",
                facts={"uri": functions_root},
            )
        )
    return found


def _gs() -> Finding:
    from rlcleanup.runtime.diagnostics import google_credentials

    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if emulator:  # the client goes to the emulator, anonymously: whether it answers is all that matters
        return _emulator("gs://", "STORAGE_EMULATOR_HOST", emulator)
    try:
        found = _bounded(PROBE_DEADLINE_SECONDS, google_credentials)
    except Exception as exc:
        return Finding.info(
            "gs://",
            f"Google credentials not determined: {_one_line(exc)}",
            "`gcloud auth application-default login`, or GOOGLE_APPLICATION_CREDENTIALS=KEY.json",
        )
    if not found.found:
        return Finding.info(
            "gs://",
            "no Google credentials (needed only for gs:// runs and Firestore)",
            "`gcloud auth application-default login`, or GOOGLE_APPLICATION_CREDENTIALS=KEY.json",
            {"credentials": None},
        )
    project = f", project {found.project}" if found.project else ""
    return Finding.ok(
        "gs://",
        f"Google Application Default Credentials ({found.kind}{project})",
        facts={"credentials": found.kind, "project": found.project},
    )


def _s3() -> Finding:
    from rlcleanup.runtime.diagnostics import s3_facts

    facts = s3_facts()
    endpoints = [
        {"name": e.name, "endpoint": e.endpoint, "region": e.region, "credentials": e.credentials, "buckets": e.buckets}
        for e in facts.endpoints
    ]
    if facts.problem:
        return Finding.fail("s3://", facts.problem, "correct the variable named", {"endpoints": endpoints})
    parts = [
        f"{e.name}: {e.endpoint or 'AWS'} ({e.region}), {e.credentials}"
        + (f", buckets {', '.join(e.buckets)}" if e.buckets else "")
        for e in facts.endpoints
    ]
    keyed = any(e.credentials != "none" for e in facts.endpoints)
    return Finding(
        check="s3://",
        state="ok" if keyed else "info",
        detail="; ".join(parts) + ("" if keyed else " (needed only for s3:// runs)"),
        fix=None if keyed else "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), see docs/s3.md",
        facts={"endpoints": endpoints},
    )


def _hf() -> Finding:
    from rlcleanup.runtime.diagnostics import shown_url
    from rlcleanup.settings import HubSettings, SettingsError, read

    try:
        hub = read(HubSettings, secret=True)
    except SettingsError as exc:
        return Finding.fail("hf://", str(exc), "correct the variable named")
    facts = {"endpoint": shown_url(hub.endpoint), "token": hub.token is not None}
    if hub.token:
        return Finding.ok("hf://", f"HF_TOKEN set, endpoint {facts['endpoint']}", facts=facts)
    return Finding.info(
        "hf://",
        f"no HF_TOKEN (needed only to publish to hf://), endpoint {facts['endpoint']}",
        "export HF_TOKEN (a write token for the repos you publish to)",
        facts,
    )


def _stack() -> Finding:
    from rlcleanup.paths import stack_dir
    from rlcleanup.stack import status

    where = stack_dir()
    try:
        states = _bounded(PROBE_DEADLINE_SECONDS * 2, lambda: status(where))
    except Exception as exc:
        return Finding.info("local stack", f"{where}: not probed: {_one_line(exc)}")
    if not states:
        return Finding.info(
            "local stack",
            f"none recorded in {where} (needed only for the emulator mode)",
            '`eval "$(rlcleanup stack up)"`',
            {"state_dir": str(where), "servers": {}},
        )
    running = sorted(name for name, state in states.items() if state == "running")
    others = sorted(f"{name} {state}" for name, state in states.items() if state != "running")
    detail = f"{len(running)} of {len(states)} server(s) running in {where}" + (
        f"; {', '.join(others)}" if others else ""
    )
    return Finding(
        check="local stack",
        state="ok" if not others else "info",
        detail=detail,
        fix=None if not others else "`rlcleanup stack restart NAME`, or `rlcleanup stack up` again",
        facts={"state_dir": str(where), "servers": states},
    )


def _notifications() -> Finding:
    from rlcleanup.runtime.diagnostics import notify_channels

    channels = notify_channels()
    facts: dict[str, object] = {"channels": list(channels.configured), "known": list(channels.known)}
    if channels.problem:
        return Finding.fail(
            "notifications",
            channels.problem,
            "set RLCLEANUP_NOTIFY_CHANNELS to known channels (docs/notifications.md)",
            facts,
        )
    if not channels.configured:
        return Finding.info(
            "notifications",
            f"no channel configured (known: {', '.join(channels.known)})",
            "RLCLEANUP_NOTIFY_WEBHOOK_URL, or RLCLEANUP_NOTIFY_SMTP_HOST and _SMTP_TO",
            facts,
        )
    return Finding.ok("notifications", ", ".join(channels.configured), facts=facts)


def _guarded(check: str, probe: Callable[[], Finding | list[Finding]]) -> list[Finding]:
    """A check that raised is a line saying so, never a traceback."""
    try:
        found = probe()
    except Exception as exc:
        return [Finding.fail(check, f"could not be checked: {_one_line(exc)}")]
    return found if isinstance(found, list) else [found]


def diagnose(backend: str | None, db: Path, project: str | None) -> Diagnosis:
    from rlcleanup.runtime.diagnostics import source_commit

    findings: list[Finding] = []
    findings += _guarded("settings", _settings)
    findings += _guarded("emulators", _emulators)
    findings += _guarded("record store", lambda: list(_record_store(backend, db, project)))
    findings += _guarded("preserve root", _preserve_root)
    findings += _guarded("gs://", _gs)
    findings += _guarded("s3://", _s3)
    findings += _guarded("hf://", _hf)
    findings += _guarded("local stack", _stack)
    findings += _guarded("notifications", _notifications)
    missing = [f.check for f in findings if f.state == "fail"]
    return Diagnosis(version=_version(), commit=source_commit(), usable=not missing, missing=missing, findings=findings)


_MARK = {"ok": "ok", "info": "--", "fail": "FAIL"}


def render(diagnosis: Diagnosis) -> str:
    commit = f"commit {diagnosis.commit}" if diagnosis.commit else "commit unknown"
    lines = [f"rlcleanup {diagnosis.version} ({commit})"]
    width = max(len(f.check) for f in diagnosis.findings)
    for f in diagnosis.findings:
        lines.append(f"{_MARK[f.state]:4}  {f.check:{width}}  {f.detail}")
        if f.fix:
            lines.append(f"{'':4}  {'':{width}}  fix: {f.fix}")
    if diagnosis.usable:
        lines.append("usable: everything `rlcleanup run` needs is here (-- lines are needed only by some runs)")
    else:
        lines.append(f"not usable: {', '.join(diagnosis.missing)} (the FAIL lines say how to fix each)")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    from rlcleanup.cli.stores import EXIT_CODES

    @app.command(epilog=EXIT_CODES.replace("1 not found", "1 something needed is missing"))
    @store_options
    def doctor(*, store: StoreChoice) -> None:
        """What this rlcleanup would use, each probed now: record store, preserve root, credentials per scheme,
        local stack, approvers, notification channels, version. Exit 1 when something needed is missing.

        Never prints a secret: credentials are present or not, endpoint URLs lose any user, password or query."""
        diagnosis = diagnose(backend_name(store.backend), db_path(store.db), store.project)
        if store.as_json:
            typer.echo(neutralise(json.dumps(diagnosis.model_dump(mode="json"), indent=2)))
        else:
            typer.echo(neutralise(render(diagnosis)))
        if not diagnosis.usable:
            raise typer.Exit(1)
