"""What happens to a delivery that raised: retry it, or finish what it was doing as failed.

- transient: re-raised (HTTP 500 / a nack): redelivered with backoff.
- defect (our bug): logged with its traceback and recorded on the run as `internal_error` on every delivery
  (the same error once: errors are deduplicated); re-raised until the message has been delivered
  DEFECT_DELIVERY_BUDGET times, then handled as a permanent error.
- permanent (a domain error, or a defect past its budget): parked on the dead-letter topic, then
  * in a fan-out member (a log-scan part, a capture part, one validation) the member's claim is *completed* with
    `ok=False` and what it could not do, and the member's fan-in is re-run: a barrier counts completions, so the
    run still finishes;
  * in any other stage of a run's pipeline the run is marked `failed` (errors[] says why), so no record is left
    `in_progress` once every message has been handled.

Retry budget: a per-message delivery counter in the record store (`delivery_attempts/<entry point>:<message
id>`), written only when a defect happens. Pub/Sub's own `deliveryAttempt` is not used: functions-framework's
conversion of a raw push request into a CloudEvent drops it (and the embedded bus has none), so the counter is
the one mechanism that works everywhere. The budget (3) is below every function's max_delivery_attempts (>= 5),
so Pub/Sub never dead-letters a defect behind our back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rlcleanup.errors import (
    INTERNAL_ERROR,
    ErrorKind,
    InvalidMessage,
    PermanentError,
    RecordStoreLost,
    defect_message,
    error_kind,
)
from rlcleanup.models.events import CandidateMessage, CapturePartMessage, LogScanPartMessage, target_step
from rlcleanup.models.outcomes import CapturePartOutcome, LogScanOutcome, MemberError, ValidationOutcome
from rlcleanup.models.record import Candidate, ResumeSafety, RunError, utcnow
from rlcleanup.models.vocab import CandidateProblem, RecordStatus
from rlcleanup.runtime.attempt_scope import unscoped
from rlcleanup.runtime.claims import failed_claim
from rlcleanup.runtime.evidence import finish_evidence
from rlcleanup.runtime.layouts import run_layout
from rlcleanup.runtime.ports import Ports
from rlcleanup.steps.facts import safe_run_id
from rlcleanup.uris import basename, join, parent

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

DEFECT_DELIVERY_BUDGET = 3
ATTEMPTS_COLLECTION = "delivery_attempts"
PERMANENT_PREFIX = "permanent error recorded"
# The entry points that make up a run's pipeline: a stage failing there fails the run. Authority handlers
# (apply_grant, ...) are not: a bad grant must never turn a finished record into `failed`.
PIPELINE_ENTRY_POINTS = frozenset(
    {
        "on_job_event",
        "establish_terminal_state",
        "scan_log_part",
        "plan_capture",
        "capture_part",
        "validate_candidate",
        "select_candidate",
    }
)
MEMBER_PREFIXES = ("log-scan:", "capture-part:", "validate:")


_LOGGED = "_rlcleanup_logged"


def already_logged(exc: BaseException) -> bool:
    """Whether `exc` was logged (with its traceback) where it was classified: the entry path must not log it
    again (one line per failed delivery)."""
    return bool(getattr(exc, _LOGGED, False))


def to_permanent(p: Ports, entry_point: str, data: bytes, message_id: str | None, exc: Exception) -> PermanentError:
    """The permanent error to finish with, or re-raise `exc` when the delivery should be retried."""
    kind = error_kind(exc)
    if kind is ErrorKind.transient:
        raise exc
    if kind is ErrorKind.domain:
        assert isinstance(exc, PermanentError)
        return exc
    attempt = count_delivery(p, entry_point, message_id, data)
    run_id = failed_run_id(exc, data)
    log.error(
        "defect in %s for run %s (delivery %d of %d): %s",
        entry_point,
        run_id or "?",
        attempt,
        DEFECT_DELIVERY_BUDGET,
        defect_message(exc),
        exc_info=exc,
        extra={"run_id": run_id, "error": {"type": type(exc).__name__, "attempt": attempt}},
    )
    with contextlib.suppress(AttributeError):  # an exception type with __slots__: logged twice, never lost
        setattr(exc, _LOGGED, True)
    if run_id and p.records.get(run_id) is not None:
        p.records.add_errors(run_id, [RunError(step=entry_point, code=INTERNAL_ERROR, message=defect_message(exc))])
    if attempt < DEFECT_DELIVERY_BUDGET:
        raise exc
    return PermanentError(INTERNAL_ERROR, defect_message(exc))


def count_delivery(p: Ports, entry_point: str, message_id: str | None, data: bytes) -> int:
    """This message's deliveries that hit a defect, this one included. Read-then-write: two concurrent duplicates
    may count once, which only grants one more retry."""
    key = f"{entry_point}:{message_id or hashlib.sha256(data).hexdigest()[:32]}"
    seen = p.records.get_doc(ATTEMPTS_COLLECTION, key) or {}
    attempt = int(seen.get("attempts") or 0) + 1
    p.records.put_doc(ATTEMPTS_COLLECTION, key, {"attempts": attempt, "entry_point": entry_point})
    return attempt


def finish_failed(
    p: Ports,
    entry_point: str,
    data: bytes,
    exc: Exception,
    error: PermanentError,
    retry_fan_in: Any,
) -> str:
    """Complete the failed fan-out member (then re-run its fan-in), or mark the run's pipeline failed."""
    claim = failed_claim(exc)
    if claim is not None and unscoped(claim.key).startswith(MEMBER_PREFIXES) and not isinstance(error, RecordStoreLost):
        outcome = member_failure(p, claim.key, data, error)
        p.claims.complete(claim.run_id, claim.key, outcome.model_dump(mode="json"))
        for later, unread in later_segments(claim.key, data, error):  # a cut log's chain ends here: they never run
            p.claims.complete(claim.run_id, later, unread.model_dump(mode="json"))
        log.warning("fan-out member %s of run %s completed as failed: %s", claim.key, claim.run_id, error.code)
        try:
            retry_fan_in()  # the member's claim is done now: the handler goes straight to its fan-in
        except Exception as again:
            if error_kind(again) is ErrorKind.transient:
                raise
            log.error("fan-in after %s failed: %s", claim.key, defect_message(again), exc_info=again)
            code = again.code if isinstance(again, PermanentError) else INTERNAL_ERROR
            message = str(again) if isinstance(again, PermanentError) else defect_message(again)
            mark_run_failed(p, claim.run_id, entry_point, code, message)
        return f"{PERMANENT_PREFIX}: {error.code}; {claim.key} completed as failed"
    run_id = claim.run_id if claim else failed_run_id(exc, data)
    if run_id and entry_point in PIPELINE_ENTRY_POINTS and not isinstance(error, InvalidMessage):
        mark_run_failed(p, run_id, entry_point, error.code, str(error))
    return f"{PERMANENT_PREFIX}: {error.code}"


