"""What rlcleanup tells downstream about a model it moved: the `model-published` / `model-reclaimed` /
`model-restored` events (models/model_events.py, docs/events-out.md).

An event is built from the completion record *after* the outcome is filed on it, never from the action's return
value: the record says the publish was verified (its authority action is `published` / `handed_off`) or the
reclaim done (`reclaimed`), or there is nothing to announce. The wiring publishes what this returns
(runtime/authority_handlers.py, runtime/hub_job.py, the `restore` command).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rlcleanup.authority.grants import Grant
from rlcleanup.authority.quarantine import QuarantineEntry
from rlcleanup.models.model_events import (
    GrantRef,
    ModelEvent,
    ModelEventData,
    ModelEventType,
    event_id,
    event_source,
)
from rlcleanup.models.record import AuthorityAction, Candidate, CompletionRecord

# The record's authority-action states that announce a model, and as what.
ANNOUNCED_STATES = {
    "published": ModelEventType.published,
    "handed_off": ModelEventType.published,
    "reclaimed": ModelEventType.reclaimed,
}


def _candidate(record: CompletionRecord, step: int | None, digest: str | None) -> Candidate | None:
    return next((c for c in record.candidates if c.step == step and c.digest == digest), None)


def _event(
    kind: ModelEventType,
    record: CompletionRecord,
    grant: GrantRef,
    *,
    step: int | None,
    digest: str | None,
    destination: str | None,
    at: datetime,
    project: str | None,
    record_url: str | None,
    **extra: Any,
) -> ModelEvent:
    candidate = _candidate(record, step, digest)
    data = ModelEventData(
        run_id=record.run_id,
        run_uri=record.run_uri,
        step=step,
        destination=destination,
        manifest_digest=digest,
        model_identity=candidate.model_identity if candidate else None,
        base_model=(candidate.base_model if candidate else None) or record.base_model,
        kind=candidate.kind.value if candidate else None,
        grant=grant,
        record_url=record_url,
        **extra,
    )
    return ModelEvent(
        type=kind,
        source=event_source(project),
        id=event_id(kind, grant.grant_id, destination, digest, tuple(data.restored_objects)),
        time=at,
        subject=f"runs/{record.run_id}/steps/{step}",
        data=data,
    )


def grant_event(
    record: CompletionRecord, grant: Grant, gid: str, at: datetime, *, project: str | None, record_url: str | None
) -> ModelEvent | None:
    """The event the record now says grant `gid` earned, or None (refused, registered, cleared, still applying)."""
    action: AuthorityAction | None = next((a for a in record.authority_actions if a.grant_id == gid), None)
    if action is None or action.state not in ANNOUNCED_STATES:
        return None
    kind = ANNOUNCED_STATES[action.state]
    destination = action.destination or grant.destination
    return _event(
        kind,
        record,
        GrantRef(grant_id=gid, action=grant.action.value, granted_by=grant.granted_by),
        step=grant.step,
        digest=grant.digest,
        destination=destination,
        at=at,
        project=project,
        record_url=record_url,
        provenance_uri=action.uri,
        verified_objects=action.verified_objects,
        reclaimed_bytes=action.reclaimed_bytes,
    )


def restore_events(
    record: CompletionRecord,
    restored: Iterable[QuarantineEntry],
    grants: dict[str, dict[str, Any]],
    at: datetime,
    *,
    project: str | None,
    record_url: str | None,
) -> list[ModelEvent]:
    """One `model-restored` per reclaim grant whose quarantined objects a restore put back. `grants`: the
    run's signed grants by id, as filed (the reclaim grant names the destination and its approver)."""
    by_grant: dict[str, list[QuarantineEntry]] = {}
    for entry in restored:
        by_grant.setdefault(entry.grant_id, []).append(entry)
    events = []
    for gid, group in sorted(by_grant.items()):
        signed = grants.get(gid) or {}
        first = group[0]
        ref = GrantRef(grant_id=gid, action=str(signed.get("action") or "reclaim"), granted_by=signed.get("granted_by"))
        events.append(
            _event(
                ModelEventType.restored,
                record,
                ref,
                step=first.step,
                digest=first.digest,
                destination=signed.get("destination"),
                at=at,
                project=project,
                record_url=record_url,
                provenance_uri=None,
                verified_objects=len(group),
                restored_objects=sorted(e.source for e in group),
            )
        )
    return events
