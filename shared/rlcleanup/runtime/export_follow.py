"""The records sweep follows every submitted export job to its end (authority/export_follow.py says what an end
means; docs/authority.md §9, docs/runtime.md "The sweep").

Per pass, at most `FOLLOW_PER_PASS` open jobs are asked about, each with one `job_state` call to the controller the
grant submitted to (and, for a job that did not succeed, one log read). A controller that is down or not configured
here leaves its jobs open for the next pass: the pass says so in its summary and the log, and no run fails for it.
When a job has ended:

- SUCCEEDED: the step's export is validated by the validation stage's own call (`steps/validate.validate_candidate`
  with `stages/validate.validation_inputs`: the stored layout, the metric steps, the step budget), the owed
  candidate is replaced by the result, and wrap-up's own derivation (`steps/wrapup.finish_record`) re-derives the
  selection, deadlines and remaining work from the new candidates, exactly as a pass of the pipeline would; a job
  that succeeded without leaving a valid export is also an `export_job_invalid` error;
- FAILED / STOPPED: an `export_job_failed` error with the state, exit, message, log tail and the retry command;
  the candidate stays `convertible`, so the owed item stays open;
- either way the end is written on the grant's document, the record's actions are rebuilt from it (`sync_record`,
  which also closes the job's remaining-work item once nothing is owed) and the report is re-rendered.

Idempotent: the end is noted last, so a pass that stops half way is redone by the next one, which finds the
candidate already replaced (never replaced twice) and the error already filed (never filed twice).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from rlcleanup.authority import export_follow as follow
from rlcleanup.authority import hub_audit, ledger
from rlcleanup.errors import ErrorKind, error_kind
from rlcleanup.models.controller_states import Verdict
from rlcleanup.models.export_jobs import ExportJobEnd
from rlcleanup.models.record import RunError
from rlcleanup.ports.controllers import ControllerError, ControllerRefused, ExportSubmitter, UnknownControllerError
from rlcleanup.runtime import admission
from rlcleanup.runtime.evidence import refresh_report
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages.validate import validation_inputs
from rlcleanup.steps.validate import validate_candidate
from rlcleanup.steps.wrapup import finish_record

log = logging.getLogger(__name__)

FOLLOW_PER_PASS = 20  # jobs one pass asks about (one job_state call each, a log read for a failed one)


@dataclass
class FollowSummary:
    ended: int = 0
    running: int = 0
    unreachable: int = 0

    def __str__(self) -> str:
        return f"export jobs: {self.ended} ended, {self.running} running, {self.unreachable} not reachable"


def follow_export_jobs(p: Ports, now: datetime, scan_limit: int) -> FollowSummary:
    summary = FollowSummary()
    for open_job in follow.open_export_jobs(p.records, now, scan_limit=scan_limit, limit=FOLLOW_PER_PASS):
        end = _ask(p, open_job, now)
        if end == RUNNING:
            summary.running += 1
        elif end == UNREACHABLE:
            summary.unreachable += 1
        elif isinstance(end, ExportJobEnd):
            _ended(p, open_job, end, now)
            summary.ended += 1
    return summary


Unended = Literal["running", "unreachable"]
RUNNING: Unended = "running"
UNREACHABLE: Unended = "unreachable"


def _ask(p: Ports, open_job: follow.OpenJob, now: datetime) -> ExportJobEnd | Unended:
    """The job's end, or why there is none on this pass (still running; its controller cannot be asked)."""
    job, run_id = open_job.job, open_job.run_id
    try:
        submitter = p.export_submitter(job.controller)
    except UnknownControllerError as exc:  # a record naming a controller nobody registered: never this pass's end
        log.error("export job %s of run %s: %s", job.job_id, run_id, exc, extra={"run_id": run_id})
        return UNREACHABLE
    if submitter is None:
        why = f"its controller {job.controller} is not configured here"
        log.warning(
            "export job %s of run %s: %s; asked again next pass", job.job_id, run_id, why, extra={"run_id": run_id}
        )
        return UNREACHABLE
    try:
        state = submitter.job_state(job.job_id)
        said = follow.verdict(job.controller, state.state)
        if not said.terminal:
            return RUNNING
        logs = None if said is Verdict.succeeded else _log_tail(submitter, job.job_id)
    except ControllerRefused as exc:
        if exc.status == 404:  # it will never be seen ending: recorded as gone, the export still owed
            return follow.vanished_job(job, str(exc), now)
        log.error("export job %s of run %s: %s", job.job_id, run_id, exc, extra={"run_id": run_id})
        return UNREACHABLE
    except ControllerError as exc:  # down (transient) or refusing (permanent): never a failed run, asked again
        level = logging.WARNING if error_kind(exc) is ErrorKind.transient else logging.ERROR
        log.log(level, "export job %s of run %s: %s", job.job_id, run_id, exc, extra={"run_id": run_id})
        return UNREACHABLE
    return follow.job_end(state, logs, now)


def _log_tail(submitter: ExportSubmitter, job_id: str) -> str | None:
    try:
        return submitter.job_log_tail(job_id, follow.LOG_TAIL_BYTES)
    except ControllerError as exc:  # the end is still recorded; the error says the log could not be read
        return f"(the job's log could not be read: {exc})"


def _ended(p: Ports, open_job: follow.OpenJob, end: ExportJobEnd, now: datetime) -> None:
    run_id = open_job.run_id
    errors: list[RunError] = []
    if end.succeeded:
        errors += _adopt_export(p, open_job, now)
    else:
        errors.append(follow.failure_error(open_job, end))
    record = p.records.get(run_id)
    fresh = [e for e in errors if record is not None and not follow.already_recorded(record, e, open_job.job.job_id)]
    if fresh:
        p.records.add_errors(run_id, fresh)
    follow.note_job_end(p.records, open_job, end)  # last: a pass that stops before it is redone whole
    ledger.sync_record(p.records, run_id)
    refresh_report(p, run_id)
    log.info("export job %s of run %s ended %s", open_job.job.job_id, run_id, end.state, extra={"run_id": run_id})


def _adopt_export(p: Ports, open_job: follow.OpenJob, now: datetime) -> list[RunError]:
    """Validate the step's new export as the validation stage does, put it on the record in place of the owed
    candidate and re-derive wrap-up's fields from the new candidates."""
    record = p.records.get(open_job.run_id)
    if record is None:
        return []
    inputs = validation_inputs(p, record.run_id, record.run_uri, "")
    candidate = validate_candidate(
        p.storage, inputs.layout, open_job.step, metric_steps=inputs.metric_steps, step_budget=inputs.step_budget
    )
    candidates = follow.adopted(record, open_job.step, candidate)
    if candidates is None:
        return []  # already on the record (an earlier pass), or re-derived since by a rerun: nothing to replace
    person_items = hub_audit.remaining_items(record.hub_audits) + admission.conflict_items(record)
    fields = finish_record(p.storage, inputs.layout, record, candidates, record.resume_safety, now, person_items)
    p.records.update(record.run_id, fields)
    return [] if candidate.valid else [follow.invalid_export_error(open_job, candidate)]
