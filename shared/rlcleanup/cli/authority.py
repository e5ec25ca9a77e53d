"""Authority commands: keygen, grant, grants, cause (and `approver`, from cli/approvers.py). Registered onto the main app by `register(app)`.

Records: SQLite (--db, the embedded default) or Firestore (--backend firestore, or FIRESTORE_EMULATOR_HOST set).
`grant` applies the grant directly through the embedded stack, or publishes it to `authority-grants` when
PUBSUB_EMULATOR_HOST or GOOGLE_CLOUD_PROJECT is set (then the deployed apply-grant function carries it out).
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from rlcleanup.authority import ledger
from rlcleanup.authority.grants import Action, GrantState, Visibility
from rlcleanup.cli.approvers import approver_app
from rlcleanup.cli.destinations import (
    absolute_if_local,
    export_target_or_exit,
    gcs_credentials_problem,
    preserve_target_or_exit,
    scheme_typo,
)
from rlcleanup.cli.options import (
    DbOption,
    JsonOption,
    RunIdArg,
    StoreChoice,
    backend_name,
    db_path,
    store_options,
)
from rlcleanup.cli.options import open_or_exit as _open
from rlcleanup.cli.preview_text import render_preview
from rlcleanup.cli.stores import OperatorError, not_found, open_bus
from rlcleanup.cli.stores import fail as _fail
from rlcleanup.errors import PermanentError
from rlcleanup.paths import default_preserve_root, keys_dir
from rlcleanup.ports.bus import Bus
from rlcleanup.ports.hub import is_hub, repo_of
from rlcleanup.ports.records import RunRecords
from rlcleanup.runtime.backends import OpenStore, StoreBackend, open_storage
from rlcleanup.runtime.topology import load_topology
from rlcleanup.settings import platform
from rlcleanup.textsafe import neutralise

_DURATION = re.compile(r"^(\d+)([smhd])$")


REFUSED_STATES = {GrantState.refused.value, GrantState.expired.value}


def parse_duration(text: str) -> timedelta:
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration like 30m, 24h or 7d")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
    return timedelta(**{unit: int(m.group(1))})


def _bus(project: str | None) -> Bus:
    """The Pub/Sub bus a grant is published on, checked before anything is signed (a dead emulator: exit 3 now,
    not a 30 s publish timeout after the work)."""
    try:
        return open_bus(project)
    except OperatorError as exc:
        typer.echo(f"rlcleanup: {exc}", err=True)
        raise typer.Exit(exc.code) from exc


def key_path(key: str) -> Path:
    """--key takes a file, or an approver id whose key keygen wrote under $XDG_CONFIG_HOME/rlcleanup/keys."""
    path = Path(key).expanduser()
    if not path.exists() and "/" not in key and not key.endswith(".pem"):
        return keys_dir() / f"{key}.pem"
    return path


def keygen(
    approver_id: Annotated[
        str | None, typer.Option("--id", help="approver id (default: the --out file's stem, else $USER)")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="where to write the Ed25519 private key, PEM mode 600 (default: $XDG_CONFIG_HOME/rlcleanup/keys/ID.pem)",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create an approver signing key; prints the public key and the command that registers it."""
    from rlcleanup.authority.grants import new_key, private_pem, public_b64

    approver_id = approver_id or (out.stem if out else platform().user or "approver")
    out = out or keys_dir() / f"{approver_id}.pem"
    if out.exists():
        _fail(f"{out} exists: refusing to overwrite a key", 2)
    key = new_key()
    out.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_pem(key))
    public = public_b64(key)
    register_line = f"rlcleanup approver add {approver_id} --public-key {public} --prefix gs://BUCKET/PREFIX"
    key_flag = f"--key {approver_id}" if out == keys_dir() / f"{approver_id}.pem" else f"--key {out}"
    if as_json:
        shown = {"approver_id": approver_id, "private_key_path": str(out), "public_key": public}
        typer.echo(json.dumps(shown | {"register_with": register_line, "sign_with": key_flag}, indent=2))
        return
    typer.echo(f"private key: {out} (keep it secret)\npublic key:  {public}\nregister it with:")
    typer.echo(f"  {register_line}  (or a local dir)")
    typer.echo(f"sign grants with: {key_flag}")