def mark_run_failed(p: Ports, run_id: str, step: str, code: str, message: str) -> None:
    """An unfinished run whose pipeline cannot go on: `failed`, with the reason on errors[] and remaining_work."""
    record = p.records.get(run_id)
    if record is None or record.status is not RecordStatus.in_progress:
        return
    p.records.add_errors(run_id, [RunError(step=step, code=code, message=message[:2000])])
    remaining = [
        *record.remaining_work,
        f"rlcleanup could not finish step {step} ({code}): see errors[]; after a fix, re-emit the run's terminal event",
    ]
    fields: dict[str, Any] = {"status": RecordStatus.failed.value, "remaining_work": remaining}
    if record.ended_at is None:  # the terminal-state step never ran: the run had ended by the time its event came
        fields["ended_at"] = utcnow()
    p.records.update(run_id, fields)
    try:  # what was preserved before the failure is listed too; the failure itself is already recorded
        finish_evidence(p, run_id, with_report=False)
    except Exception as exc:
        log.warning("manifest for failed run %s not sealed: %s", run_id, defect_message(exc), extra={"run_id": run_id})


def later_segments(key: str, data: bytes, error: PermanentError) -> list[tuple[str, LogScanOutcome]]:
    """The claim keys of the segments after a failed segment of a cut log (each is published by the one before,
    so none will run), with their failed outcomes: the fan-in counts them and the record names the file unread."""
    if not unscoped(key).startswith("log-scan:"):
        return []
    part = LogScanPartMessage.model_validate_json(data).part
    segment = part.segment
    if segment is None:
        return []
    prefix, (head, number) = key[: len(key) - len(part.part_id)], part.part_id.rsplit("-p", 1)
    failure = MemberError(
        code=error.code, message=f"not scanned: segment {segment.index + 1} of {segment.count} failed first"
    )
    return [
        (f"{prefix}{head}-p{int(number) + k:04d}", LogScanOutcome(ok=False, error=failure, files=1, unread=[]))
        for k in range(1, segment.count - segment.index)
    ]


