"""Following a submitted export job to its end (docs/authority.md §9, "When the job ends").

An export grant submits the owed export and records the job (`ExportJob` on the grant's action, authority/export.py).
Nothing tells rlcleanup when that job ends (Ray has no completion hook), so each records sweep asks the job's
controller about every recorded export job that has not ended yet (`open_export_jobs`: bounded per pass, drawn
afresh each pass), through the same `ExportSubmitter` port the grant submitted through. The wiring (runtime/export_follow.py)
does the asking; this module holds what the answer means:

- the job's end is read into `ExportJobEnd` (`job_end`): state, exit code, message, start and end, and for a job that
  did not succeed the tail of its log (`log_tail`: the last lines, bounded, every line a secret rule flags withheld
  as `[withheld: <rule>]` by the rules published text passes, authority/secrets.py, then the credential redaction
  every run error goes through);
- the end is written onto the grant's own document (`note_job_end`), whose outcome the record's authority actions are
  rebuilt from (authority/ledger.py `sync_record`), so a job that ended is never asked about again;
- a job that did not succeed is a run error (`export_job_failed`, or `export_job_invalid` for a job that succeeded but
  left no valid export) naming the state, exit, message, log tail and the exact grant command that retries it;
  the owed export stays owed (its candidate stays `convertible`).

Every location stays the record's: the job id and controller are the ones the grant recorded, and the controller's
answer never names a path that is read or written (the new export is validated where the run's layout says the
step's export lives).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from rlcleanup.authority.ledger import grant_docs
from rlcleanup.authority.secrets import scan_string
from rlcleanup.errors import RunErrorCode
from rlcleanup.models.controller_states import Verdict, source
from rlcleanup.models.export_jobs import ExportJob, ExportJobEnd, JobRun
from rlcleanup.models.record import Candidate, CompletionRecord, RunError
from rlcleanup.models.vocab import CandidateState, RecordStatus
from rlcleanup.ports.controllers import SubmittedJob
from rlcleanup.ports.records import RunRecords
from rlcleanup.steps.deferred_export import export_grant_command

EXPORT_ACTION = "export"
LOG_TAIL_BYTES = 64 * 1024  # asked of the controller: a driver log's end, never the whole log
LOG_TAIL_LINES = 40  # kept on the run error: enough for a traceback's end
LOG_TAIL_CHARS = 4000  # a run error is read in a console and a report; the whole log stays at the controller
OWED = (CandidateState.convertible, CandidateState.partial)


@dataclass(frozen=True)
class OpenJob:
    """One recorded export job not seen ending yet: where it is recorded (run, grant, step) and the job."""

    run_id: str
    grant_id: str
    step: int
    job: ExportJob


def open_export_jobs(records: RunRecords, now: datetime, *, scan_limit: int, limit: int) -> list[OpenJob]:
    """The export jobs a sweep pass asks about: on finished records, submitted by a grant that was not refused, no
    end recorded yet. At most `limit`, drawn afresh each pass (ordered by a hash of the grant and the pass's
    minute), so with more open jobs than one pass asks about, none is left out pass after pass."""
    found = [
        OpenJob(record.run_id, action.grant_id, action.step, action.export_job)
        for record in records.list_runs(limit=scan_limit)
        if record.status is not RecordStatus.in_progress
        for action in record.authority_actions
        if action.action == EXPORT_ACTION
        and action.refusal is None
        and action.step is not None
        and action.export_job is not None
        and action.export_job.ended_at is None
    ]
    draw = now.strftime("%Y%m%d%H%M")
    return sorted(found, key=lambda j: hashlib.sha256(f"{draw}/{j.grant_id}".encode()).hexdigest())[:limit]


def verdict(controller: str, state: str) -> Verdict:
    """The job's state as the controller table reads it (models/controller_states.py): an unknown spelling is not
    terminal, so a job is never called ended on a guess."""
    return source(controller).verdict(state)


def job_end(job: SubmittedJob, log_text: str | None, now: datetime) -> ExportJobEnd:
    """The end of a job whose state is terminal, as the record keeps it (a controller that says no end time: the
    time the sweep saw it ended)."""
    succeeded = verdict(job.controller, job.state) is Verdict.succeeded
    return ExportJobEnd(
        state=job.state,
        succeeded=succeeded,
        exit_code=job.exit_code,
        message=job.message,
        started_at=job.started_at,
        ended_at=job.ended_at or now,
        log_tail=log_tail(log_text) if log_text and not succeeded else None,
    )


def vanished_job(job: ExportJob, detail: str, now: datetime) -> ExportJobEnd:
    """A job its controller no longer knows (Ray answers 404: a restarted head keeps no job history): it will never
    be seen ending, so it is recorded as ended `ABSENT` now, with the controller's words, and the export stays owed."""
    return ExportJobEnd(
        state="ABSENT",
        succeeded=False,
        message=f"{job.controller} no longer knows job {job.job_id}: {detail}"[:2000],
        ended_at=now,
    )


