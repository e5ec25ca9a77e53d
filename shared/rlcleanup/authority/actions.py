"""Carrying out a grant that is verified, ready and claimed: one handler per action, chosen from a table.

runtime/authority_handlers.py decides *when* a grant runs (admission, readiness, the claim that makes it happen
once, filing the outcome); this module decides *what* it does: which ports each action uses, where the export is
pinned, when a Hub hand-off is too large for one invocation, and what a failed attempt leaves behind. An action
with no handler in the table is refused, never given a default.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rlcleanup.authority import export, ledger, preserve, quarantine, storage_ledger
from rlcleanup.authority.artifact import pin
from rlcleanup.authority.grants import Action, Grant, GrantState, Refusal
from rlcleanup.authority.hub_publish import publish_to_hub
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.precancel import run_has_ended
from rlcleanup.authority.publish import publish
from rlcleanup.authority.reclaim import ReclaimPlan, reclaim
from rlcleanup.authority.register import register
from rlcleanup.authority.staging import discard_staging
from rlcleanup.errors import ErrorKind, error_kind
from rlcleanup.models.claims import PreCancelCaptured
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.bus import Bus
from rlcleanup.ports.clock import Clock
from rlcleanup.ports.controllers import ExportSubmitter
from rlcleanup.ports.hub import HubFactory, is_hub
from rlcleanup.ports.jobs import JobLauncher
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import Storage
from rlcleanup.settings import DeploymentSettings

# The upload job's overrides (runtime/hub_job.py reads them back to find its grant).
HUB_JOB_RUN_VAR, HUB_JOB_GRANT_VAR = "RLCLEANUP_HUB_RUN_ID", "RLCLEANUP_HUB_GRANT_ID"

Applied = Outcome | dict[str, Any]  # a dict: a job was started and will file the outcome itself


class GrantPorts(Protocol):
    """What carrying out a grant may touch (runtime's Ports has these and more); read-only here."""

    @property
    def settings(self) -> DeploymentSettings: ...  # read once at cold start (quarantine)

    @property
    def storage(self) -> Storage: ...

    @property
    def records(self) -> RunRecords: ...

    @property
    def bus(self) -> Bus: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def preserve_root(self) -> str | None: ...

    @property
    def model_hub(self) -> HubFactory: ...

    @property
    def cancel_cleared_topic(self) -> str: ...  # the topology's (runtime's Ports reads it: policy cannot)

    @property
    def hub_upload_job(self) -> JobLauncher | None: ...

    @property
    def hub_job_threshold_bytes(self) -> int: ...

    def export_submitter(self, name: str) -> ExportSubmitter | None: ...  # the controller that runs export jobs


@dataclass(frozen=True)
class GrantTask:
    """One grant to carry out: `record` is the run's (None only for a cancel of a run never classified),
    `capture` the pre-cancel capture a cancel waited for."""

    grant: Grant
    gid: str
    record: CompletionRecord | None
    capture: PreCancelCaptured | None


ActionHandler = Callable[[GrantPorts, GrantTask], Applied]


def carry_out(p: GrantPorts, task: GrantTask) -> Applied:
    """The action's handler, with one failure rule for all of them: transient errors propagate (the claim is
    released and a redelivery re-runs every check), anything else refuses the grant as apply_failed with the
    cause named, after removing what this grant staged. Transient is `error_kind`'s reading, not the class alone:
    a client library's own outage error (google-api-core's ServiceUnavailable, botocore's throttling) is one too,
    and must never use the grant up as a refusal."""
    handler = ACTIONS.get(task.grant.action)
    if handler is None:
        return refuse(Refusal.apply_failed, f"no handler for action {task.grant.action!r}", task.grant.destination)
    try:
        return handler(p, task)
    except Exception as exc:
        if error_kind(exc) is ErrorKind.transient:
            raise
        if task.record is not None and task.grant.action in {Action.publish, Action.handoff}:
            discard_staging(p.storage, task.record, task.grant)
        return refuse(Refusal.apply_failed, f"{type(exc).__name__}: {str(exc)[:500]}", task.grant.destination)


def _needs_record(task: GrantTask) -> CompletionRecord:
    if task.record is None:  # admission waits for the record before any action but cancel runs
        raise RuntimeError(f"{task.grant.action.value} grant {task.gid} reached its action without a record")
    return task.record


def cancel_refusal(record: CompletionRecord | None, grant: Grant) -> Outcome | None:
    """Why a cancel cannot be cleared whatever the capture says (the preview asks the same)."""
    if run_has_ended(record):
        why = "the run's end was already observed (its record is classified): a cancel applies only to a live run"
        return refuse(Refusal.run_ended, why, grant.destination)
    return None


def _clear_cancel(p: GrantPorts, task: GrantTask) -> Outcome:
    """The controller (or a person) cancels; rlcleanup only says the evidence is safe."""
    grant = task.grant
    refused = cancel_refusal(task.record, grant)
    if refused is not None:
        return refused
    capture = task.capture
    cleared = {
        "run_id": grant.run_id,
        "job_id": capture.job_id if capture else None,
        "source": capture.source if capture else None,
        "grant_id": task.gid,
        "capture_uri": capture.capture_uri if capture else None,
        "cleared_at": p.clock.now().isoformat(),
    }
    p.bus.publish(p.cancel_cleared_topic, json.dumps(cleared).encode(), {"run_id": grant.run_id})
    return Outcome(state="cleared", uri=cleared["capture_uri"], detail="cancel-cleared published")


def _register(p: GrantPorts, task: GrantTask) -> Outcome:
    return register(p.storage, p.records, _needs_record(task), task.grant)


def _reclaim(p: GrantPorts, task: GrantTask) -> Outcome:
    """Reclaim pins lazily, inside make_plan and only when no plan is stored yet: a resumed reclaim after some
    deletes must carry on with its stored plan, which a fresh resolution could no longer match."""
    grant = task.grant

    def on_plan(plan_ref: str, plan: ReclaimPlan) -> None:
        # Recorded before the first delete: the record says what is about to go even if the worker dies.
        detail = f"plan: delete {len(plan.delete)} objects ({plan.delete_bytes} bytes), keep {plan.keep_count}"
        outcome = {"state": "reclaiming", "uri": plan_ref, "destination": grant.destination}
        ledger.set_state(
            p.records, grant.run_id, task.gid, GrantState.applying, p.clock.now(), detail=detail, outcome=outcome
        )
        ledger.sync_record(p.records, grant.run_id)

    # Fresh state on purpose: reclaim lists the record's roots now and re-pins the export, days after classification.
    record = _needs_record(task)
    held = p.settings.quarantine  # the deployment's, read once at cold start

    def measured(label: str, of: CompletionRecord) -> None:
        ledger = storage_ledger.measure(p.storage, of, label, p.clock.now(), quarantine_settings=held)
        storage_ledger.record_ledger(p.records, grant.run_id, ledger)

    measured(f"before reclaim {task.gid}", record)
    outcome = reclaim(p.storage, p.records, record, grant, p.clock.now(), on_plan, p.preserve_root, held)
    measured(f"after reclaim {task.gid}", p.records.get(grant.run_id) or record)
    return outcome


def _purge(p: GrantPorts, task: GrantTask) -> Outcome:
    """Delete, before their expiry, the objects this run's reclaims of the granted step and digest quarantined:
    only under a grant of its own (a reclaim grant never purges), only the slots the record store names."""
    record, grant = _needs_record(task), task.grant
    purged, refused = quarantine.purge(
        p.storage, p.records, record, p.clock.now(), p.settings.quarantine, step=grant.step, digest=grant.digest
    )
    if not purged and not refused:
        why = f"nothing of step {grant.step} ({grant.digest}) is in quarantine for this run"
        return refuse(Refusal.not_applicable, why, grant.destination)
    if not purged:  # every slot refused (a link on its path, a record not this run's): nothing was deleted
        return refuse(Refusal.apply_failed, f"purged nothing; refused {len(refused)}: {refused[:5]}", grant.destination)
    detail = f"purged {len(purged)} quarantined object(s)" + (
        f"; refused {len(refused)}: {refused[:5]}" if refused else ""
    )
    return Outcome(state="purged", destination=grant.destination, detail=detail, purged=purged)


def _hand_off(p: GrantPorts, task: GrantTask) -> Applied:
    """Publish or hand off. The artifact is pinned once here (its listing re-digested against the grant) and
    handed down: the size check, the plan, the copies and the upload all use those versions."""
    record, grant = _needs_record(task), task.grant
    pinned = pin(p.storage, record, grant)
    if isinstance(pinned, Outcome):
        return pinned
    if grant.destination and is_hub(grant.destination):  # a model hub, not a storage scheme
        started = _start_upload_job(p, task, pinned.size)
        return started if started is not None else publish_to_hub(p.storage, record, grant, p.model_hub(), pinned)
    return publish(p.storage, record, grant, pinned)


def _start_upload_job(p: GrantPorts, task: GrantTask, size: int) -> dict[str, Any] | None:
    """A Hub hand-off of an export above the threshold is uploaded by the upload job, not in this invocation:
    the grant is marked `uploading` (before the start: the job may finish first), then one execution is started
    with the run and grant ids. None: carry it out inline (small, or no job in this deployment)."""
    job = p.hub_upload_job
    if job is None or size <= p.hub_job_threshold_bytes:
        return None
    grant = task.grant
    why = f"export of {size} bytes > {p.hub_job_threshold_bytes}: uploaded by the upload job"
    outcome = {"state": "uploading", "destination": grant.destination}
    ledger.set_state(p.records, grant.run_id, task.gid, GrantState.applying, p.clock.now(), detail=why, outcome=outcome)
    execution = job.start({HUB_JOB_RUN_VAR: grant.run_id, HUB_JOB_GRANT_VAR: task.gid})
    return {**outcome, "execution": execution, "detail": why}


def _export(p: GrantPorts, task: GrantTask) -> Outcome:
    """Run the owed export on the run's controller (authority/export.py): the same plan the preview showed, then
    one submission under an id derived from the grant."""
    record, grant = _needs_record(task), task.grant
    context = export.ExportContext(p.settings.export, p.export_submitter, p.records)
    plan = export.plan_export(p.storage, record, grant, context, p.clock.now())
    if isinstance(plan, Outcome):
        return plan
    return export.submit(plan, grant)


def _preserve(p: GrantPorts, task: GrantTask) -> Outcome:
    """Copy the step's checkpoint, as the grant pinned it, to durable storage (authority/preserve.py)."""
    return preserve.preserve(p.storage, _needs_record(task), task.grant)


ACTIONS: dict[Action, ActionHandler] = {
    Action.export: _export,
    Action.preserve: _preserve,
    Action.cancel: _clear_cancel,
    Action.register: _register,
    Action.reclaim: _reclaim,
    Action.purge: _purge,
    Action.publish: _hand_off,
    Action.handoff: _hand_off,
}