def _digest(store: RunRecords, run_id: str, step: int) -> str:
    record = store.get(run_id)
    candidate = next((c for c in record.candidates if c.step == step), None) if record else None
    if candidate is None or not candidate.digest:
        steps = [c.step for c in record.candidates] if record else []
        _fail(f"run {run_id!r} has no candidate at step {step} (its candidates: {steps or 'none'})", 1)
    assert candidate is not None and candidate.digest is not None
    return candidate.digest


def _no_such_run(opened: OpenStore, run_id: str) -> None:
    error = not_found(opened, run_id, f"no such run {run_id!r} in {opened.where}")
    _fail(str(error), error.code)


@store_options
def grant(  # noqa: C901 -- a typer command: one check per option before anything is signed
    run_id: RunIdArg,
    action: Annotated[Action, typer.Option(help="what the grant authorizes")],
    key: Annotated[
        str, typer.Option("--key", help="approver private key: a PEM file, or an approver id from `keygen --id`")
    ],
    destination: Annotated[
        str | None,
        typer.Option(
            "--destination",
            "--to",
            help="destination: gs://bucket/path, hf://namespace/repo or a local directory (not for cancel; "
            "preserve: durable storage outside the run's roots)",
        ),
    ] = None,
    step: Annotated[int | None, typer.Option(help="candidate step (default: the selected one)")] = None,
    digest: Annotated[str | None, typer.Option(help="candidate digest (default: looked up in the record)")] = None,
    visibility: Annotated[Visibility, typer.Option(help="the widest audience you accept")] = Visibility.private,
    expires: Annotated[str, typer.Option(help="lifetime, e.g. 30m, 24h, 7d")] = "24h",
    reason: Annotated[str, typer.Option(help="why (kept with the grant)")] = "",
    approver: Annotated[str | None, typer.Option(help="approver id (default: the key file's stem)")] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="sign nothing, apply nothing: print the exact objects, bytes, destination visibility "
            "(reclaim: the deletion list) this grant would act on",
        ),
    ] = False,
    *,
    store: StoreChoice,
) -> None:
    """Sign a grant; apply it (embedded) or publish it to authority-grants (Pub/Sub); prints its id and state."""
    from pydantic import ValidationError

    from rlcleanup.authority.grants import Grant, load_private_key, sign

    key_file = key_path(key)
    try:
        private = load_private_key(key_file.read_bytes())
        lifetime = parse_duration(expires)
    except (OSError, ValueError) as exc:
        _fail(f"{exc}" if not isinstance(exc, FileNotFoundError) else f"no key file {key_file} (`rlcleanup keygen`)", 2)
        return
    if destination:
        typo = scheme_typo(destination)
        if typo:
            _fail(typo, 2)
        destination = absolute_if_local(destination)
        if is_hub(destination):
            try:
                repo_of(destination)  # huggingface_hub's own validator, before anything is signed
            except ValueError as exc:
                _fail(f"invalid destination: {exc}", 2)
    project = store.project or platform().project
    chosen_backend = backend_name(store.backend)
    cloud = bool(platform().pubsub_emulator_host or (project and chosen_backend != StoreBackend.sqlite))
    opened = _open(chosen_backend or (StoreBackend.firestore if cloud else None), store.db, project)
    bus = _bus(project) if cloud and not dry_run else None  # a dry run publishes nothing
    records = opened.store
    record = records.get(run_id)
    if record is None:
        _no_such_run(opened, run_id)
        return
    asked_step = step  # the preview this command follows was filed under the step as asked
    if action is Action.export:  # pins the request's bytes; the destination is where the request exports to
        step, digest, destination = export_target_or_exit(record, step, digest, destination)
    elif action is Action.preserve:  # pins the checkpoint's manifest as listed now; the destination is the approver's
        step, digest = preserve_target_or_exit(record, step, digest)
        if not destination:
            _fail("a preserve grant needs --to URI: durable storage outside the run's roots", 2)
    elif action is not Action.cancel and digest is None:
        chosen = step if step is not None else (record.selection.step if record.selection else None)
        if chosen is None:
            valid = [c.step for c in record.candidates if c.valid]
            _fail(f"selection is unresolved: pass --step N (valid candidates: {valid or 'none'})", 2)
        step = chosen
        digest = _digest(records, run_id, int(step or 0))
    problem = gcs_credentials_problem(destination)  # the preview reads the bucket's IAM back too
    if problem:
        _fail(problem, 3)
    now = datetime.now(UTC)
    try:
        g = Grant.model_validate(
            {
                "run_id": run_id, "action": action.value, "step": step, "digest": digest, "destination": destination,
                "visibility": visibility.value, "granted_by": approver or key_file.stem, "granted_at": now,
                "expires_at": now + lifetime, "reason": reason,
            }
        )  # fmt: skip
    except ValidationError as exc:
        _fail(f"invalid grant: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}", 2)
        return
    previewed = _PreviewCheck(records, record, action.value, asked_step, destination, g.granted_by)
    if dry_run:  # signed in memory, never sent: the preview verifies it as apply-grant would
        _print_preview(record, g, json.dumps(sign(g, private)).encode(), now, store.as_json, records, previewed)
        return
    if action not in {Action.cancel, Action.export, Action.preserve}:  # these pin their own digest at signing
        moved = previewed.moved(step, digest)
        if moved:
            _fail(
                f"{moved}. Nothing was signed: preview it again (--dry-run), or sign exactly what you previewed "
                "with --digest <the previewed digest> (refused if the candidate no longer has it)",
                3,
            )
    data = json.dumps(sign(g, private)).encode()
    grants_topic = load_topology().trigger_of("apply-grant")  # where signed grants go (topology.yaml)
    if bus is not None:
        message_id = bus.publish(grants_topic, data, {"run_id": run_id})
        if store.as_json:
            typer.echo(json.dumps({"grant_id": g.grant_id, "state": "published", "message_id": message_id}))
        else:
            typer.echo(f"grant {g.grant_id} published to {grants_topic} (message {message_id})")
        return
    from rlcleanup.runtime.embedded import EmbeddedStack

    stack = EmbeddedStack.create(db_path(store.db), str(default_preserve_root()))
    stack.bus.publish(grants_topic, data, {"run_id": run_id})
    stack.bus.drain()
    filing = ledger.filing_of(stack.ports.records, run_id, g.grant_id, data)
    doc = filing.model_dump(mode="json") if filing is not None else {}
    if not doc:  # every message admit sees is filed: none means the grant never reached it
        _fail(f"grant {g.grant_id} was not filed: the grant's outcome is unknown (`rlcleanup grants {run_id}`)", 3)
    outcome = doc.get("outcome") or {}
    refused = bool(doc.get("refusal")) or doc.get("state") in REFUSED_STATES
    state = outcome.get("state") or doc.get("state", "?")
    after = stack.ports.records.get(run_id)
    if store.as_json:
        row = {
            "grant_id": g.grant_id, "action": action.value, "state": state, "refusal": doc.get("refusal"),
            "detail": doc.get("detail") or outcome.get("detail"), "record_status": after.status.value if after else None,
            "remaining_work": after.remaining_work if after else [],
        }  # fmt: skip
        typer.echo(json.dumps(row, indent=2))
    else:
        typer.echo(
            f"grant {g.grant_id}: {state}"
            + (
                f" ({doc['refusal']}: {neutralise(str(doc.get('detail')), keep_newlines=False)})"
                if doc.get("refusal")
                else ""
            )
            + (
                f"\n  {neutralise(outcome['detail'], keep_newlines=False)}"
                if outcome.get("detail") and not doc.get("refusal")
                else ""
            )
        )
        if after is not None:
            left = f"{len(after.remaining_work)} item(s) left" if after.remaining_work else "nothing left to do"
            typer.echo(f"record {run_id}: {after.status.value}, {left}")
    if refused:
        raise typer.Exit(3)  # docs/authority.md §3: a refused (or expired) grant exits 3 with its refusal word