def log_tail(text: str) -> str:
    """The last lines of a job's log, bounded; a line any secret rule flags is withheld whole (the finding names
    the rule, never the value). The run error's own redaction (errors.redact_credentials) runs after."""
    lines = text.replace("\r\n", "\n").rstrip("\n").split("\n")[-LOG_TAIL_LINES:]
    flagged: dict[int, set[str]] = {}
    for finding in scan_string("\n".join(lines), "export job log"):
        flagged.setdefault(finding.line - 1, set()).add(finding.rule)
    kept = [f"[withheld: {', '.join(sorted(flagged[i]))}]" if i in flagged else line for i, line in enumerate(lines)]
    tail = "\n".join(kept)
    return tail if len(tail) <= LOG_TAIL_CHARS else "..." + tail[-LOG_TAIL_CHARS:]


def ended_job(job: ExportJob, end: ExportJobEnd) -> ExportJob:
    """The record's export job with its end."""
    run = end.model_dump(include=set(JobRun.model_fields))  # every field a job's run and its end share
    run["started_at"] = end.started_at or job.started_at
    return job.model_copy(update=run | {"duration_seconds": end.duration_seconds})


def note_job_end(records: RunRecords, open_job: OpenJob, end: ExportJobEnd) -> bool:
    """Write the end onto the grant's document (the record's actions are rebuilt from it by `sync_record`). False
    when the grant document is gone or already says the job ended (a second pass changes nothing)."""
    docs = grant_docs(records, open_job.run_id)
    doc = docs.get(open_job.grant_id)
    if doc is None or doc.outcome is None or not isinstance(doc.outcome.get("export_job"), dict):
        return False
    recorded = ExportJob.model_validate(doc.outcome["export_job"])
    if recorded.ended_at is not None:
        return False
    job = ended_job(recorded, end)
    outcome = {**doc.outcome, "export_job": job.model_dump(mode="json")}
    docs.put(open_job.grant_id, doc.model_copy(update={"outcome": outcome}))
    return True


def retry_fix(run_id: str, step: int) -> str:
    return (
        f"the export is still owed: retry it under a new grant, `{export_grant_command(run_id, step)}` (a preview), "
        "then the same without --dry-run"
    )


def failure_error(open_job: OpenJob, end: ExportJobEnd) -> RunError:
    """A job that did not succeed, as a run error: its state, exit, message and log tail, and the fix."""
    job = open_job.job
    exit_text = f"exit {end.exit_code}" if end.exit_code is not None else "no exit code"
    said = f": {end.message}" if end.message else ""
    tail = f"\nlog tail:\n{end.log_tail}" if end.log_tail else "\n(no log kept by the controller)"
    message = (
        f"export job {job.job_id} on {job.controller} for global_step_{open_job.step} (grant {open_job.grant_id}) "
        f"ended {end.state} ({exit_text}){said}; fix: {retry_fix(open_job.run_id, open_job.step)}{tail}"
    )
    return RunError(step="export", code=RunErrorCode.export_job_failed, message=message)


def invalid_export_error(open_job: OpenJob, candidate: Candidate) -> RunError:
    """A job that succeeded but whose export does not validate: what validation found, and the fix."""
    problems = "; ".join(candidate.problems[:5]) or candidate.state.value
    message = (
        f"export job {open_job.job.job_id} on {open_job.job.controller} succeeded, but global_step_{open_job.step}'s "
        f"export is {candidate.state.value} ({problems}); fix: {retry_fix(open_job.run_id, open_job.step)}"
    )
    return RunError(step="export", code=RunErrorCode.export_job_invalid, message=message)


def already_recorded(record: CompletionRecord, error: RunError, job_id: str) -> bool:
    """A run error of this kind for this job is already on the record (a pass that filed it and stopped before
    noting the job's end)."""
    return any(e.code == error.code and f"export job {job_id} " in e.message for e in record.errors)


def adopted(record: CompletionRecord, step: int, candidate: Candidate) -> list[Candidate] | None:
    """The record's candidates with the step's owed one replaced by its validation, or None when the step's
    candidate is no longer owed (already replaced by an earlier pass, or re-derived by a rerun): a candidate the
    record holds as valid or invalid is never overwritten here (grants bind to its digest)."""
    current = next((c for c in record.candidates if c.step == step), None)
    if current is None or current.state not in OWED:
        return None
    return [candidate if c.step == step else c for c in record.candidates]
