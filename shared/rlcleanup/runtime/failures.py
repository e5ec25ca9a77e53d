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
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlcleanup.errors import (
    INTERNAL_ERROR,
    ErrorKind,
    InvalidMessage,
    PermanentError,
    RecordMissing,
    RecordStoreLost,
    RecordStoreUnavailable,
    RetryLater,
    defect_message,
    error_kind,
)
from rlcleanup.models.documents import AttemptCount, LastTransientError
from rlcleanup.models.outcomes import MemberOutcome
from rlcleanup.models.record import RunError, utcnow
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.collections import DELIVERY_ATTEMPTS, DELIVERY_LAST_ERRORS
from rlcleanup.runtime.admission import attachable_run
from rlcleanup.runtime.attempt_scope import unscoped
from rlcleanup.runtime.claims import failed_claim
from rlcleanup.runtime.envelope import identify
from rlcleanup.runtime.evidence import finish_evidence
from rlcleanup.runtime.ports import Ports

log = logging.getLogger(__name__)

# (ports, the member's claim key, its message as its stage table row decodes it, the error) -> what to store
FailedMember = Callable[[Ports, str, Any, PermanentError], Sequence[tuple[str, MemberOutcome]]]


@dataclass(frozen=True)
class FailureRoute:
    """Where a function's permanent failure goes, from the stage table (runtime/stage_table.py `route`)."""

    entry_point: str
    in_pipeline: bool  # a stage of a run's pipeline: an unfinished run is marked failed
    member_prefix: str | None = None  # a fan-out member: the key prefix of its members' claims
    failed_member: FailedMember | None = None  # ... and what such a member stores when it fails
    decode: Callable[[bytes], Any] | None = None  # its row's decoding of a payload (a member's failure reads it)

    def member_claim(self, key: str) -> bool:
        """Whether the claim that failed is this function's own member claim (not a barrier it was running)."""
        return self.member_prefix is not None and unscoped(key).startswith(self.member_prefix)


DEFECT_DELIVERY_BUDGET = 3
PERMANENT_PREFIX = "permanent error recorded"
_LOGGED = "_rlcleanup_logged"


class RetriesExhausted(PermanentError):
    """A step whose deliveries kept failing until the bus gave up on its message (the in-process bus, or Pub/Sub
    after max_delivery_attempts: runtime/dead_letters.py). `last`: the last delivery's error, where known."""

    def __init__(self, step: str, attempts: int, last: Exception | str | None, *, fix: str | None = None) -> None:
        if isinstance(last, Exception):
            what = f"({error_kind(last).value}), the last with {defect_message(last)}"
        elif last:  # what the function noted of its last transient failure (note_transient)
            what = f"(transient), the last seen with {last}"
        else:
            what = "(a transient error that never cleared, a delivery that timed out, or a server that was down)"
        super().__init__(
            "retries_exhausted",
            f"{step} failed on all {attempts} deliveries {what}; fix: "
            + (
                fix
                or "the cause named here (a storage or service that kept failing, a run file that changed while it "
                "was read), then `rlcleanup run <run root>` again: it resumes the run, keeping what was done"
            ),
        )


def gave_up(step: str, attempts: int, last: Exception) -> PermanentError:
    """The error a dead-lettered message is recorded with: its own when it was permanent, else RetriesExhausted."""
    return last if isinstance(last, PermanentError) else RetriesExhausted(step, attempts, last)


def already_logged(exc: BaseException) -> bool:
    """Whether `exc` was logged (with its traceback) where it was classified: the entry path must not log it
    again (one line per failed delivery)."""
    return bool(getattr(exc, _LOGGED, False))


def to_permanent(p: Ports, entry_point: str, data: bytes, message_id: str | None, exc: Exception) -> PermanentError:
    """The permanent error to finish with, or re-raise `exc` when the delivery should be retried."""
    kind = error_kind(exc)
    if kind is ErrorKind.transient:
        note_transient(p, entry_point, data, exc)
        raise exc
    if kind is ErrorKind.domain:
        assert isinstance(exc, PermanentError)
        return exc
    attempt = count_delivery(p, entry_point, message_id, data)
    run_id = failed_run_id(p, exc, data)  # the record the error may be written on (never one merely named)
    named = run_id or identify(data)[0]  # the log line says which run the message names, as a reader expects
    log.error(
        "defect in %s for run %s (delivery %d of %d): %s",
        entry_point,
        named or "?",
        attempt,
        DEFECT_DELIVERY_BUDGET,
        defect_message(exc),
        exc_info=exc,
        extra={"run_id": named, "error": {"type": type(exc).__name__, "attempt": attempt}},
    )
    with contextlib.suppress(AttributeError):  # an exception type with __slots__: logged twice, never lost
        setattr(exc, _LOGGED, True)
    if run_id and p.records.get(run_id) is not None:
        p.records.add_errors(run_id, [RunError(step=entry_point, code=INTERNAL_ERROR, message=defect_message(exc))])
    if attempt < DEFECT_DELIVERY_BUDGET:
        raise exc
    return PermanentError(INTERNAL_ERROR, defect_message(exc))


