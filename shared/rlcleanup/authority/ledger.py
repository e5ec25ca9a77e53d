"""Where grants live: `runs/{run_id}/grants/{grant_id}`, one document per grant with its state, and the record's
summary of them (`authority_actions`, rebuilt from these documents by `sync_record`).

Only an authentic grant is filed under its own id. A forged message could name a real grant's id, so refused
unauthenticated messages are filed under a hash of their bytes instead and can never overwrite a real grant.
Every state a grant moves through is written here, in one room: `admit` (on arrival: refused, replayed, or
pending), `wait` (pending until its record or capture is ready), `set_state` (applying), `file_outcome` (used or
refused), `note_replay` (a delivery after it was used).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlcleanup.authority.grants import Action, Grant, GrantState, Refusal, Verdict
from rlcleanup.authority.outcome import Outcome
from rlcleanup.errors import redact_credentials
from rlcleanup.models.documents import EndedGrant
from rlcleanup.models.record import AuthorityAction, CompletionRecord
from rlcleanup.models.vocab import CandidateState, RecordStatus
from rlcleanup.ports import collections
from rlcleanup.ports.clock import Clock
from rlcleanup.ports.collections import Documents
from rlcleanup.ports.records import RunRecords
from rlcleanup.steps.facts import safe_run_id
from rlcleanup.steps.grant_binding import Binding, bind_grants
from rlcleanup.steps.remaining import still_open

READY = {RecordStatus.awaiting_authority, RecordStatus.complete}  # a record grants may act on
_ENVELOPE_REFUSALS = {Refusal.wrong_run, Refusal.wrong_action}
_REGISTERED = {"registered", "not_applicable"}


def is_ready(record: CompletionRecord | None) -> bool:
    """Wrap-up has finished the record. A finished record with a deadline is `needs_person` (steps/remaining.py):
    grants act on it too, since a grant may be exactly what meets the deadline; a record left to a person for any
    other reason (an unknown classification) has no deadlines and stays out of reach. So does one whose own Hub
    publish the audit flagged (authority/hub_audit.py): that concerns the run's repo, not what a grant does."""
    if record is None:
        return False
    person = bool(record.deadlines) or any(a.problems for a in record.hub_audits)
    return record.status in READY or (record.status is RecordStatus.needs_person and person)


class GrantAttempt(BaseModel):
    """A failed attempt of an upload job that was retried (and resumed)."""

    model_config = ConfigDict(extra="forbid")
    execution: str
    failed: str
    at: str
    progress: dict[str, int] | None = None


class GrantDoc(BaseModel):
    """runs/{run_id}/grants/{gid}: one grant as it arrived and every state it moved through."""

    model_config = ConfigDict(extra="forbid")
    grant: dict[str, Any] | None = None  # as sent: the signature can be re-verified later (pending grants are)
    signature: str | None = None
    state: GrantState
    refusal: Refusal | None = None
    detail: str = ""
    received_at: str = ""
    updated_at: str = ""
    outcome: dict[str, Any] | None = None  # the action's outcome (Outcome.as_doc), or the state a wait shows
    replays: int = 0  # deliveries after it was used
    progress: dict[str, int] | None = None  # an upload job's files/bytes done
    attempts: list[GrantAttempt] = Field(default_factory=list)

    @property
    def body(self) -> dict[str, Any]:
        return self.grant or {}

    @property
    def result(self) -> dict[str, Any]:
        return self.outcome or {}

    def message(self) -> bytes:
        """The grant message as it was signed, to verify again."""
        return json.dumps({"grant": self.grant, "signature": self.signature}).encode()


def grants_collection(run_id: str) -> str:
    return collections.GRANTS.path(run_id)


def grant_docs(records: RunRecords, run_id: str) -> Documents[GrantDoc]:
    """The run's grants, bound once to their model."""
    return collections.GRANTS.bind(records, run_id, GrantDoc)


def doc_id(verdict: Verdict, data: bytes) -> str:
    if verdict.authentic and verdict.grant is not None:
        return verdict.grant.grant_id
    return "unverified-" + hashlib.sha256(data).hexdigest()[:24]


def file_grant(
    records: RunRecords,
    run_id: str,
    gid: str,
    verdict: Verdict,
    state: GrantState,
    now: datetime,
    *,
    refusal: Refusal | None = None,
    detail: str = "",
) -> bool:
    """Create the grant's document; False when it already exists (the caller then decides: replay or resume)."""
    doc = GrantDoc(
        grant=verdict.raw,
        signature=verdict.signature,
        state=state,
        refusal=refusal,
        detail=redact_credentials(detail),
        received_at=now.isoformat(),
        updated_at=now.isoformat(),
    )
    return grant_docs(records, run_id).put(gid, doc, only_if_absent=True)


