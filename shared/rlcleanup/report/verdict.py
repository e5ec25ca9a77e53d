"""The one-line verdict: terminal state, first cause, selection (and invalid exports), resume safety, what needs a
person."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import CandidateKind, ClassificationKind, RecordStatus, TerminalState
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


@dataclass(frozen=True)
class SelectionState:
    """Where selection stands now, for every surface (verdict, `status`, `show`, the report): `selected` by the
    declared policy, `chosen` by a used publish/hand-off grant (no policy decided), `unresolved`, or `none` (no
    valid candidate); `steps` the step(s) it names."""

    state: str
    steps: list[int]
    text: str

    @property
    def step(self) -> int | None:
        return self.steps[0] if len(self.steps) == 1 else None


def selection_state(r: CompletionRecord) -> SelectionState | None:
    """The one derivation of the selection a person reads; None before selection ran."""
    s = r.selection
    if s is None:
        return None
    if s.status == "selected" and s.step is not None:
        return SelectionState("selected", [s.step], f"selected step {s.step}")
    chosen = sorted({a.step for a in r.authority_actions if a.state in PUBLISHED and a.step is not None})
    if chosen:  # no declared policy, but an approver chose by publishing
        return SelectionState("chosen", chosen, f"step {_steps(chosen)} chosen by a publish grant")
    valid = [c.step for c in r.candidates if c.valid]
    if not valid:
        return SelectionState("none", [], "no valid candidate to select")
    plural = "s" if len(valid) > 1 else ""
    return SelectionState(
        "unresolved", [], f"selection unresolved among {len(valid)} valid candidate{plural} ({_steps(valid)})"
    )


_SELECTION_TONE = {"selected": GOOD, "chosen": GOOD, "none": BAD, "unresolved": WARN}


def _selection(r: CompletionRecord) -> VerdictPart | None:
    state = selection_state(r)
    return VerdictPart("selection", state.text, _SELECTION_TONE[state.state]) if state else None


def authority_lines(r: CompletionRecord) -> list[str]:
    """What the used grants did, one line each: where the model went, what was registered, reclaimed, cleared.
    Refused and pending grants are `rlcleanup grants`' business; this is what changed the run."""
    lines: list[str] = []
    for a in r.authority_actions:
        if a.refusal is not None:
            continue
        where = f" to {a.destination}" if a.destination else ""
        if a.state in PUBLISHED:
            verb = "handed off" if a.state == "handed_off" else "published"
            lines.append(f"step {a.step} {verb}{where} ({a.verified_objects} objects verified)")
        elif a.state == "reclaimed":
            lines.append(f"reclaimed {a.reclaimed_bytes} bytes of step {a.step}'s export (its copy{where} verified)")
        elif a.state == "registered":
            lines.append(f"step {a.step} registered: {a.uri or a.detail or ''}".rstrip(": "))
        elif a.state == "cleared":
            lines.append("cancellation cleared (pre-cancel capture done)")
    return lines


def _adapters(r: CompletionRecord) -> VerdictPart | None:
    """A LoRA run's candidates are adapters, not models: whoever selects, publishes or serves one needs its base
    (issue 44 item 8: the verdict read as a full-model run)."""
    adapters = [c for c in r.candidates if c.kind is CandidateKind.adapter]
    if not adapters:
        return None
    bases = sorted({c.base_model for c in adapters if c.base_model})
    of = f" of {', '.join(bases)}" if bases else " (base model not named)"
    if len(adapters) == len(r.candidates):
        return VerdictPart("adapters", f"candidates are LoRA adapters{of}, not full models", NEUTRAL)
    return VerdictPart("adapters", f"{len(adapters)} of {len(r.candidates)} candidates are LoRA adapters{of}", NEUTRAL)


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
    parts = [_terminal(r), _cause(r), _selection(r), _adapters(r), _invalid(r), _resume(r), _person(r)]
    if r.errors:
        parts.append(VerdictPart("errors", f"{len(r.errors)} rlcleanup error(s)", BAD))
    return Verdict(run_id=r.run_id, parts=[p for p in parts if p is not None])
