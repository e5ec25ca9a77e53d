"""What a grant would do, computed by the code that carries it out (so the preview and the effect cannot differ).

publish / handoff: `publish.plan_publish` (objects, sizes, checksums, destination visibility read back);
reclaim: the same verification and `reclaim.make_plan` (the exact deletion list). Nothing is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rlcleanup.authority import artifact
from rlcleanup.authority.grants import Action, Grant
from rlcleanup.authority.outcome import Outcome
from rlcleanup.authority.publish import plan_publish
from rlcleanup.authority.reclaim import make_plan, verify_destination
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.layout import discover


def _refused(grant: Grant, outcome: Outcome) -> dict[str, Any]:
    return {
        "action": grant.action.value,
        "would": "refuse",
        "refusal": outcome.refusal.value if outcome.refusal else None,
        "detail": outcome.detail,
        "destination": grant.destination,
    }


def preview_grant(storage: Storage, record: CompletionRecord, grant: Grant, now: datetime) -> dict[str, Any]:
    if grant.action in {Action.publish, Action.handoff}:
        plan, refused = plan_publish(storage, record, grant, apply=False)
        if refused:
            return _refused(grant, refused)
        assert plan is not None
        return {"action": grant.action.value, "would": grant.action.value, **plan.preview()}
    if grant.action is Action.reclaim:
        candidate, refused = artifact.resolve(storage, record, grant)
        if refused:
            return _refused(grant, refused)
        assert candidate is not None
        refused = verify_destination(storage, grant, artifact.listing(storage, candidate.uri))
        if refused:
            return _refused(grant, refused)
        deletion = make_plan(storage, record, discover(storage, record.run_uri), grant, candidate.uri, now)
        return {
            "action": grant.action.value,
            "would": "reclaim",
            "destination": grant.destination,
            "step": candidate.step,
            "digest": candidate.digest,
            "delete": deletion["delete"],
            "delete_count": len(deletion["delete"]),
            "delete_bytes": deletion["delete_bytes"],
            "keep_count": len(deletion["keep"]),
        }
    return {
        "action": grant.action.value,
        "would": grant.action.value,
        "destination": grant.destination,
        "detail": "no objects are copied or deleted by this action",
    }