def set_state(
    records: RunRecords,
    run_id: str,
    gid: str,
    state: GrantState,
    now: datetime,
    *,
    refusal: Refusal | None = None,
    detail: str = "",
    outcome: dict[str, Any] | None = None,
) -> None:
    docs = grant_docs(records, run_id)
    doc = docs.get(gid) or GrantDoc(state=state)
    doc = doc.model_copy(
        update={"state": state, "refusal": refusal, "detail": redact_credentials(detail), "updated_at": now.isoformat()}
    )
    if outcome is not None:
        doc.outcome = _redacted(outcome)
    elif refusal is not None:  # refused while it waited: the wait's shown state ("pending") must not outlive it
        doc.outcome = None
    docs.put(gid, doc)


def _redacted(outcome: dict[str, Any]) -> dict[str, Any]:
    """An outcome as kept: its text fields without credentials (an upstream error can echo a header)."""
    return {
        k: redact_credentials(v) if k in {"detail", "failed"} and isinstance(v, str) else v for k, v in outcome.items()
    }


def get_grant_doc(records: RunRecords, run_id: str, gid: str) -> GrantDoc | None:
    return grant_docs(records, run_id).get(gid)


def filing_of(records: RunRecords, run_id: str, gid: str, data: bytes) -> GrantDoc | None:
    """Where `admit` filed the message `data` carrying grant `gid`: under the grant's id when it was authentic,
    else under the hash of its bytes (an unknown approver, a bad signature), or beside it for an envelope refusal.
    A signer reads its grant's fate here (`rlcleanup grant`): never "no such grant" for a refused one."""
    unverified = "unverified-" + hashlib.sha256(data).hexdigest()[:24]
    envelope = [f"{r.value.replace('_', '-')}-{gid}" for r in sorted(_ENVELOPE_REFUSALS)]
    for doc_name in (gid, unverified, *envelope):
        doc = get_grant_doc(records, run_id, doc_name)
        if doc is not None:
            return doc
    return None


def list_grants(records: RunRecords, run_id: str) -> list[tuple[str, GrantDoc]]:
    return grant_docs(records, run_id).list()


def pending(records: RunRecords, run_id: str) -> list[tuple[str, GrantDoc]]:
    return [(gid, doc) for gid, doc in list_grants(records, run_id) if doc.state is GrantState.pending]


def state_for(refusal: Refusal) -> GrantState:
    return GrantState.expired if refusal is Refusal.expired else GrantState.refused


@dataclass(frozen=True)
class Admission:
    gid: str  # the grant's document id
    answer: str | None  # the delivery's answer when it ends on arrival (refused, replayed); None = apply it


def admit(records: RunRecords, verdict: Verdict, data: bytes, envelope_run_id: str | None, now: datetime) -> Admission:
    """File a verified grant on arrival: refused (with the verdict's reason), a replay, or pending to be applied."""
    grant = verdict.grant
    assert grant is not None  # an undecodable message is the caller's error to raise
    gid = doc_id(verdict, data)
    ended = ended_grant(records, gid) if verdict.authentic and verdict.refusal not in _ENVELOPE_REFUSALS else None
    if ended is not None and get_grant_doc(records, grant.run_id, gid) is None:
        # Its document is gone (`forget`, a store rebuilt) but the grant ended once: never applied again.
        detail = f"grant {gid} already ended ({ended.state} at {ended.at.isoformat()}); a grant is used once"
        file_grant(
            records, grant.run_id, gid, verdict, GrantState.refused, now, refusal=Refusal.replayed, detail=detail
        )
        sync_record(records, grant.run_id)
        return Admission(gid, f"refused: replayed: {detail}")
    if verdict.refusal in _ENVELOPE_REFUSALS:
        # Run and intent come from the unsigned envelope: anyone re-sending a signed grant could set them, so the
        # refusal is filed beside the grant (on the run it was aimed at) and never touches the grant's own doc.
        run_id = grant.run_id
        if verdict.refusal is Refusal.wrong_run:
            run_id = safe_run_id(envelope_run_id or json.loads(data).get("run_id") or grant.run_id)
        reason = verdict.refusal.value.replace("_", "-")
        file_grant(
            records, run_id, f"{reason}-{gid}", verdict, GrantState.refused, now,
            refusal=verdict.refusal, detail=verdict.detail,
        )  # fmt: skip
        sync_record(records, run_id)
        return Admission(gid, f"refused: {verdict.refusal.value}: {verdict.detail}")
    if verdict.refusal is not None:
        state = state_for(verdict.refusal)
        created = file_grant(
            records, grant.run_id, gid, verdict, state, now, refusal=verdict.refusal, detail=verdict.detail
        )
        if created and verdict.authentic:
            remember_ended(records, grant.run_id, gid, state, now)
        if not created and verdict.authentic:
            existing = get_grant_doc(records, grant.run_id, gid)
            if existing is not None and existing.state is GrantState.used:
                return Admission(gid, note_replay(records, grant.run_id, gid))
            if existing is not None and existing.state is GrantState.pending and verdict.refusal is Refusal.expired:
                set_state(records, grant.run_id, gid, state, now, refusal=verdict.refusal, detail=verdict.detail)
        sync_record(records, grant.run_id)
        return Admission(gid, f"refused: {verdict.refusal.value}: {verdict.detail}")
    if not file_grant(records, grant.run_id, gid, verdict, GrantState.pending, now):
        existing = get_grant_doc(records, grant.run_id, gid)
        reused = existing is None or existing.grant != verdict.raw  # another grant reusing this id
        if reused or existing is None or existing.state not in {GrantState.pending, GrantState.applying}:
            return Admission(gid, note_replay(records, grant.run_id, gid))
    return Admission(gid, None)


