"""The first causal error of a run, by the evidence sources' trust order (steps/evidence_sources.py).

A failure receipt, when any process wrote one, is the first cause as that process recorded it; else the logs' first
causal error in chain order (earliest by timestamp across an attempt's files when each has one, else in scan
order), where an infrastructure statement (parsing/infra_statements.py: the raylet's OOM kill, a node marked dead,
the kubelet's node shutdown, the kernel's OOM killer, an Xid) outranks every other cause of its attempt: the Python
exceptions around it are what the killed process and its peers printed as they went down; an exception line printed
without its traceback (an orphan) counts only when the attempt has no other cause. Only when nothing causal exists,
the earliest teardown error, as a symptom. A failed Marin export step's own statement of its error
(`export_failure_candidate`: the export writes no log of its own to storage, only its attempt record) comes first
when the training step succeeded (every error its processes logged was recovered from), else between the logs'
causal errors and the teardown fallback; so a run whose export failed late, its checkpoint gone from temp, names
that error as its cause, never a teardown line or a recovered error of the training step. The record names the source that decided (`FailureCause.evidence_source`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from rlcleanup.models.record import FailureCause
from rlcleanup.parsing.attempt_logs import AttemptScan
from rlcleanup.parsing.log_scanner import ErrorCandidate
from rlcleanup.steps.evidence_sources import FoundReceipt, SourceKind, receipt_candidate, source_kind
from rlcleanup.steps.layout_model import RunLayout
from rlcleanup.steps.marin import StepRole

EXPORT_FAILURE = "export attempt failure"  # the error type a failed export's record gives (its type is not kept)
ORPHAN_LINE = "orphan_line"  # parsing/log_grammar.ORPHAN_EXCEPTION: an exception line printed without its traceback
CAUSE_FIELDS = ("attempt_id", "source_uri", "line", "error_type", "message", "traceback")  # as the record quotes them


@dataclass(frozen=True)
class FirstError:
    candidate: ErrorCandidate
    attempt_index: int
    causal: bool  # False: nothing causal existed, this is the earliest teardown error (a fallback)
    source: SourceKind = SourceKind.driver_log  # the evidence source that decided (steps/evidence_sources.py)

    def cause(self) -> FailureCause:
        quoted = {name: getattr(self.candidate, name) for name in CAUSE_FIELDS}
        return FailureCause(**quoted, evidence_source=self.source.value)

    def cite(self) -> str:
        c = self.candidate
        return f"{c.error_type}: {c.message} at {c.source_uri}:{c.line} (attempt {c.attempt_id}), from the {self.source.value}"


def earliest_in_attempt(
    scan: AttemptScan, causal: bool, *, statements: bool = False, orphans: bool = True
) -> ErrorCandidate | None:
    """The first matching error of each file (only infrastructure statements when `statements`, no orphan exception
    lines unless `orphans`); across files by timestamp when all have one, else file order."""

    def wanted(e: ErrorCandidate) -> bool:
        # Without orphans, a traceback the file ended inside (no exception line read) waits with them too: it names
        # no error, so a complete one of a lower tier says more.
        lowest = e.kind == ORPHAN_LINE or not e.complete
        return e.causal == causal and (e.statement is not None or not statements) and (orphans or not lowest)

    firsts = [next((e for e in f.errors if wanted(e)), None) for f in scan.files]
    found = [(i, e) for i, e in enumerate(firsts) if e is not None]
    if not found:
        return None
    if all(e.timestamp is not None for _, e in found):
        return min(found, key=lambda pair: (pair[1].timestamp or datetime.min, pair[0]))[1]
    return found[0][1]


def first_causal_in_attempt(scan: AttemptScan) -> ErrorCandidate | None:
    """The attempt's cause by tier: an infrastructure statement, else a complete traceback or a fatal line, else an
    orphan exception line (one printed without its traceback: a retry loop may have logged it and carried on) or a
    traceback cut before its exception line."""
    return (
        earliest_in_attempt(scan, True, statements=True)
        or earliest_in_attempt(scan, True, orphans=False)
        or earliest_in_attempt(scan, True)
    )


def find_first_error(scans: list[AttemptScan]) -> FirstError | None:
    """Earliest causal error in chain order, by tier within an attempt (first_causal_in_attempt); the earliest
    teardown error only when nothing causal exists."""
    for causal in (True, False):
        for index, scan in enumerate(scans):
            found = first_causal_in_attempt(scan) if causal else earliest_in_attempt(scan, False)
            if found is not None:
                return FirstError(found, index, causal)
    return None


def find_first_cause(layout: RunLayout, scans: list[AttemptScan], receipts: list[FoundReceipt]) -> FirstError | None:
    """The first cause by the evidence sources' trust order: the earliest failure receipt when any process wrote
    one (the process's own record of its first error), else the logs' first causal error (any log source: the
    driver's, a rotated pod log, a rank's Ray log, a termination artifact), named by the source it came from. A
    failed export's own error (`export_failure_candidate`) comes before all of them when the training step
    succeeded, else after the logs' causal errors and before their teardown."""
    exported = export_failure_candidate(layout)
    if exported is not None and _training_succeeded(layout):
        # The training step finished (its terminal record exists): whatever its processes logged, they recovered
        # from; the run failed in its export, whose own error is the cause.
        return FirstError(exported, max(len(scans) - 1, 0), True, SourceKind.attempt_record)
    if receipts:
        candidate = receipt_candidate(receipts[0], layout)
        index = next((i for i, s in enumerate(scans) if s.attempt_id == candidate.attempt_id), max(len(scans) - 1, 0))
        return FirstError(candidate, index, True, SourceKind.failure_receipt)
    first = find_first_error(scans)
    if exported is not None and (first is None or not first.causal):  # causal; a training teardown line is not
        return FirstError(exported, max(len(scans) - 1, 0), True, SourceKind.attempt_record)
    if first is None:
        return None
    return replace(first, source=source_kind(first.candidate.source_uri, layout))


def _training_succeeded(layout: RunLayout) -> bool:
    """The training step wrote its terminal record (run-layout-v2.md §3: terminal.json only on success)."""
    step = layout.training_step
    return step is not None and step.role is StepRole.training and step.terminal is not None


def export_failure_candidate(layout: RunLayout) -> ErrorCandidate | None:
    """The first failed attempt of the run's Marin export step, as the error it recorded: MarinSkyRL
    `cloud/iris/export_job.py` `execute_export` (@4505b55) catches the export's own error (`OSError, ValueError,
    KeyError, TypeError, CalledProcessError`: `validate_native_checkpoint`'s "Checkpoint file is missing or
    changed: <path>" when the training step's temp checkpoint expired, a receipt that does not verify, the
    conversion job's failure) and writes `response.failure = str(error)` into `<attempts_root>/<attempt_id>.json`;
    its type and traceback are not kept. Only the export step's: a training attempt's `failure` is Iris's word on
    the job ("Iris job failed: task 0 exited with code 1"), which its logs explain."""
    for step in layout.steps:
        if step.role is not StepRole.export or step.terminal is not None:  # terminal.json: a retry succeeded
            continue
        for attempt in step.attempts:  # discovery's chain order: the first failure is the first cause
            failure = attempt.response.get("failure")
            if attempt.response.get("state") != "failed" or not isinstance(failure, str) or not failure.strip():
                continue
            return ErrorCandidate(
                source_uri=attempt.record_uri or step.uri,
                attempt_id=attempt.attempt_id,
                line=1,
                error_type=EXPORT_FAILURE,
                message=failure.strip(),
                traceback="",
                kind="attempt_record",
            )
    return None
