"""The last step's bookkeeping: selection, registration applicability, remaining work and the record's status."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rlcleanup.formats.config import get
from rlcleanup.models.record import (
    Candidate,
    CompletionRecord,
    Deadline,
    DeclaredRegistration,
    ExpiredEvidence,
    ResumeSafety,
)
from rlcleanup.models.vocab import TerminalState
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.candidate_metrics import candidate_metrics, metric_policy
from rlcleanup.steps.deferred_export import owed_export_commands, owed_exports
from rlcleanup.steps.expiry import earliest, expired_evidence, expired_item, owed_export_deadlines
from rlcleanup.steps.failure_rules import REWARD_METRIC
from rlcleanup.steps.grant_binding import bind_grants
from rlcleanup.steps.history import failure_fields
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.metrics_store import load_series
from rlcleanup.steps.receipts import protocol_facts
from rlcleanup.steps.remaining import derive_remaining
from rlcleanup.steps.select import declared_policy, select
from rlcleanup.steps.terminal_decision import CHECK_PREFIX
from rlcleanup.steps.validate import resume_not_applicable


def declared_registration(layout: RunLayout) -> DeclaredRegistration | None:
    """The experiment's `cleanup.registration` (SkyRL config first, then the experiment config), if it names a
    registry."""
    declared = get(layout.skyrl, "cleanup.registration") or get(layout.config, "cleanup.registration")
    if not isinstance(declared, dict) or not declared.get("registry"):
        return None
    name = declared.get("model_name")
    return DeclaredRegistration(registry=str(declared["registry"]), model_name=None if name is None else str(name))


def registration_note(declared: DeclaredRegistration | None) -> str:
    if declared is None:
        return "does not apply: the experiment declares no cleanup.registration"
    return f"applies: registry {declared.registry}, model {declared.model_name} (needs a register grant)"


def finish_record(
    storage: Storage,
    layout: RunLayout,
    record: CompletionRecord,
    candidates: list[Candidate],
    resume: ResumeSafety | None,
    now: datetime,
    person_items: list[str] | None = None,
) -> dict[str, Any]:
    """`person_items`: what policy above the steps found for a person (the Hub audit's, authority/hub_audit.py)."""
    raw_policy, policy_error = declared_policy(layout.config, layout.skyrl)
    # One series for both: a valid declared policy's metric, else the reference policy's (an invalid policy
    # selects nothing, so `select` never reads a series of another metric).
    scoring, basis = metric_policy(raw_policy)
    series = load_series(storage, record.metrics_uri, scoring.metric) if record.metrics_uri else {}
    selection = select(
        raw_policy,
        candidates,
        series,
        last_saved_step=record.last_saved_step,
        coverage=record.chain.coverage,
    )
    if policy_error:
        selection.reason = policy_error
    selection.candidate_metrics = candidate_metrics(scoring, basis, candidates, series)
    declared = declared_registration(layout)
    by_design = resume_not_applicable(layout)  # generation-only / metrics mode: no candidates, not a fault
    protocol = protocol_facts(storage, layout)
    # What the terminal decision says a person should check (its "To check:" lines: an unproven completion).
    notes: list[str] = [
        f"check how the run ended: {line.removeprefix(CHECK_PREFIX)}"
        for line in record.terminal_reasoning
        if line.startswith(CHECK_PREFIX)
    ]
    if protocol.checkpoints_expired:
        notes.append(
            f"the export step failed because the training step's temp checkpoints expired ({layout.checkpoints_root} "
            f"lists nothing; export attempt: {protocol.export_failure}): no export can be made from them; the "
            "training receipt and resolved config are preserved, retrain or restore the checkpoint to export"
        )
    notes.extend(owed_exports(candidates))  # deferred HF exports not made yet, or stopped mid-write
    expiry = expiry_fields(storage, layout, record, candidates, now)
    notes.extend(d["item"] for d in expiry["deadlines"])
    notes.extend(expired_item(ExpiredEvidence.model_validate(g)) for g in expiry["evidence_expired"])
    notes.extend(owed_export_commands(candidates, record.run_id))  # after the deadlines, which name it too
    notes.extend(person_items or ())
    remaining = derive_remaining(
        terminal_state=record.terminal_state,
        selection_status=selection.status,
        run_id=record.run_id,
        suggested_step=selection.candidate_metrics.best,
        candidates=candidates,
        resume=resume,
        registers=declared is not None,
        # Only the grants bound to these candidates' digests close items (a rerun or a later pass re-derived them).
        actions=bind_grants(candidates, record.authority_actions).applying,
        by_design=by_design,
        notes=notes,
    )
    return {
        "candidates": [c.model_dump(mode="json") for c in candidates],
        "resume_safety": resume.model_dump(mode="json") if resume else None,
        "selection": selection.model_dump(mode="json"),
        "registration": registration_note(declared),
        "declared_registration": declared.model_dump(mode="json") if declared else None,
        "remaining_work": remaining.items,
        "status": remaining.status.value,
        **expiry,
        **failure_fields(record, layout, _rewards_without_cause(storage, record)),
    }


def _rewards_without_cause(storage: Storage, record: CompletionRecord) -> dict[int, float] | None:
    """The reward curve, read only for a failed run without any exception (the reward-collapse rule's input)."""
    if record.terminal_state is not TerminalState.failed or record.first_failure_cause or not record.metrics_uri:
        return None
    return load_series(storage, record.metrics_uri, REWARD_METRIC)


def expiry_fields(
    storage: Storage, layout: RunLayout, record: CompletionRecord, candidates: list[Candidate], now: datetime
) -> dict[str, Any]:
    """The record's deadlines (capture's unpreserved evidence kept, owed exports re-derived at `now`), the first
    of them, and the temp evidence that was already gone (run-layout-v3.md §1; steps/expiry.py)."""
    exports = [
        Deadline(at=at, source="export", item=item, checkpoint=uri)
        for at, item, uri in owed_export_deadlines(candidates, now, record.run_id)
    ]
    deadlines = sorted([*(d for d in record.deadlines if d.source != "export"), *exports], key=lambda d: d.at)
    gone = expired_evidence(storage, layout, now)
    return {
        "deadlines": [d.model_dump(mode="json") for d in deadlines],
        "evidence_deadline": earliest(d.at for d in deadlines),
        "evidence_expired": [g.model_dump(mode="json") for g in gone],
    }