def wait(records: RunRecords, run_id: str, gid: str, why: str, now: datetime, state: str = "pending") -> str:
    """The grant stays pending (record-ready or a capture retries it); `state` is what the record shows."""
    set_state(records, run_id, gid, GrantState.pending, now, detail=why, outcome={"state": state})
    sync_record(records, run_id)
    return f"{state}: {why}"


def file_outcome(records: RunRecords, run_id: str, gid: str, outcome: Outcome, now: datetime) -> None:
    """The grant's final state from its outcome: used, or the refusal's state, with the outcome on the grant."""
    final = state_for(outcome.refusal) if outcome.refusal else GrantState.used
    remember_ended(records, run_id, gid, final, now)  # first: a crash after it still never applies it twice
    set_state(
        records, run_id, gid, final, now, refusal=outcome.refusal, detail=outcome.detail, outcome=outcome.as_doc()
    )


# Every grant that ended (used, refused, expired), by id, outside `runs/`: `forget` removes a run's documents and
# grants with them, never this ledger, so a signed grant re-sent after its record was forgotten and the run
# re-processed is a replay, not a second publish or delete.
ENDED_GRANTS = collections.ENDED_GRANTS.name


def _ended(records: RunRecords) -> Documents[EndedGrant]:
    return collections.ENDED_GRANTS.bind(records, EndedGrant)


def remember_ended(records: RunRecords, run_id: str, gid: str, state: GrantState, now: datetime) -> None:
    _ended(records).put(gid, EndedGrant(run_id=run_id, state=state.value, at=now))


def ended_grant(records: RunRecords, gid: str) -> EndedGrant | None:
    return _ended(records).get(gid)


def note_replay(records: RunRecords, run_id: str, gid: str) -> str:
    docs = grant_docs(records, run_id)
    doc = docs.get(gid)
    if doc is not None:
        docs.put(gid, doc.model_copy(update={"replays": doc.replays + 1}))
    sync_record(records, run_id)
    return f"refused: replayed ({gid} was already used)"


@dataclass(frozen=True)
class GrantFile:
    """One admitted grant's document, bound once: the states it moves through while it is applied, in order
    (`wait` or `applying`, then `outcome` or `replay`, then `sync` of the record's summary)."""

    records: RunRecords
    run_id: str
    gid: str
    clock: Clock

    def wait(self, why: str, shown: str) -> str:
        return wait(self.records, self.run_id, self.gid, why, self.clock.now(), shown)

    def applying(self) -> None:
        set_state(self.records, self.run_id, self.gid, GrantState.applying, self.clock.now())

    def outcome(self, outcome: Outcome) -> None:
        file_outcome(self.records, self.run_id, self.gid, outcome, self.clock.now())

    def replay(self) -> str:
        return note_replay(self.records, self.run_id, self.gid)

    def sync(self) -> None:
        sync_record(self.records, self.run_id)


def grant_file(records: RunRecords, grant: Grant, gid: str, clock: Clock) -> GrantFile:
    """The admitted grant's document (filed under `gid` on the grant's run), bound for applying it."""
    return GrantFile(records, grant.run_id, gid, clock)


