"""What a grant would do, computed by the code that carries it out (so the preview and the effect cannot differ).

publish / handoff: `publish.plan_publish` (objects, sizes, checksums, destination visibility read back); to an
`hf://` destination `hub_publish.plan_hub` (the same, the repo's visibility read from the Hub, nothing created);
reclaim: `reclaim.make_plan` (twins re-verified, the exact deletion list); export: `export.plan_export` (the
request's digest and schema, the allowed set, the expiry preflight with the throughput it used, the exact argv);
preserve: `preserve.plan_preserve` (the destination's rules, the checkpoint's manifest digest, every object). Nothing is written or submitted.

`preview_signed` is what `grant --dry-run` runs: the signed grant goes through `grants.verify` first, the very
check `apply-grant` runs on arrival (signature, approver and its revocation, lifetime, the approver's and the
deployment's destination prefixes), so a preview never says "would" where the grant would be refused.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rlcleanup.authority import export, preserve, quarantine
from rlcleanup.authority.actions import cancel_refusal
from rlcleanup.authority.artifact import pin
from rlcleanup.authority.grants import Action, Grant, Refusal, verify
from rlcleanup.authority.hub_publish import plan_hub
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.publish import plan_publish
from rlcleanup.authority.reclaim import KeepEntry, make_plan
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.hub import HubFactory, is_hub
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import Storage, StorageAccessError, StorageError


def _refused(grant: Grant, outcome: Outcome) -> dict[str, Any]:
    return {
        "action": grant.action.value,
        "would": "refuse",
        "refusal": outcome.refusal.value if outcome.refusal else None,
        "detail": outcome.detail,
        "destination": grant.destination,
    }


def _preview_hub(storage: Storage, record: CompletionRecord, grant: Grant, hub: HubFactory | None) -> dict[str, Any]:
    dest = grant.destination or ""
    if hub is None:
        return _refused(grant, refuse(Refusal.apply_failed, "no model hub is configured in this deployment", dest))
    pinned = pin(storage, record, grant)
    if isinstance(pinned, Outcome):
        return _refused(grant, pinned)
    try:
        plan, refused = plan_hub(storage, record, grant, hub(), pinned)
    except (StorageAccessError, StorageError) as exc:  # no token, no endpoint: the preview says what to fix
        fix = "set HF_TOKEN to a token with write access (and HF_ENDPOINT for another Hub)"
        return _refused(grant, refuse(Refusal.visibility_unknown, f"{exc}; fix: {fix}", dest))
    if refused:
        return _refused(grant, refused)
    assert plan is not None
    return {"action": grant.action.value, "would": grant.action.value, **plan.preview()}


def _reason_counts(keep: list[KeepEntry]) -> dict[str, int]:
    """How many listed kept objects each reason holds (the plan lists at most MAX_KEEP_LISTED of them)."""
    counts: dict[str, int] = {}
    for entry in keep:
        counts[entry.reason] = counts.get(entry.reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def preview_purge(records: RunRecords, record: CompletionRecord, grant: Grant) -> dict[str, Any]:
    """What a purge grant would delete: the quarantined objects of this run's reclaims of (step, digest)."""
    held = [
        e
        for _doc, e, _raw in quarantine.entries(records, record.run_id)
        if e is not None and e.state == "quarantined" and e.step == grant.step and e.digest == grant.digest
    ]
    return {
        "action": grant.action.value,
        "would": "purge",
        "destination": grant.destination,
        "step": grant.step,
        "digest": grant.digest,
        "delete": [{"uri": e.quarantine, "size": e.size, "expires_at": e.expires_at.isoformat()} for e in held],
        "delete_count": len(held),
        "delete_bytes": sum(e.size for e in held),
        "detail": "quarantined objects are deleted before their expiry: no restore after this",
    }


