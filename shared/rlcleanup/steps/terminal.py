"""Step 2: establish the terminal state from the controller's word paired with durable outputs and trainer logs.

The controller says how the job ended; the commit marker, exports and trainer strings say whether training did.
Where they disagree the artifacts win for `completed` (a finished budget is finished), and the reasoning says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rlcleanup.formats.config import get, get_int, parse_int
from rlcleanup.models import controller_states
from rlcleanup.models.controller_states import Verdict
from rlcleanup.models.record import Attempt, ChainCoverage, FailureCause
from rlcleanup.models.vocab import TerminalState
from rlcleanup.parsing.logs import AttemptScan, ErrorCandidate, EventKind, TrainerEvent, log_order
from rlcleanup.parsing.metrics import StitchedMetrics, stitch
from rlcleanup.steps.layout import AttemptFiles, RunLayout

ROW_COUNT_KEYS = ("data.num_train_rows", "data.train_rows")  # our convention (run-layout.md)
MAX_LOG_URIS_IN_RECORD = 20  # 500 ranks x 3 attempts of log URIs would pass Firestore's 1 MiB; the manifest has all


# -- budget ----------------------------------------------------------------------------------------------------


def step_budget(skyrl: dict[str, Any]) -> tuple[int | None, str]:
    """(budget, how it was derived). `trainer.max_steps` caps the epoch-derived total; either alone suffices."""
    max_steps = get_int(skyrl, "trainer.max_steps")
    if max_steps is not None and max_steps <= 0:
        max_steps = None  # SkyRL treats a non-positive max_steps as "no cap"
    rows = next((v for k in ROW_COUNT_KEYS if (v := get_int(skyrl, k)) is not None and v > 0), None)
    batch = get_int(skyrl, "trainer.train_batch_size")
    epochs = get_int(skyrl, "trainer.epochs")
    derived: int | None = None
    derived_how = ""
    if rows is not None and batch and batch > 0 and epochs and epochs > 0:
        derived = math.ceil(rows / batch) * epochs
        derived_how = f"ceil({rows} rows / train_batch_size {batch}) * epochs {epochs} = {derived}"
    if max_steps is not None and derived is not None:
        if max_steps <= derived:
            return max_steps, f"trainer.max_steps = {max_steps} caps the epoch total ({derived_how})"
        return derived, f"{derived_how}, below trainer.max_steps = {max_steps}"
    if max_steps is not None:
        return max_steps, f"trainer.max_steps = {max_steps} (row count unknown, so the epoch total was not checked)"
    if derived is not None:
        return derived, derived_how
    missing = [
        name
        for name, value in (("row count (data.num_train_rows)", rows), ("trainer.train_batch_size", batch))
        if not value
    ]
    if not epochs:
        missing.append("trainer.epochs")
    return None, f"unknown: no trainer.max_steps and no {', '.join(missing)}"


# -- controller ------------------------------------------------------------------------------------------------

# Normalised controller states (models/controller_states.py holds every source's spellings).
SUCCEEDED, FAILED, CANCELLED = Verdict.succeeded, Verdict.failed, Verdict.cancelled


def normalize_state(raw: str | int, source_name: str) -> tuple[Verdict, str]:
    """(verdict, spelled) in `source_name`'s table — (5, "iris") -> (failed, "FAILED"); an unknown spelling is
    `unknown` (no verdict); an unknown source raises UnknownStateSource."""
    table = controller_states.source(source_name)
    return table.verdict(raw), table.spell(raw)


@dataclass(frozen=True)
class ControllerReading:
    state: Verdict  # normalized: succeeded | failed | cancelled | running | pending | unknown (| ended)
    raw: str  # as the source spells it
    source: str  # where it came from, e.g. "iris event", ".executor_status"

    @property
    def terminal(self) -> bool:
        """The controller said how the job ended (a bare "ended" is no verdict)."""
        return self.state.has_outcome

    def describe(self) -> str:
        return f"{self.state} ({self.source}: {self.raw})"


def controller_readings(
    layout: RunLayout, event_state: str | int | None, event_source: str | None, controller_absent: bool
) -> list[ControllerReading]:
    """Every reading in precedence order: event, .executor_status, terminal.json, the last attempt record."""
    readings: list[ControllerReading] = []

    def add(raw: Any, table: str, source: str) -> None:
        if isinstance(raw, str | int) and not isinstance(raw, bool) and str(raw).strip():
            state, spelled = normalize_state(raw, table)
            readings.append(ControllerReading(state, spelled if parse_int(str(raw)) is not None else str(raw), source))

    if event_state is not None and not controller_absent:
        if event_source is None:  # a RunMessage comes from a validated JobEvent: its source is always known
            raise controller_states.UnknownStateSource("(none given)")
        add(event_state, event_source, f"{event_source} event")
    add(layout.executor_status, "marin", ".executor_status")
    if layout.terminal:
        terminal_uri = layout.terminal_uri or "terminal.json"
        add(get(layout.terminal, "response.state"), "protocol", f"{terminal_uri} response.state")
        add(get(layout.terminal, "response.iris_job_state"), "iris", "terminal.json response.iris_job_state")
    if layout.attempts:
        last = layout.attempts[-1]
        add(last.response.get("state"), "protocol", f"attempt {last.attempt_id} record response.state")
        add(last.response.get("iris_job_state"), "iris", f"attempt {last.attempt_id} record response.iris_job_state")
    return readings


# -- first causal error ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstError:
    candidate: ErrorCandidate
    attempt_index: int
    causal: bool  # False: nothing causal existed, this is the earliest teardown error (a fallback)

    def cause(self) -> FailureCause:
        c = self.candidate
        return FailureCause(
            attempt_id=c.attempt_id,
            source_uri=c.source_uri,
            line=c.line,
            error_type=c.error_type,
            message=c.message,
            traceback=c.traceback,
        )

    def cite(self) -> str:
        c = self.candidate
        return f"{c.error_type}: {c.message} at {c.source_uri}:{c.line} (attempt {c.attempt_id})"


def _earliest_in_attempt(scan: AttemptScan, causal: bool) -> ErrorCandidate | None:
    """The first matching error of each file; across files by timestamp when all have one, else file order."""
    firsts = [next((e for e in f.errors if e.causal == causal), None) for f in scan.files]
    found = [(i, e) for i, e in enumerate(firsts) if e is not None]
    if not found:
        return None
    if all(e.timestamp is not None for _, e in found):
        return min(found, key=lambda pair: (pair[1].timestamp or datetime.min, pair[0]))[1]
    return found[0][1]


def find_first_error(scans: list[AttemptScan]) -> FirstError | None:
    """Earliest causal error in chain order; the earliest teardown error only when nothing causal exists."""
    for causal in (True, False):
        for index, scan in enumerate(scans):
            found = _earliest_in_attempt(scan, causal)
            if found is not None:
                return FirstError(found, index, causal)
    return None


def first_causal_error(scans: list[AttemptScan]) -> FailureCause | None:
    first = find_first_error(scans)
    return first.cause() if first else None


# -- terminal state --------------------------------------------------------------------------------------------


@dataclass
class TerminalVerdict:
    terminal_state: TerminalState
    reasoning: list[str]
    controller: ControllerReading | None
    step_budget: int | None  # effective: the trainer's logged max when it disagrees with the config
    last_trained_step: int | None
    last_saved_step: int | None
    first_failure_cause: FailureCause | None
    failure_is_teardown_fallback: bool
    attempts: list[Attempt]
    coverage: ChainCoverage
    stitched: StitchedMetrics = field(repr=False, default_factory=StitchedMetrics)

    @property
    def controller_state(self) -> str | None:
        return self.controller.describe() if self.controller else None


def _at(item: TrainerEvent | ErrorCandidate) -> str:
    return f"{item.source_uri}:{item.line}"


def _ordered_scans(layout: RunLayout, scans: list[AttemptScan]) -> list[AttemptScan]:
    order = {a.attempt_id: i for i, a in enumerate(layout.attempts)}
    return sorted(scans, key=lambda s: order.get(s.attempt_id, len(order)))


def _attempt_model(att: AttemptFiles, scan: AttemptScan | None, stitched: StitchedMetrics) -> Attempt:
    resp = att.response
    span = next((s for s in stitched.attempts if s.attempt_id == att.attempt_id), None)
    state = resp.get("state") or resp.get("iris_job_state")
    failure = resp.get("failure") if isinstance(resp.get("failure"), str) else None
    if scan is not None:
        first = _earliest_in_attempt(scan, True)
        if state is None:
            done = any(scan.has_event(k) for k in (EventKind.training_done, EventKind.resumed_already_complete))
            stopped = scan.has_event(EventKind.controller_stopped)  # e.g. a Slurm time limit ends a link
            state = "succeeded" if done else "failed" if first else "cancelled" if stopped else None
        if failure is None and first is not None:
            failure = f"{first.error_type}: {first.message} at {_at(first)}"
    job_id = resp.get("iris_job_id") or get(resp, "model.iris_job_id")
    ended_at = att.ended_at
    if ended_at is None and scan is not None:
        stamps = [f.last_timestamp for f in scan.files if f.last_timestamp]
        ended_at = max(stamps) if stamps else None
    return Attempt(
        attempt_id=att.attempt_id,
        job_id=str(job_id) if job_id else None,
        started_at=att.started_at,
        ended_at=ended_at,
        state=str(state) if state is not None else None,
        first_step=span.first_step if span else None,
        last_step=span.last_step if span else None,
        log_uris=log_order(att.log_uris)[:MAX_LOG_URIS_IN_RECORD],
        log_count=len(att.log_uris),
        failure=failure,
    )


@dataclass
class _Evidence:
    """What the durable outputs and trainer strings say, with sentences citing each."""

    budget: int | None
    reached: bool
    by_logs_only: bool
    already_complete: TrainerEvent | None
    training_done: TrainerEvent | None
    notes: list[str]


def _last(events: list[TrainerEvent], *kinds: EventKind) -> TrainerEvent | None:
    return next((e for e in reversed(events) if e.kind in kinds), None)


def _evidence(layout: RunLayout, events: list[TrainerEvent], budget: int | None, budget_reason: str) -> _Evidence:
    notes: list[str] = []
    marker = layout.marker_step
    reached_max = _last(events, EventKind.reached_max_steps)
    done = _last(events, EventKind.training_done)
    final_save = _last(events, EventKind.saved_final_checkpoint)
    complete_tail = _last(events, EventKind.resumed_already_complete, EventKind.already_complete_on_resume)
    if (
        complete_tail is not None
        and complete_tail.kind == EventKind.resumed_already_complete
        and (
            complete_tail.step is None
            or complete_tail.max_steps is None
            or complete_tail.step < complete_tail.max_steps
        )
    ):
        complete_tail = None  # the line must really say G >= N

    effective = budget
    if budget is None:
        if reached_max is not None:
            effective = reached_max.step
            notes.append(
                f"The step budget is unknown from the config ({budget_reason}), so completion cannot rest on the marker "
                f"alone; the trainer logged 'Reached max training steps ({reached_max.step})' at {_at(reached_max)} "
                f"and that number is used."
            )
        else:
            notes.append(
                f"The step budget is unknown ({budget_reason}) and no 'Reached max training steps' line was logged, "
                "so the marker alone cannot show completion."
            )
    else:
        notes.append(f"The step budget is {budget} ({budget_reason}).")
        if reached_max is not None and reached_max.step is not None and reached_max.step != budget:
            effective = reached_max.step
            notes.append(
                f"The trainer logged 'Reached max training steps ({reached_max.step})' at {_at(reached_max)}, which "
                f"disagrees with the configured budget {budget}; the trainer's number is used."
            )

    marker_text = f"the commit marker {layout.marker_uri}" if layout.marker_uri else "the commit marker"
    reached = by_logs_only = False
    if marker is None:
        notes.append(f"No readable commit marker at {layout.marker_uri or 'the checkpoint root'}.")
        finish = done or final_save
        if effective is not None and reached_max is not None and finish is not None:
            reached = by_logs_only = True
            notes.append(
                f"Without a marker, completion rests on the trainer strings 'Reached max training steps "
                f"({reached_max.step})' at {_at(reached_max)} and '{finish.text.strip()}' at {_at(finish)}."
            )
    elif effective is None:
        notes.append(f"{marker_text} reads {marker}.")
    elif marker == effective:
        reached = True
        notes.append(f"{marker_text} reads {marker}, equal to the budget {effective}: the budget was reached.")
    elif marker == effective + 1:
        reached = True
        notes.append(
            f"{marker_text} reads {marker}, the budget {effective} + 1 (SkyRL labels the final save one past the "
            "last step): the budget was reached."
        )
    elif marker > effective + 1:
        notes.append(
            f"{marker_text} reads {marker}, beyond budget + 1 ({effective + 1}): the derived budget looks wrong, "
            "so the marker cannot show completion."
        )
    else:
        notes.append(f"{marker_text} reads {marker}, short of the budget {effective}.")

    if marker is not None:
        export_steps = {marker, marker - 1} if effective is not None and marker == effective + 1 else {marker}
        present = sorted(s for s in export_steps if s in layout.export_steps)
        if present:
            notes.append(f"An export exists at the marker: {layout.export_uri(present[-1])}.")
        else:
            notes.append(f"No export exists under {layout.exports_root} at the marker step {marker}.")
    for event, text in ((done, "Training done!"), (final_save, "Saved final checkpoint.")):
        if event is not None:
            notes.append(f"The trainer logged '{text}' at {_at(event)}.")
    if complete_tail is not None:
        notes.append(
            f"A resume found the run already complete: '{complete_tail.text.strip()}' at {_at(complete_tail)}."
        )
    stopped = _last(events, EventKind.stopped_early)
    if stopped is not None:
        notes.append(f"The trainer logged 'Training stopped early by callback' at {_at(stopped)}.")
    return _Evidence(effective, reached, by_logs_only, complete_tail, done, notes)


def _unrecovered(first: FirstError | None, scans: list[AttemptScan], stitched: StitchedMetrics) -> bool:
    """A causal error counts against `cancelled` unless a later attempt trained past the failing one."""
    if first is None or not first.causal:
        return False
    span = {s.attempt_id: s for s in stitched.attempts}
    failing = span.get(scans[first.attempt_index].attempt_id)
    base = failing.last_step if failing and failing.last_step is not None else -1
    for later in scans[first.attempt_index + 1 :]:
        s = span.get(later.attempt_id)
        if s and s.last_step is not None and s.last_step > base:
            return False
    return True


def _last_trained_step(stitched: StitchedMetrics, events: list[TrainerEvent], budget: int | None) -> int | None:
    steps = list(stitched.train)
    for e in events:
        if e.step is None:
            continue
        if e.kind in (EventKind.saved_checkpoint, EventKind.reached_max_steps, EventKind.resumed_already_complete):
            # The final save is labelled budget+1 without a step trained at that number.
            steps.append(budget if budget is not None and e.step == budget + 1 else e.step)
    return max(steps) if steps else None


def establish_terminal_state(
    layout: RunLayout,
    scans: list[AttemptScan],
    budget: int | None,
    *,
    budget_reason: str = "derivation not given",
    event_state: str | int | None = None,
    event_source: str | None = None,
    controller_absent: bool = False,
) -> TerminalVerdict:
    scans = _ordered_scans(layout, scans)
    stitched = stitch([(s.attempt_id, s.metric_rows) for s in scans])
    events = [e for s in scans for e in s.events]
    ev = _evidence(layout, events, budget, budget_reason)
    reasons = list(ev.notes)

    readings = controller_readings(layout, event_state, event_source, controller_absent)
    controller = next((r for r in readings if r.terminal), readings[0] if readings else None)
    vanished = controller is None or not controller.terminal
    if controller_absent:
        reasons.append("The controller's job vanished (no row, 0 pods): it gives no verdict.")
    if controller is None:
        reasons.append(
            "No controller state is available (no event, .executor_status, terminal.json or attempt record)."
        )
    elif controller.terminal:
        reasons.append(f"Controller state: {controller.describe()}.")
        others = [r for r in readings if r.terminal and r.state != controller.state]
        if others:
            reasons.append("Other sources disagree: " + "; ".join(r.describe() for r in others) + ".")
    else:
        reasons.append(
            f"The controller still reads {controller.describe()} with no terminal record: it is stale, so the run "
            "is settled from its artifacts."
        )

    first = find_first_error(scans)
    if first is not None:
        if first.causal:
            reasons.append(f"First causal error: {first.cite()}.")
        else:
            reasons.append(
                f"No causal error was found; the earliest teardown error is reported instead: {first.cite()} "
                f"({first.candidate.noise_reason})."
            )
    elif scans:
        reasons.append(f"No traceback or fatal line was found in the logs of {len(scans)} attempt(s).")

    completion = ev.reached or ev.already_complete is not None
    state: TerminalState
    cause: FirstError | None = None
    if completion and vanished and ev.training_done is None and ev.already_complete is None:
        state = TerminalState.indeterminate
        reasons.append(
            "The budget looks reached, but with no controller verdict completion also needs 'Training done!', "
            "which was not logged."
        )
        cause = first if first and first.causal else None
    elif completion:
        state = TerminalState.completed
        if controller is not None and controller.state in (FAILED, CANCELLED):
            reasons.append(
                f"The controller reported {controller.describe()}, but the budget was reached, so the run is "
                "completed; the controller's verdict is overridden."
            )
        if first is not None and first.causal:
            reasons.append(
                f"The error above ({first.candidate.error_type}) did not stop the chain from completing the budget "
                "(a redundant tail attempt or a recovered link)."
            )
    elif controller is not None and controller.state == SUCCEEDED:
        if first is not None and first.causal:
            state, cause = TerminalState.failed, first
            reasons.append("The controller reported success but the budget was not reached and a causal error exists.")
        else:
            state = TerminalState.indeterminate
            reasons.append("The controller reported success but the durable outputs do not show the budget reached.")
    elif controller is not None and controller.state == FAILED:
        state, cause = TerminalState.failed, first
        if first is None:
            reasons.append("The controller reported failure; no error in the logs explains it.")
    elif controller is not None and controller.state == CANCELLED:
        if _unrecovered(first, scans, stitched):
            state, cause = TerminalState.failed, first
            reasons.append("The job was killed, but a causal error that no later attempt recovered from came first.")
        else:
            state = TerminalState.cancelled
            reasons.append("The job was stopped (killed/cancelled) with no unrecovered causal error: cancelled.")
    else:
        state = TerminalState.indeterminate
        reasons.append("With no controller verdict and the budget not shown reached, the run is indeterminate.")
        cause = first if first and first.causal else None

    by_id = {s.attempt_id: s for s in scans}
    attempts = [_attempt_model(a, by_id.get(a.attempt_id), stitched) for a in layout.attempts]
    return TerminalVerdict(
        terminal_state=state,
        reasoning=reasons,
        controller=controller,
        step_budget=ev.budget,
        last_trained_step=_last_trained_step(stitched, events, ev.budget),
        last_saved_step=layout.marker_step,
        first_failure_cause=cause.cause() if cause else None,
        failure_is_teardown_fallback=cause is not None and not cause.causal,
        attempts=attempts,
        coverage=stitched.coverage,
        stitched=stitched,
    )