class _PreviewCheck:
    """The approver's last preview of this command (authority/previewed.py): filed by a dry run, compared by the
    grant that follows it."""

    def __init__(self, store: RunRecords, record: Any, action: str, step: int | None, dest: str | None, who: str):
        from rlcleanup.authority.previewed import preview_key

        self.store, self.record, self.key = store, record, preview_key(action, step, dest, who)

    def remember(self, step: int | None, digest: str | None, now: datetime) -> None:
        from rlcleanup.authority.previewed import remember_preview, seen_artifact

        seen = seen_artifact(open_storage(), self.record, step, digest)
        remember_preview(self.store, self.record.run_id, self.key, seen, now)

    def moved(self, step: int | None, digest: str | None) -> str | None:
        from rlcleanup.authority.previewed import SeenArtifact, moved_since_preview, seen_artifact

        def seen_now() -> SeenArtifact:  # listed only when a preview exists to compare with
            return seen_artifact(open_storage(), self.record, step, digest)

        return moved_since_preview(self.store, self.record.run_id, self.key, seen_now)


def _print_preview(
    record: Any, g: Any, signed: bytes, now: datetime, as_json: bool, store: Any, previewed: _PreviewCheck
) -> None:
    from rlcleanup.authority.export import ExportContext
    from rlcleanup.authority.preview import preview_signed
    from rlcleanup.runtime.ports import export_submitter, hugging_face_hub
    from rlcleanup.settings import load_settings

    prefixes = load_settings().allowed_destination_prefixes  # the bound apply-grant enforces in this deployment
    settings = load_settings()
    exports = ExportContext(settings.export, lambda name: export_submitter(name, settings), store)
    preview = preview_signed(
        open_storage(),
        record,
        signed,
        now,
        store,
        deployment_prefixes=prefixes,
        hub=hugging_face_hub,
        export_context=exports,
    )
    if preview["would"] != "refuse" and g.action not in {Action.cancel, Action.export, Action.preserve}:
        previewed.remember(g.step, g.digest, now)  # the grant command that follows signs only this
    if as_json:
        typer.echo(json.dumps(preview, indent=2))
    else:
        typer.echo(neutralise(render_preview(preview)))  # paths and details in a preview are a run's data
    if preview["would"] == "refuse":
        raise typer.Exit(3)