def preview_export(
    storage: Storage, record: CompletionRecord, grant: Grant, now: datetime, context: export.ExportContext | None
) -> dict[str, Any]:
    """What an export grant would submit: `export.plan_export`, the checks the grant runs, nothing submitted."""
    if context is None:
        why = "this preview was given no export settings or controllers"
        return _refused(grant, refuse(Refusal.no_controller, why, grant.destination))
    plan = export.plan_export(storage, record, grant, context, now)
    if isinstance(plan, Outcome):
        return _refused(grant, plan)
    return {"action": grant.action.value, "would": "submit", "destination": grant.destination, **plan.preview()}


def preview_grant(
    storage: Storage,
    record: CompletionRecord,
    grant: Grant,
    now: datetime,
    records: RunRecords,
    hub: HubFactory | None = None,
    export_context: export.ExportContext | None = None,
) -> dict[str, Any]:
    if grant.action in {Action.publish, Action.handoff} and grant.destination and is_hub(grant.destination):
        return _preview_hub(storage, record, grant, hub)
    if grant.action in {Action.publish, Action.handoff}:
        pinned = pin(storage, record, grant)
        if isinstance(pinned, Outcome):
            return _refused(grant, pinned)
        plan, refused = plan_publish(storage, record, grant, pinned, apply=False)
        if refused:
            return _refused(grant, refused)
        assert plan is not None
        return {"action": grant.action.value, "would": grant.action.value, **plan.preview()}
    if grant.action is Action.reclaim:
        deletion = make_plan(storage, records, record, grant, now)
        if isinstance(deletion, Outcome):
            return _refused(grant, deletion)
        return {
            "action": grant.action.value,
            "would": "reclaim",
            "destination": grant.destination,
            "step": grant.step,
            "digest": grant.digest,
            "delete": [{"uri": d.uri, "size": d.size} for d in deletion.delete],
            "delete_count": len(deletion.delete),
            "delete_bytes": deletion.delete_bytes,
            "keep_count": deletion.keep_count,
            "keep_reasons": _reason_counts(deletion.keep),
            "refused": [r.model_dump() for r in deletion.refused],
            "retention": deletion.retention,
            "quarantine": deletion.quarantine,
            "protection": deletion.protection,
            "incomplete_uploads": [u.model_dump(mode="json") for u in deletion.incomplete_uploads],
        }
    if grant.action is Action.purge:
        return preview_purge(records, record, grant)
    if grant.action is Action.export:
        return preview_export(storage, record, grant, now, export_context)
    if grant.action is Action.preserve:
        planned = preserve.plan_preserve(storage, record, grant)
        if isinstance(planned, Outcome):
            return _refused(grant, planned)
        return {"action": grant.action.value, "would": "preserve", **planned.preview()}
    if grant.action is Action.cancel and (refused_cancel := cancel_refusal(record, grant)) is not None:
        return _refused(grant, refused_cancel)
    return {
        "action": grant.action.value,
        "would": grant.action.value,
        "destination": grant.destination,
        "detail": "no objects are copied or deleted by this action",
    }


def preview_signed(
    storage: Storage,
    record: CompletionRecord,
    message: bytes,
    now: datetime,
    records: RunRecords,
    *,
    deployment_prefixes: tuple[str, ...] | None,
    hub: HubFactory | None = None,
    export_context: export.ExportContext | None = None,
) -> dict[str, Any]:
    """The preview of a signed grant message: refused exactly as `apply-grant` would refuse it on arrival (the same
    `verify`, for the run the message is delivered for), else what `preview_grant` computes."""
    verdict = verify(records, message, now, expected_run=record.run_id, deployment_prefixes=deployment_prefixes)
    if verdict.grant is None or verdict.refusal is not None:
        return {
            "action": verdict.grant.action.value if verdict.grant else None,
            "would": "refuse",
            "refusal": (verdict.refusal or Refusal.malformed).value,
            "detail": verdict.detail,
            "destination": verdict.grant.destination if verdict.grant else None,
        }
    return preview_grant(storage, record, verdict.grant, now, records, hub, export_context)
