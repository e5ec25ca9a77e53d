"""Stage select (select-candidate): select by the declared policy (or leave it unresolved), finish the record,
write the report and seal the manifest, then say the record is ready (grants waiting on it retry)."""

from __future__ import annotations

import json
import logging

from rlcleanup.authority import hub_audit, ledger, storage_ledger
from rlcleanup.authority.config_screen import screen_config
from rlcleanup.errors import ErrorKind, PermanentError, error_kind
from rlcleanup.models.events import RunMessage
from rlcleanup.models.outcomes import ValidationOutcome
from rlcleanup.models.plans import RecordFinished
from rlcleanup.models.record import Candidate, HubAudit
from rlcleanup.runtime import admission
from rlcleanup.runtime.claims import once_ran, stored_under
from rlcleanup.runtime.evidence import finish_evidence
from rlcleanup.runtime.layouts import run_layout
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages.barrier import member_prefix, own_claim
from rlcleanup.runtime.stages.validate import FAN_OUT as VALIDATION
from rlcleanup.steps.history import record_history
from rlcleanup.steps.layout_model import RunLayout
from rlcleanup.steps.wrapup import finish_record

log = logging.getLogger(__name__)


def audit_hub(p: Ports, layout: RunLayout, candidates: list[Candidate]) -> list[HubAudit]:
    """The Hub repos the run's own export job published to, read back when the deployment enables the audit."""
    found = hub_audit.targets(layout, candidates)
    if not found:
        return []
    if not p.settings.hub_audit:
        return [hub_audit.not_configured(t) for t in found]
    reader = p.hub_reader()
    audits = []
    for target in found:
        try:
            audits.append(hub_audit.audit(p.storage, reader, target))
        except Exception as exc:
            if error_kind(exc) is ErrorKind.transient:
                raise  # the store or storage did not answer: the delivery is retried
            log.exception("Hub audit of %s failed (a defect)", target.repo_id)
            audits.append(hub_audit.audit_failed(target, reader.endpoint, exc))  # the run still gets its record
    return audits


def measure_storage(p: Ports, run_id: str) -> None:
    """The storage ledger at completion, so `show`, the report and the console's `storage_bytes` have it without a
    `storage --refresh`: one listing per root, bounded by one capture page of objects (the work one invocation is
    sized for). Redelivery gives the same ledger (storage_ledger: rlcleanup's own report is not counted, an equal
    measurement changes nothing). Accounting never fails a run's record: a run too large for one pass, a listing
    refused (an unsafe name) or a defect leaves `storage_ledger_note` saying why and what to run instead."""
    record = p.records.get(run_id)
    if record is None:
        return
    fix = f"`rlcleanup storage --refresh {run_id}` measures it"
    try:
        bound, held = p.capture_page_objects, p.settings.quarantine  # a bounded pass, the deployment's quarantine
        ledger = storage_ledger.measure(
            p.storage, record, "at completion", p.clock.now(), max_objects=bound, quarantine_settings=held
        )
        storage_ledger.record_ledger(p.records, run_id, ledger)
        note = None
    except storage_ledger.LedgerTooLarge as exc:
        note = f"not measured at completion: {exc} (more than one invocation lists); {fix}"
    except PermanentError as exc:
        note = f"not measured at completion: {exc.code}: {exc}"[:1500] + f"; after the fix, {fix}"
    except Exception as exc:
        if error_kind(exc) is ErrorKind.transient:
            raise  # the store or storage did not answer: the delivery is retried
        log.exception("run %s: storage ledger not measured (a defect)", run_id, extra={"run_id": run_id})
        note = f"not measured at completion: internal error {type(exc).__name__} (see the function's log); {fix}"
    if note != record.storage_ledger_note:
        p.records.update(run_id, {"storage_ledger_note": note})


def select_candidate(p: Ports, msg: RunMessage, attributes: dict[str, str]) -> str:

    def work() -> RecordFinished:
        outcomes = stored_under(p, msg.run_id, member_prefix(p, msg.scope, VALIDATION), ValidationOutcome).values()
        candidates = sorted((o.candidate for o in outcomes if o.candidate), key=lambda c: c.step)
        resume = next((o.resume_safety for o in outcomes if o.resume_safety), None)
        layout = run_layout(p, msg.run_id, msg.run_uri, msg.scope)
        record = p.records.get(msg.run_id)
        if record is None:
            raise PermanentError("no_record", f"run {msg.run_id} has no record to finish")
        audits = audit_hub(p, layout, candidates)
        fields = finish_record(
            p.storage,
            layout,
            record,
            candidates,
            resume,
            p.clock.now(),
            hub_audit.remaining_items(audits) + admission.conflict_items(record),
        )
        fields["hub_audits"] = [a.model_dump(mode="json") for a in audits]
        p.records.update(msg.run_id, fields)
        # Learning across runs (steps/history.py): keep this run's configuration, then list the other runs that
        # failed the same way and what fixed them, through the store's indexed lookups.
        p.records.update(msg.run_id, record_history(p.records, msg.run_id, layout.skyrl, screen_config))
        # The grants already used on this run (before a --rerun, on an earlier pass) are bound again to these
        # candidates: a grant whose digest no longer matches stops applying before anything reads the record.
        ledger.sync_record(p.records, msg.run_id)
        measure_storage(p, msg.run_id)  # before the report, which shows it
        finished = p.records.get(msg.run_id)
        status = finished.status.value if finished is not None else fields["status"]
        finish_evidence(p, msg.run_id)  # report.md/.html beside the evidence, then manifest.json listing them
        ready = json.dumps({"run_id": msg.run_id, "status": status}).encode()
        p.bus.publish(p.topology.next_of("select-candidate"), ready, {"run_id": msg.run_id})
        for holder in admission.conflict_holders(p, msg.run_id):  # the run whose id this one declared: told too
            held = p.records.get(holder)
            if held is not None:
                again = json.dumps({"run_id": holder, "status": held.status.value}).encode()
                p.bus.publish(p.topology.next_of("select-candidate"), again, {"run_id": holder})
        return RecordFinished(status=status)

    ran = once_ran(p, msg.run_id, own_claim(p, msg.scope, "select-candidate"), work, model=RecordFinished)
    return "duplicate: record already finished" if ran.repeat else f"record {ran.result.status}"