def member_failure(p: Ports, key: str, data: bytes, error: PermanentError) -> BaseModel:
    """The stored outcome of a fan-out member that failed: ok=False, the error, and what it could not do."""
    failure = MemberError(code=error.code, message=str(error)[:2000])
    key = unscoped(key)  # a later pass's members carry its scope prefix
    if key.startswith("log-scan:"):
        scan = LogScanPartMessage.model_validate_json(data)
        return LogScanOutcome(
            ok=False, error=failure, files=len(scan.part.uris), bytes=scan.part.bytes, unread=list(scan.part.uris)
        )
    if key.startswith("capture-part:"):
        copy = CapturePartMessage.model_validate_json(data)
        return CapturePartOutcome(ok=False, error=failure, unpreserved=[item.source for item in copy.part.items])
    check = CandidateMessage.model_validate_json(data)
    code = error.code if error.code in CandidateProblem.__members__ else CandidateProblem.internal_error.value
    problem = f"{code}: validation could not finish: {failure.message}"
    step = target_step(key.removeprefix("validate:"))  # the failed member's own target (a batch names several)
    if step is None:
        return ValidationOutcome(ok=False, error=failure, resume_safety=ResumeSafety(safe=False, reasons=[problem]))
    return ValidationOutcome(
        ok=False,
        error=failure,
        candidate=Candidate(
            step=step,
            uri=_export_uri(p, check.run_id, check.run_uri, step, check.scope),
            valid=False,
            problems=[problem],
        ),
    )


def _export_uri(p: Ports, run_id: str, run_uri: str, step: int, scope: str = "") -> str:
    try:
        return run_layout(p, run_id, run_uri, scope).export_uri(step)
    except Exception:  # the listing may be what failed: name the conventional place instead
        return join(run_uri, "exports", f"global_step_{step}", "policy")


def failed_run_id(exc: BaseException, data: bytes) -> str | None:
    claim = failed_claim(exc)
    return claim.run_id if claim else identify(data)[0]


def identify(data: bytes) -> tuple[str | None, str | None]:
    """(run_id, run_uri) named by a payload, as far as it can be read at all."""
    try:
        payload = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # `[[[[...` nests past the recursion limit
        return None, None
    if not isinstance(payload, dict):
        return None, None
    run_uri = payload.get("run_uri") if isinstance(payload.get("run_uri"), str) else None
    run_id = payload.get("run_id") if isinstance(payload.get("run_id"), str) else None
    if run_id is None and run_uri:
        run_id = f"{basename(parent(run_uri))}-{basename(run_uri)}"
    return (safe_run_id(run_id) if run_id else None), run_uri


def decode(model: type[M], data: bytes) -> M:
    """A message payload as its model; a payload that does not match is bad input (InvalidMessage)."""
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        raise InvalidMessage.from_validation(exc) from exc