@store_options
def grants(run_id: RunIdArg, *, store: StoreChoice) -> None:
    """List a run's grants with their state (pending, applying, used, refused, expired) and result."""
    opened = store.open_or_exit()
    records = opened.store
    record = records.get(run_id)
    if record is None:
        _no_such_run(opened, run_id)
    superseded = {s.grant_id: s.reason for s in record.superseded_grants} if record else {}
    # In the order they arrived (ids are random), as the record's authority_actions list them.
    filed = sorted(ledger.list_grants(records, run_id), key=lambda kv: (kv[1].received_at, kv[0]))
    docs = [(gid, doc.model_dump(mode="json")) for gid, doc in filed]  # as `--json` prints them
    rows: list[dict[str, Any]] = []
    revoked = _revocations(records, {str((doc.get("grant") or {}).get("granted_by")) for _, doc in docs})
    for gid, doc in docs:
        g = doc.get("grant") or {}
        out = doc.get("outcome") or {}
        rows.append(
            {
                "grant_id": gid, "action": g.get("action"), "state": doc.get("state"), "result": out.get("state"),
                "refusal": doc.get("refusal"), "detail": doc.get("detail"), "step": g.get("step"),
                "destination": g.get("destination"), "granted_by": g.get("granted_by"),
                "expires_at": g.get("expires_at"), "replays": doc.get("replays", 0),
                "progress": doc.get("progress"),  # a Hub upload job's files/bytes done
                # Used on an earlier record (before a rerun, another pass) for bytes the run no longer holds.
                "applies": gid not in superseded, "no_longer_applies": superseded.get(gid),
                # Its approver was revoked since: a grant not used yet is refused (approver_revoked), a used one
                # stays what it did.
                "approver_revoked": revoked.get(str(g.get("granted_by"))),
            }
        )  # fmt: skip
    if store.as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"no grants for run {run_id}")
        return
    typer.echo(f"{'grant':16}  {'action':8} {'state':8} {'result':12} {'step':>5}  destination")
    for r in rows:
        # A refused grant's result is "refused" too: print the reason there instead of the same word twice.
        result = r["refusal"] if r["refusal"] else (r["result"] or "")
        why = f"  ({r['detail']})" if r["refusal"] and r["detail"] else ""
        if r["progress"] and not why:
            up = r["progress"]
            why = f"  ({up['files_done']}/{up['files_total']} files, {up['bytes_done']}/{up['bytes_total']} bytes)"
        if r["no_longer_applies"]:
            why = f"  (no longer applies: {r['no_longer_applies']})"
        elif r["approver_revoked"] and r["state"] in {"pending", "applying"}:
            why = f"  (will be refused: {r['approver_revoked']})"
        elif r["approver_revoked"]:
            why += f"  (approver revoked since: {r['approver_revoked']})"
        step = "" if r["step"] is None else str(r["step"])
        line = (
            f"{r['grant_id'][:16]:16}  {r['action'] or '?':8} {r['state']:8} {result:12} {step:>5}  "
            f"{r['destination'] or ''}{why}"
        )
        typer.echo(neutralise(line, keep_newlines=False))  # one grant, one line: a detail cannot add lines


