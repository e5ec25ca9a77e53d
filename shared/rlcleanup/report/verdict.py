"""The one-line verdict: terminal state, first cause, selection (and invalid exports), resume safety, what needs a
person."""

from __future__ import annotations

import re
from itertools import pairwise

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import ClassificationKind, RecordStatus, TerminalState
from rlcleanup.report.document import BAD, GOOD, NEUTRAL, WARN, Verdict, VerdictPart
from rlcleanup.report.fold import clip
from rlcleanup.steps.remaining import PUBLISHED

_TERMINAL_TONE = {
    TerminalState.completed: GOOD,
    TerminalState.failed: BAD,
    TerminalState.cancelled: WARN,
    TerminalState.indeterminate: WARN,
}


def _steps(steps: list[int]) -> str:
    return summarise_steps(steps)


# Steps are listed one by one up to this many; more are summarised as ranges (issue 38 item 11: 40 candidates made
# a 600-character verdict line).
LISTED_STEPS = 6
_STEP_LIST = re.compile(r"\[(\d+(?:, \d+)+)\]")


def summarise_steps(steps: list[int]) -> str:
    """Steps for a one-line verdict: a few are listed ("5, 10, 15"); more are runs of one stride, "5-200" (one
    run, every 5) or "5-50, 60-200" (a gap), at most 3 runs, else the span with the count ("5-200 (40 steps)")."""
    ordered = sorted(set(steps))
    if len(ordered) <= LISTED_STEPS:
        return ", ".join(str(s) for s in ordered)
    stride = min(b - a for a, b in pairwise(ordered))
    runs: list[list[int]] = [[ordered[0]]]
    for step in ordered[1:]:
        if step - runs[-1][-1] == stride:
            runs[-1].append(step)
        else:
            runs.append([step])
    if len(runs) > 3:
        return f"{ordered[0]}-{ordered[-1]} ({len(ordered)} steps)"
    every = f" every {stride}" if stride > 1 else ""
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs) + every


def summarise_work(items: list[str]) -> str:
    """The first remaining-work item for the verdict line: its topic (the words before its first ": "; the report's
    "What a person must do" and `show` say the rest), step lists summarised, then how many more there are."""
    first = items[0].split(": ", 1)[0] if ": " in items[0] else items[0]
    more = f" (+{len(items) - 1} more)" if len(items) > 1 else ""
    return clip(summarise_step_lists(first), 80) + more


def summarise_step_lists(text: str) -> str:
    """A sentence (a remaining-work item) with every bracketed step list in it summarised as `summarise_steps`."""
    return _STEP_LIST.sub(lambda m: "(" + summarise_steps([int(x) for x in m.group(1).split(", ")]) + ")", text)


def _terminal(r: CompletionRecord) -> VerdictPart:
    kind = r.classification.kind if r.classification else None
    if kind is ClassificationKind.agentic:
        return VerdictPart("terminal", "agentic run, routed to the agentic cleanup path", WARN)
    if kind is ClassificationKind.unknown:
        return VerdictPart("terminal", "classification unknown (neither standard nor agentic)", BAD)
    if r.terminal_state is None:
        tone = BAD if r.status is RecordStatus.failed else WARN
        return VerdictPart("terminal", f"terminal state not established ({r.status.value})", tone)
    return VerdictPart("terminal", r.terminal_state.value, _TERMINAL_TONE[r.terminal_state])


def _cause(r: CompletionRecord) -> VerdictPart | None:
    cause = r.first_failure_cause
    if cause is not None:
        where = f" in attempt {cause.attempt_id}" if cause.attempt_id else ""
        return VerdictPart("cause", f"first cause {cause.error_type}{where}", BAD)
    if r.terminal_state is TerminalState.failed:
        return VerdictPart("cause", "first cause not found in the logs", BAD)
    return None


def _selection(r: CompletionRecord) -> VerdictPart | None:
    valid = [c.step for c in r.candidates if c.valid]
    s = r.selection
    if s is None:
        return None
    if s.status == "selected" and s.step is not None:
        return VerdictPart("selection", f"selected step {s.step}", GOOD)
    chosen = sorted({a.step for a in r.authority_actions if a.state in PUBLISHED and a.step is not None})
    if chosen:  # no declared policy, but an approver chose by publishing
        return VerdictPart("selection", f"step {_steps(chosen)} chosen by a publish grant", GOOD)
    if not valid:
        return VerdictPart("selection", "no valid candidate to select", BAD)
    plural = "s" if len(valid) > 1 else ""
    return VerdictPart(
        "selection", f"selection unresolved among {len(valid)} valid candidate{plural} ({_steps(valid)})", WARN
    )


def _invalid(r: CompletionRecord) -> VerdictPart | None:
    bad = [c.step for c in r.candidates if not c.valid]
    if not bad:
        return None
    return VerdictPart("invalid", f"{len(bad)} invalid export{'s' if len(bad) > 1 else ''} ({_steps(bad)})", BAD)


def _resume(r: CompletionRecord) -> VerdictPart | None:
    rs = r.resume_safety
    if rs is None:
        return None
    if rs.safe:
        return VerdictPart("resume", f"resume safe from step {rs.from_step}", GOOD)
    reason = f": {rs.reasons[0]}" if rs.reasons else ""
    return VerdictPart("resume", f"resume UNSAFE{reason}", BAD)


def _person(r: CompletionRecord) -> VerdictPart:
    if not r.remaining_work:
        if r.status is RecordStatus.in_progress:
            return VerdictPart("person", "still in progress", NEUTRAL)
        return VerdictPart("person", "nothing needs a person", GOOD)
    return VerdictPart("person", f"a person must: {summarise_work(r.remaining_work)}", WARN)


def build_verdict(r: CompletionRecord) -> Verdict:
    parts = [_terminal(r), _cause(r), _selection(r), _invalid(r), _resume(r), _person(r)]
    if r.errors:
        parts.append(VerdictPart("errors", f"{len(r.errors)} rlcleanup error(s)", BAD))
    return Verdict(run_id=r.run_id, parts=[p for p in parts if p is not None])
