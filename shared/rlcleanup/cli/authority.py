"""Authority commands: keygen, approver add, grant, grants, cause. Registered onto the main app by `register(app)`.

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

from rlcleanup.ports.records import RecordStore
from rlcleanup.runtime.embedded import DEFAULT_DB, DEFAULT_PRESERVE

DbOption = Annotated[Path, typer.Option("--db", help="SQLite records file (embedded default)")]
BackendOption = Annotated[
    str | None, typer.Option(help="sqlite | firestore (default: firestore when FIRESTORE_EMULATOR_HOST is set)")
]
ProjectOption = Annotated[str | None, typer.Option(help="Firestore / Pub/Sub project (default: $GOOGLE_CLOUD_PROJECT)")]
_DURATION = re.compile(r"^(\d+)([smhd])$")


def _fail(message: str, code: int = 3) -> None:
    typer.echo(f"rlcleanup: {message}", err=True)
    raise typer.Exit(code)


def parse_duration(text: str) -> timedelta:
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration like 30m, 24h or 7d")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
    return timedelta(**{unit: int(m.group(1))})


def _store(backend: str | None, db: Path, project: str | None) -> RecordStore:
    chosen = backend or ("firestore" if os.environ.get("FIRESTORE_EMULATOR_HOST") else "sqlite")
    if chosen == "firestore":
        from rlcleanup.adapters.firestore_records import FirestoreRecordStore

        project = project or os.environ.get("GOOGLE_CLOUD_PROJECT")
        if not project:
            _fail("Firestore needs --project or GOOGLE_CLOUD_PROJECT", 2)
        return FirestoreRecordStore(project=str(project))
    if chosen != "sqlite":
        _fail(f"unknown backend {chosen!r} (sqlite | firestore)", 2)
    from rlcleanup.adapters.sqlite_records import SqliteRecordStore

    return SqliteRecordStore(db)


def keygen(
    out: Annotated[Path, typer.Option("--out", help="where to write the Ed25519 private key (PEM, mode 600)")],
    approver_id: Annotated[str | None, typer.Option("--id", help="approver id (default: the file's stem)")] = None,
) -> None:
    """Create an approver signing key; prints the public key and the command that registers it."""
    from rlcleanup.authority.grants import new_key, private_pem, public_b64

    if out.exists():
        _fail(f"{out} exists: refusing to overwrite a key", 2)
    key = new_key()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_pem(key))
    public = public_b64(key)
    typer.echo(f"private key: {out} (keep it secret)\npublic key:  {public}\nregister it with:")
    typer.echo(f"  rlcleanup approver add {approver_id or out.stem} --public-key {public} --prefix gs://BUCKET/PREFIX")


approver_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Approvers whose signed grants count.")


@approver_app.command("add")
def approver_add(
    approver_id: Annotated[str, typer.Argument(help="approver id; grants name it in granted_by")],
    public_key: Annotated[str, typer.Option("--public-key", help="base64 raw Ed25519 public key (from keygen)")],
    prefix: Annotated[list[str], typer.Option("--prefix", help="allowed destination prefix (repeatable)")],
    db: DbOption = DEFAULT_DB,
    backend: BackendOption = None,
    project: ProjectOption = None,
) -> None:
    """Register (or replace) an approver: its public key and the destination prefixes it may grant."""
    from pydantic import ValidationError

    from rlcleanup.authority.grants import Approver, register_approver

    try:
        approver = Approver(approver_id=approver_id, public_key=public_key, allowed_prefixes=prefix)
        register_approver(_store(backend, db, project), approver)
    except (ValidationError, ValueError) as exc:
        _fail(f"invalid approver: {exc}", 2)
    typer.echo(f"approver {approver_id} may grant under: {', '.join(prefix)}")


def _digest(store: RecordStore, run_id: str, step: int) -> str:
    record = store.get(run_id)
    candidate = next((c for c in record.candidates if c.step == step), None) if record else None
    if candidate is None or not candidate.digest:
        _fail(f"no candidate at step {step} in run {run_id!r}: pass --digest or process the run first", 1)
    assert candidate is not None and candidate.digest is not None
    return candidate.digest


def grant(
    run_id: Annotated[str, typer.Argument(help="the run the grant is for")],
    action: Annotated[str, typer.Option(help="publish | handoff | register | reclaim | cancel")],
    key: Annotated[Path, typer.Option("--key", help="approver private key (from keygen)")],
    destination: Annotated[str | None, typer.Option(help="destination URI (not for cancel)")] = None,
    step: Annotated[int | None, typer.Option(help="candidate step (default: the selected one)")] = None,
    digest: Annotated[str | None, typer.Option(help="candidate digest (default: looked up in the record)")] = None,
    visibility: Annotated[str, typer.Option(help="private | internal | public")] = "private",
    expires: Annotated[str, typer.Option(help="lifetime, e.g. 30m, 24h, 7d")] = "24h",
    reason: Annotated[str, typer.Option(help="why (kept with the grant)")] = "",
    approver: Annotated[str | None, typer.Option(help="approver id (default: the key file's stem)")] = None,
    db: DbOption = DEFAULT_DB,
    backend: BackendOption = None,
    project: ProjectOption = None,
) -> None:
    """Sign a grant; apply it (embedded) or publish it to authority-grants (Pub/Sub); prints its id and state."""
    from pydantic import ValidationError

    from rlcleanup.authority.grants import Grant, load_private_key, sign

    try:
        private = load_private_key(key.read_bytes())
        lifetime = parse_duration(expires)
    except (OSError, ValueError) as exc:
        _fail(str(exc), 2)
        return
    project = project or os.environ.get("GOOGLE_CLOUD_PROJECT")
    cloud = bool(os.environ.get("PUBSUB_EMULATOR_HOST") or (project and backend != "sqlite"))
    store = _store(backend or ("firestore" if cloud else None), db, project)
    if action != "cancel" and digest is None:
        record = store.get(run_id)
        chosen = step if step is not None else (record.selection.step if record and record.selection else None)
        if chosen is None:
            _fail("selection is unresolved: pass --step N", 2)
        step = chosen
        digest = _digest(store, run_id, int(step or 0))
    now = datetime.now(UTC)
    try:
        g = Grant.model_validate(
            {
                "run_id": run_id, "action": action, "step": step, "digest": digest, "destination": destination,
                "visibility": visibility, "granted_by": approver or key.stem, "granted_at": now,
                "expires_at": now + lifetime, "reason": reason,
            }
        )  # fmt: skip
    except ValidationError as exc:
        _fail(f"invalid grant: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}", 2)
        return
    data = json.dumps(sign(g, private)).encode()
    if cloud:
        from rlcleanup.adapters.pubsub_bus import PubSubBus

        message_id = PubSubBus(project or "rlcleanup-local").publish("authority-grants", data, {"run_id": run_id})
        typer.echo(f"grant {g.grant_id} published to authority-grants (message {message_id})")
        return
    from rlcleanup.runtime.embedded import EmbeddedStack

    stack = EmbeddedStack.create(db, str(DEFAULT_PRESERVE.resolve()))
    stack.bus.publish("authority-grants", data, {"run_id": run_id})
    stack.bus.drain()
    doc = stack.ports.records.get_doc(f"runs/{run_id}/grants", g.grant_id) or {}
    outcome = doc.get("outcome") or {}
    state = outcome.get("state") or doc.get("state", "?")
    typer.echo(
        f"grant {g.grant_id}: {state}" + (f" ({doc['refusal']}: {doc.get('detail')})" if doc.get("refusal") else "")
    )
    if doc.get("refusal"):
        raise typer.Exit(3)


def grants(
    run_id: str,
    db: DbOption = DEFAULT_DB,
    backend: BackendOption = None,
    project: ProjectOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List a run's grants with their state (pending, applying, used, refused, expired)."""
    docs = _store(backend, db, project).list_docs(f"runs/{run_id}/grants")
    rows: list[dict[str, Any]] = []
    for gid, doc in docs:
        g = doc.get("grant") or {}
        out = doc.get("outcome") or {}
        rows.append(
            {
                "grant_id": gid, "action": g.get("action"), "state": doc.get("state"), "result": out.get("state"),
                "refusal": doc.get("refusal"), "detail": doc.get("detail"), "step": g.get("step"),
                "destination": g.get("destination"), "granted_by": g.get("granted_by"),
                "expires_at": g.get("expires_at"), "replays": doc.get("replays", 0),
            }
        )  # fmt: skip
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"no grants for run {run_id}")
        raise typer.Exit(1)
    for r in rows:
        why = f"  {r['refusal']}: {r['detail']}" if r["refusal"] else ""
        typer.echo(
            f"{r['grant_id']}  {r['action'] or '?':8} {r['state']:8} {r['result'] or '':12} {r['destination'] or ''}{why}"
        )


def cause(
    run_id: str,
    signature_id: Annotated[str, typer.Argument(help="from the pre-cancel capture.json `reproducing` list")],
    note: Annotated[str, typer.Option(help="the recorded cause")],
    by: Annotated[str, typer.Option(help="who recorded it")] = os.environ.get("USER", "operator"),
    db: DbOption = DEFAULT_DB,
) -> None:
    """Record the cause of a reproducing failure (embedded): withheld cancel grants are retried."""
    from rlcleanup.runtime.authority_handlers import record_cause
    from rlcleanup.runtime.embedded import EmbeddedStack

    stack = EmbeddedStack.create(db, str(DEFAULT_PRESERVE.resolve()))
    typer.echo(record_cause(stack.ports, run_id, signature_id, note, by, datetime.now(UTC)))
    stack.bus.drain()


def register(app: typer.Typer) -> None:
    app.command()(keygen)
    app.add_typer(approver_app, name="approver")
    app.command()(grant)
    app.command()(grants)
    app.command()(cause)