def _revocations(store: RunRecords, approver_ids: set[str]) -> dict[str, str]:
    """approver id -> why its grants no longer count, for the revoked ones among these."""
    from rlcleanup.authority.grants import get_approver, revocation

    out: dict[str, str] = {}
    for approver_id in approver_ids:
        # A refused forgery's `granted_by` is whatever was sent: only a well-formed id is looked up.
        approver = get_approver(store, approver_id) if re.fullmatch(r"[A-Za-z0-9._=-]{1,200}", approver_id) else None
        why = revocation(store, approver) if approver is not None else None
        if why:
            out[approver_id] = why
    return out


def cause(
    run_id: RunIdArg,
    signature_id: Annotated[str, typer.Argument(help="from the pre-cancel capture.json `reproducing` list")],
    note: Annotated[str, typer.Option(help="the recorded cause")],
    by: Annotated[str, typer.Option(help="who recorded it")] = (platform().user or "operator"),
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record the cause of a reproducing failure (embedded): withheld cancel grants are retried."""
    from rlcleanup.runtime.authority_handlers import record_cause
    from rlcleanup.runtime.embedded import EmbeddedStack

    stack = EmbeddedStack.create(db_path(db), str(default_preserve_root()))
    at = datetime.now(UTC)
    try:
        retried = record_cause(stack.ports, run_id, signature_id, note, by, at)
    except PermanentError as exc:  # a signature id no capture of this run observed: nothing recorded
        typer.echo(neutralise(f"refused ({exc.code}): {exc}"), err=True)
        raise typer.Exit(3) from None
    stack.bus.drain()
    if as_json:
        shown = {"run_id": run_id, "signature_id": signature_id, "note": note, "recorded_by": by}
        typer.echo(neutralise(json.dumps(shown | {"at": at.isoformat(), "waiting_grants": retried}, indent=2)))
        return
    typer.echo(neutralise(retried))


def register(app: typer.Typer) -> None:
    app.command()(keygen)
    app.add_typer(approver_app, name="approver")
    app.command()(grant)
    app.command()(grants)
    app.command()(cause)