def sync_record(records: RunRecords, run_id: str) -> bool:
    """Rebuild authority_actions from the grant documents: converges whatever order workers finish in. Only the
    grants that apply to the record's candidates as they are now count (`steps/grant_binding.py`): after a rerun or
    a later pass, a grant whose candidate has another digest (or is gone) is listed in `superseded_grants` instead,
    and none of its effects stay. True when that changed the record (nothing is written when it did not)."""
    record = records.get(run_id)
    if record is None:
        return False
    actions: list[AuthorityAction] = []
    for gid, doc in sorted(list_grants(records, run_id), key=lambda kv: (kv[1].received_at, kv[0])):
        actions += _actions(gid, doc)
    # Candidates are final only on a finished record; while a rerun is in progress they are not derived yet.
    binding = bind_grants(record.candidates, actions) if record.status in READY else Binding(actions, [])
    actions = binding.applying
    fields: dict[str, Any] = {
        "authority_actions": [a.model_dump(mode="json") for a in actions],
        "superseded_grants": [s.model_dump(mode="json") for s in binding.superseded],
        "reclaimed_bytes": sum(a.reclaimed_bytes for a in actions),
    }
    registrations = [a for a in actions if a.action == Action.register.value and a.state in _REGISTERED]
    registration = _registration(registrations[-1]) if registrations else None  # the latest says
    if registration:
        fields["registration"] = registration
    fields.update(_remaining_fields(record, actions))
    current = record.model_dump(mode="json")
    if all(current.get(name) == value for name, value in fields.items()):
        return False  # as the record already says: no write, and the report written from it still holds
    records.update(run_id, fields)
    return True


def _actions(gid: str, doc: GrantDoc) -> list[AuthorityAction]:
    """A grant document as the record shows it: its action, and a refused replay when it was delivered again."""
    grant, out = doc.body, doc.result
    action = AuthorityAction(
        action=str(grant.get("action", "unknown")),
        grant_id=gid,
        state=str(out.get("state") or doc.state.value),
        destination=out.get("destination") or grant.get("destination"),
        step=grant.get("step") if isinstance(grant.get("step"), int) else None,
        digest=grant.get("digest") if isinstance(grant.get("digest"), str) else None,
        verified_objects=int(out.get("verified_objects") or 0),
        refusal=doc.refusal.value if doc.refusal else None,
        detail=(doc.detail or out.get("detail") or None),
        uri=out.get("uri"),
        reclaimed_bytes=int(out.get("reclaimed_bytes") or 0),
        progress=doc.progress,
        export_job=out.get("export_job"),
        preserved=out.get("preserved"),
    )
    if not doc.replays:
        return [action]
    replay = {
        "state": "refused",
        "refusal": Refusal.replayed.value,
        "detail": f"delivered {doc.replays} more time(s) after it was used; not applied again",
        "verified_objects": 0,
        "reclaimed_bytes": 0,
    }
    return [action, action.model_copy(update=replay)]


def _registration(action: AuthorityAction) -> str | None:
    return f"registered: {action.uri}" if action.state == "registered" else action.detail


def _remaining_fields(record: CompletionRecord | None, actions: list[AuthorityAction]) -> dict[str, Any]:
    """The record's remaining work without what the used grants closed; the status follows (a finished record
    closes). Layout-derived items wrap-up wrote (diagnose, expired checkpoints...) stay as they were."""
    if record is None or not is_ready(record):  # still in progress, routed, failed: not ours to move
        return {}
    owed = [c.step for c in record.candidates if c.state in (CandidateState.convertible, CandidateState.partial)]
    remaining = still_open(record.remaining_work, actions, owed)
    return {"remaining_work": remaining.items, "status": remaining.status.value}


def set_progress(
    records: RunRecords, run_id: str, gid: str, progress: dict[str, int], detail: str, now: datetime
) -> None:
    """An upload's progress on its grant (state stays `applying`); kept after the outcome is filed."""
    docs = grant_docs(records, run_id)
    doc = docs.get(gid)
    if doc is None:
        return
    update = {"progress": progress, "detail": redact_credentials(detail), "updated_at": now.isoformat()}
    docs.put(gid, doc.model_copy(update=update))


def note_attempt(records: RunRecords, run_id: str, gid: str, execution: str, cause: str, now: datetime) -> None:
    """A failed attempt of an upload job that will be retried (and resume): kept on the grant, in order."""
    docs = grant_docs(records, run_id)
    doc = docs.get(gid)
    if doc is None:
        return
    cause = redact_credentials(cause)
    attempts = [
        *doc.attempts,
        GrantAttempt(execution=execution, failed=cause, at=now.isoformat(), progress=doc.progress),
    ]
    detail = f"attempt {len(attempts)} failed, retried (resumes): {cause}"
    docs.put(gid, doc.model_copy(update={"attempts": attempts, "detail": detail, "updated_at": now.isoformat()}))
