"""`rlcleanup approver add | list | revoke`: the approvers whose signed grants count (authority/approvers.py).

Records: SQLite (--db) or Firestore (--backend firestore, or FIRESTORE_EMULATOR_HOST set), as every command.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer

from rlcleanup.cli.destinations import absolute_if_local
from rlcleanup.cli.options import StoreChoice, store_options
from rlcleanup.cli.stores import fail as _fail
from rlcleanup.settings import platform
from rlcleanup.textsafe import neutralise

approver_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Approvers whose signed grants count.")


@approver_app.command("add")
@store_options
def approver_add(
    approver_id: Annotated[str, typer.Argument(help="approver id; grants name it in granted_by")],
    public_key: Annotated[str, typer.Option("--public-key", help="base64 raw Ed25519 public key (from keygen)")],
    prefix: Annotated[
        list[str],
        typer.Option("--prefix", help="allowed destination prefix: gs://bucket/path or a local directory (repeatable)"),
    ],
    replace: Annotated[
        bool,
        typer.Option("--replace", help="replace the approver's key and prefixes (default: add these prefixes)"),
    ] = False,
    *,
    store: StoreChoice,
) -> None:
    """Register an approver, or add destination prefixes to one: its public key and the prefixes it may grant.

    An approver already registered keeps its prefixes (the new ones are added); a different key, or dropping
    prefixes, needs --replace. A revoked approver stays revoked: register a new id."""
    from pydantic import ValidationError

    from rlcleanup.authority.grants import Approver, get_approver, register_approver

    records = store.open_or_exit(create=True).store
    # A local prefix is stored absolute: grants name absolute destinations (`~/x` and `./x` alike).
    prefix = [absolute_if_local(p) for p in prefix]
    existing = get_approver(records, approver_id)
    kept: list[str] = []
    if existing is not None and existing.revoked_at is not None:
        _fail(f"approver {approver_id} was revoked: a revoked approver is never registered again; add a new id", 2)
    if existing is not None and not replace:
        if existing.public_key != public_key:
            _fail(
                f"approver {approver_id} is registered with another key: --replace replaces its key and prefixes "
                "(grants signed with the old key then stop verifying)",
                2,
            )
        kept = list(existing.allowed_prefixes)
    added = [p for p in dict.fromkeys(prefix) if p not in kept]
    try:
        approver = Approver(approver_id=approver_id, public_key=public_key, allowed_prefixes=kept + added)
        register_approver(records, approver)
    except (ValidationError, ValueError) as exc:
        _fail(f"invalid approver: {exc}", 2)
    if store.as_json:
        row = {"approver_id": approver_id, "allowed_prefixes": approver.allowed_prefixes, "kept": kept, "added": added}
        typer.echo(json.dumps(row | {"replaced": existing is not None and replace}, indent=2))
        return
    said = f" (kept {', '.join(kept)}; added {', '.join(added) or 'nothing new'})" if kept else ""
    if existing is not None and replace:
        said = f" (replaced {', '.join(existing.allowed_prefixes) or 'no prefixes'})"
    typer.echo(neutralise(f"approver {approver_id} may grant under: {', '.join(approver.allowed_prefixes)}{said}"))


@approver_app.command("list")
@store_options
def approver_list(
    *,
    store: StoreChoice,
) -> None:
    """Every registered approver: id, key, prefixes, and who revoked it when (revoked ones stay listed)."""
    from rlcleanup.authority.approvers import list_approvers

    approvers = list_approvers(store.open_or_exit().store)
    if store.as_json:
        typer.echo(json.dumps([a.model_dump(mode="json") for a in approvers], indent=2))
        return
    if not approvers:
        typer.echo("no approvers: `rlcleanup keygen --id NAME` then `rlcleanup approver add NAME ...`")
        return
    for a in approvers:
        state = (
            f"REVOKED {a.revoked_at.isoformat(timespec='seconds')} by {a.revoked_by}"
            + (f" ({a.revoked_reason})" if a.revoked_reason else "")
            if a.revoked_at
            else "active"
        )
        line = f"{a.approver_id}  {state}  key {a.public_key}  prefixes {', '.join(a.allowed_prefixes)}"
        typer.echo(neutralise(line, keep_newlines=False))


@approver_app.command("revoke")
@store_options
def approver_revoke(
    approver_id: Annotated[str, typer.Argument(help="the approver to revoke")],
    reason: Annotated[str, typer.Option(help="why (kept with the revocation)")] = "",
    by: Annotated[str, typer.Option(help="who revokes it (kept with the revocation)")] = (
        platform().user or "operator"
    ),
    *,
    store: StoreChoice,
) -> None:
    """Revoke an approver and its key: grants it signed that were not used yet are refused as `approver_revoked`
    (pending ones too); its used grants stay on their records. Recorded with who, when and why."""
    from rlcleanup.authority.approvers import UnknownApprover, revoke_approver

    try:
        revoked = revoke_approver(store.open_or_exit().store, approver_id, by=by, reason=reason, now=datetime.now(UTC))
    except UnknownApprover:
        _fail(f"no approver {approver_id!r} is registered (`rlcleanup approver list`)", 1)
        return
    if store.as_json:
        typer.echo(json.dumps(revoked.model_dump(mode="json"), indent=2))
        return
    assert revoked.revoked_at is not None
    typer.echo(
        neutralise(
            f"approver {approver_id} revoked at {revoked.revoked_at.isoformat(timespec='seconds')} by "
            f"{revoked.revoked_by}: grants it signed and not yet used are refused (approver_revoked)",
            keep_newlines=False,
        )
    )
