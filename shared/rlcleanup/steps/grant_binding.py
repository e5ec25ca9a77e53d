"""Which used grants still apply to a record (pure): a grant is bound to the digest it signed.

A grant that was carried out (published, handed off, registered, reclaimed) acts for the record only while the
candidate it named still has that digest. A `--rerun` or a later pass re-derives the candidates: when the step a
grant named now holds other bytes, or nothing, that grant no longer applies, so its effects leave the record (the
selection it answered reopens, its publish/register/reclaim item is open again, its reclaimed bytes are not this
record's) and the record says which grant and why (`superseded_grants`).

One exception keeps a grant applying with its candidate gone: the bytes were deleted by a reclaim grant of that
very step and digest (the run's own reclaim, not new bytes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rlcleanup.models.record import AuthorityAction, Candidate, SupersededGrant
from rlcleanup.steps.remaining import PUBLISHED, RECLAIMED, REGISTERED

EFFECTS = PUBLISHED | REGISTERED | RECLAIMED  # outcome states whose effects land on the record


@dataclass(frozen=True)
class Binding:
    applying: list[AuthorityAction] = field(default_factory=list)  # the record's authority_actions
    superseded: list[SupersededGrant] = field(default_factory=list)


def _has_effect(action: AuthorityAction) -> bool:
    return (action.refusal is None and action.state in EFFECTS) or action.reclaimed_bytes > 0


def _candidate(candidates: list[Candidate], action: AuthorityAction) -> Candidate | None:
    """The candidate the grant named: its step, or (a grant that relied on the selection) its digest."""
    if action.step is not None:
        return next((c for c in candidates if c.step == action.step), None)
    return next((c for c in candidates if c.digest == action.digest), None)


def _superseded(action: AuthorityAction, candidate: Candidate | None) -> SupersededGrant:
    now = candidate.digest if candidate is not None and candidate.valid else None
    where = f"step {action.step}" if action.step is not None else f"the candidate with digest {action.digest}"
    if now is not None:
        reason = f"{where}'s export now has digest {now}; the grant signed {action.digest}"
    elif candidate is not None:
        reason = f"{where}'s export is {candidate.state.value} now, not the bytes the grant signed ({action.digest})"
    else:
        reason = f"{where} has no export candidate now (the grant signed {action.digest})"
    return SupersededGrant(
        grant_id=action.grant_id,
        action=action.action,
        step=action.step,
        digest=action.digest,
        now_digest=now,
        gone=now is None,
        state=action.state,
        destination=action.destination,
        reason=reason,
    )


def bind_grants(candidates: Iterable[Candidate], actions: Iterable[AuthorityAction]) -> Binding:
    """Split the grants' actions into those that apply to these candidates and those that no longer do. An action
    without a digest (cancel, or a summary written before digests were kept) or without effects always applies."""
    candidates, actions = list(candidates), list(actions)
    reclaimed_here = {
        (a.step, a.digest) for a in actions if a.refusal is None and a.state in RECLAIMED and a.digest is not None
    }
    superseded: dict[str, SupersededGrant] = {}
    for action in actions:
        if action.digest is None or not _has_effect(action) or action.grant_id in superseded:
            continue
        candidate = _candidate(candidates, action)
        now = candidate.digest if candidate is not None and candidate.valid else None
        if now == action.digest:
            continue
        if now is None and (action.step, action.digest) in reclaimed_here:
            continue  # gone because this run's own reclaim of those bytes deleted them
        superseded[action.grant_id] = _superseded(action, candidate)
    # A grant's replay rows go with it: nothing of a grant that no longer applies stays on the record.
    applying = [a for a in actions if a.grant_id not in superseded]
    return Binding(applying=applying, superseded=list(superseded.values()))
