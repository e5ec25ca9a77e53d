"""The first causal error of a run, by the evidence sources' trust order (steps/evidence_sources.py).

A failure receipt, when any process wrote one, is the first cause as that process recorded it; else the logs' first
causal error in chain order (earliest by timestamp across an attempt's files when each has one, else in scan
order), where an infrastructure statement (parsing/infra_statements.py: the raylet's OOM kill, a node marked dead,
the kubelet's node shutdown, the kernel's OOM killer, an Xid) outranks every other cause of its attempt: the Python
exceptions around it are what the killed process and its peers printed as they went down. Only when nothing causal
exists, the earliest teardown error, as a symptom. The record names the source
that decided (`FailureCause.evidence_source`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from rlcleanup.models.record import FailureCause
from rlcleanup.parsing.attempt_logs import AttemptScan
from rlcleanup.parsing.log_scanner import ErrorCandidate
from rlcleanup.steps.evidence_sources import FoundReceipt, SourceKind, receipt_candidate, source_kind
from rlcleanup.steps.layout_model import RunLayout

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


def earliest_in_attempt(scan: AttemptScan, causal: bool, *, statements: bool = False) -> ErrorCandidate | None:
    """The first matching error of each file (only infrastructure statements when `statements`); across files by
    timestamp when all have one, else file order."""
    firsts = [
        next((e for e in f.errors if e.causal == causal and (e.statement is not None or not statements)), None)
        for f in scan.files
    ]
    found = [(i, e) for i, e in enumerate(firsts) if e is not None]
    if not found:
        return None
    if all(e.timestamp is not None for _, e in found):
        return min(found, key=lambda pair: (pair[1].timestamp or datetime.min, pair[0]))[1]
    return found[0][1]


def find_first_error(scans: list[AttemptScan]) -> FirstError | None:
    """Earliest causal error in chain order, an attempt's infrastructure statement before its other causes; the
    earliest teardown error only when nothing causal exists."""
    for causal in (True, False):
        for index, scan in enumerate(scans):
            found = (causal and earliest_in_attempt(scan, True, statements=True)) or earliest_in_attempt(scan, causal)
            if found is not None:
                return FirstError(found, index, causal)
    return None


def find_first_cause(layout: RunLayout, scans: list[AttemptScan], receipts: list[FoundReceipt]) -> FirstError | None:
    """The first cause by the evidence sources' trust order: the earliest failure receipt when any process wrote
    one (the process's own record of its first error), else the logs' first causal error (any log source: the
    driver's, a rotated pod log, a rank's Ray log, a termination artifact), named by the source it came from."""
    if receipts:
        candidate = receipt_candidate(receipts[0], layout)
        index = next((i for i, s in enumerate(scans) if s.attempt_id == candidate.attempt_id), max(len(scans) - 1, 0))
        return FirstError(candidate, index, True, SourceKind.failure_receipt)
    first = find_first_error(scans)
    if first is None:
        return None
    return replace(first, source=source_kind(first.candidate.source_uri, layout))