def last_error_key(entry_point: str, data: bytes) -> str:
    """Where a message's last transient failure is noted: by its bytes (a dead letter Pub/Sub forwards keeps them,
    not its message id)."""
    return f"{entry_point}:last:{hashlib.sha256(data).hexdigest()[:32]}"


def note_transient(p: Ports, entry_point: str, data: bytes, exc: Exception) -> None:
    """Note the error of a delivery that will be retried, so that the dead-letter recorder can name it if Pub/Sub
    gives up on the message (runtime/dead_letters.py). Best effort, and not for a busy claim (the common, harmless
    case) nor for the record store's own failures (the note would wait on the same outage)."""
    if isinstance(exc, RetryLater | RecordStoreUnavailable | RecordMissing):
        return
    try:
        note = LastTransientError(entry_point=entry_point, last_error=defect_message(exc)[:500])
        DELIVERY_LAST_ERRORS.bind(p.records, LastTransientError).put(last_error_key(entry_point, data), note)
    except Exception as again:
        log.debug("could not note the transient error of %s: %s", entry_point, defect_message(again))


def count_delivery(p: Ports, entry_point: str, message_id: str | None, data: bytes) -> int:
    """This message's deliveries that hit a defect, this one included. Read-then-write: two concurrent duplicates
    may count once, which only grants one more retry."""
    key = f"{entry_point}:{message_id or hashlib.sha256(data).hexdigest()[:32]}"
    counts = DELIVERY_ATTEMPTS.bind(p.records, AttemptCount)
    seen = counts.get(key) or AttemptCount()
    attempt = seen.attempts + 1
    counts.put(key, AttemptCount(attempts=attempt, entry_point=entry_point))
    return attempt


def finish_failed(
    p: Ports,
    route: FailureRoute,
    data: bytes,
    exc: Exception,
    error: PermanentError,
    retry_fan_in: Callable[[], str],
) -> str:
    """Complete the failed fan-out member (then re-run its fan-in), or mark the run's pipeline failed."""
    claim = failed_claim(exc)
    if claim is not None and route.member_claim(claim.key) and not isinstance(error, RecordStoreLost):
        assert route.failed_member is not None and route.decode is not None  # the stage table gives every member both
        # What the member stores is its stage's (the stage table's row); a cut log's later segments too.
        for key, outcome in route.failed_member(p, claim.key, route.decode(data), error):
            p.claims.complete_as(claim.run_id, key, outcome)
        log.warning("fan-out member %s of run %s completed as failed: %s", claim.key, claim.run_id, error.code)
        try:
            retry_fan_in()  # the member's claim is done now: the handler goes straight to its fan-in
        except Exception as again:
            if error_kind(again) is ErrorKind.transient:
                raise
            log.error("fan-in after %s failed: %s", claim.key, defect_message(again), exc_info=again)
            code = again.code if isinstance(again, PermanentError) else INTERNAL_ERROR
            message = str(again) if isinstance(again, PermanentError) else defect_message(again)
            mark_run_failed(p, claim.run_id, route.entry_point, code, message)
        return f"{PERMANENT_PREFIX}: {error.code}; {claim.key} completed as failed"
    run_id = claim.run_id if claim else failed_run_id(p, exc, data)
    if run_id and route.in_pipeline and not isinstance(error, InvalidMessage):
        mark_run_failed(p, run_id, route.entry_point, error.code, str(error))
    return f"{PERMANENT_PREFIX}: {error.code}"


def mark_run_failed(p: Ports, run_id: str, step: str, code: str, message: str) -> None:
    """An unfinished run whose pipeline cannot go on: `failed`, with the reason on errors[] and remaining_work."""
    record = p.records.get(run_id)
    if record is None or record.status is not RecordStatus.in_progress:
        return
    p.records.add_errors(run_id, [RunError(step=step, code=code, message=message[:2000])])
    redo = (
        f"`rlcleanup run {record.run_uri} --rerun`"
        if p.embedded
        else "re-emit the run's terminal event (`rlcleanup emit --run-uri ... --state ...`)"
    )
    remaining = [
        *record.remaining_work,
        f"rlcleanup could not finish step {step} ({code}): see errors[]; after a fix, {redo}",
    ]
    fields: dict[str, Any] = {"status": RecordStatus.failed.value, "remaining_work": remaining}
    if record.ended_at is None:  # the terminal-state step never ran: the run had ended by the time its event came
        fields["ended_at"] = utcnow()
    p.records.update(run_id, fields)
    try:  # what was preserved before the failure is listed too; the failure itself is already recorded
        finish_evidence(p, run_id, with_report=False)
    except Exception as exc:
        log.warning("manifest for failed run %s not sealed: %s", run_id, defect_message(exc), extra={"run_id": run_id})


def failed_run_id(p: Ports, exc: BaseException, data: bytes) -> str | None:
    """The run a failure is written on: its claim's, else the record the message's own location is bound to
    (never a run the payload merely names: that would let any sender fail another run)."""
    claim = failed_claim(exc)
    return claim.run_id if claim else attachable_run(p, data)
