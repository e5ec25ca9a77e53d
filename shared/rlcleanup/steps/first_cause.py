"""The first causal error of a run, by the evidence sources' trust order (steps/evidence_sources.py).

A failure receipt, when any process wrote one, is the first cause as that process recorded it; else the logs' first
causal error in chain order (earliest by timestamp across an attempt's files when each has one, else in scan
order), where an infrastructure statement (parsing/infra_statements.py: the raylet's OOM kill, a node marked dead,
the kubelet's node shutdown, the kernel's OOM killer, an Xid) outranks every other cause of its attempt: the Python
exceptions around it are what the killed process and its peers printed as they went down; an exception line printed
without its traceback (an orphan) counts only when the attempt has no other cause. Only when nothing causal exists,
the earliest teardown error, as a symptom. The record names the source
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
    driver's, a rotated pod log, a rank's Ray log, a termination artifact), named by the source it came from."""
    if receipts:
        candidate = receipt_candidate(receipts[0], layout)
        index = next((i for i, s in enumerate(scans) if s.attempt_id == candidate.attempt_id), max(len(scans) - 1, 0))
        return FirstError(candidate, index, True, SourceKind.failure_receipt)
    first = find_first_error(scans)
    if first is None:
        return None
    return replace(first, source=source_kind(first.candidate.source_uri, layout))
