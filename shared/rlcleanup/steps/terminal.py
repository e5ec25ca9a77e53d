"""Step 2: establish the terminal state from the controller's word paired with durable outputs and trainer logs.

The controller says how the job ended; the commit marker, exports and trainer strings say whether training did.
Where they disagree the artifacts win for `completed` (a finished budget is finished), and the reasoning says so.
The controller's readings come from one pass over the run (steps/terminal_readings.py); the precedence rule that
weighs them is steps/precedence.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from rlcleanup.formats.config import get
from rlcleanup.formats.launch import EntrypointKind
from rlcleanup.models.controller_states import Verdict
from rlcleanup.models.record import Attempt, ChainCoverage, FailureCause
from rlcleanup.models.vocab import TerminalState
from rlcleanup.parsing.attempt_logs import AttemptScan, log_order
from rlcleanup.parsing.log_grammar import EventKind, event_phrase
from rlcleanup.parsing.log_scanner import ErrorCandidate, TrainerEvent
from rlcleanup.parsing.metrics import StitchedMetrics, stitch
from rlcleanup.steps.budget import resolve_budget, step_budget
from rlcleanup.steps.completion_proof import budget_status, completion_proof, person_checks, proof_lacking
from rlcleanup.steps.evidence_sources import FoundReceipt
from rlcleanup.steps.first_cause import FirstError, find_first_cause, first_causal_in_attempt
from rlcleanup.steps.layout import AttemptFiles, RunLayout
from rlcleanup.steps.marin import LOCK_STALE_SECONDS
from rlcleanup.steps.precedence import Decision, Inputs, Source, decide, lock_fresh
from rlcleanup.steps.receipts import ProtocolFacts
from rlcleanup.steps.terminal_decision import LoggedError, TerminalDecision, render_reasoning
from rlcleanup.steps.terminal_readings import describe_controller, normalize_state, read_controller

NO_CAUSAL_ERROR_FOUND = "no_causal_error_found"  # run-layout-v2.md §7 (oc)

MAX_LOG_URIS_IN_RECORD = 20  # 500 ranks x 3 attempts of log URIs would pass Firestore's 1 MiB; the manifest has all

__all__ = ["establish_terminal_state", "step_budget"]  # step_budget: steps/budget.py


# Normalised controller states (models/controller_states.py holds every source's spellings).
SUCCEEDED, FAILED, CANCELLED = Verdict.succeeded, Verdict.failed, Verdict.cancelled


# -- first causal error: steps/first_cause.py (the evidence sources' trust order) ---------------------------------


# -- terminal state --------------------------------------------------------------------------------------------


@dataclass
class TerminalVerdict:
    decision: TerminalDecision  # the one decision; the terminal fields below are read from it, never copied
    reasoning: list[str]
    controller: Source | None  # the controller state the record quotes (terminal_readings.ControllerReadings)
    step_budget: int | None  # effective: the trainer's logged max when it disagrees with the config
    last_trained_step: int | None
    last_saved_step: int | None
    attempts: list[Attempt]
    coverage: ChainCoverage
    stitched: StitchedMetrics = field(repr=False, default_factory=StitchedMetrics)

    @property
    def terminal_state(self) -> TerminalState:
        return self.decision.state

    @property
    def first_failure_cause(self) -> FailureCause | None:
        return self.decision.cause

    @property
    def earliest_symptom(self) -> FailureCause | None:
        """run-layout-v2.md §7: quoted when every error is teardown."""
        return self.decision.earliest_symptom

    @property
    def first_failure_reason(self) -> str | None:
        """`no_causal_error_found` when only teardown was logged."""
        return self.decision.first_failure_reason

    @property
    def decided_by(self) -> str:
        """The §6 rule that decided."""
        return self.decision.rule

    @property
    def controller_state(self) -> str | None:
        return describe_controller(self.controller) if self.controller else None


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
        first = first_causal_in_attempt(scan)
        if state is None:
            done = any(scan.has_event(k) for k in (EventKind.training_done, EventKind.resumed_already_complete))
            stopped = scan.has_event(EventKind.controller_stopped)  # e.g. a Slurm time limit ends a link
            state = "succeeded" if done else "failed" if first else "cancelled" if stopped else None
        # The attempt's own first causal error beats the controller's message: controllers repeat one message
        # ("task 0 exited with code 1") for every link, the log says what ended this one.
        if first is not None:
            failure = f"{first.error_type}: {first.message} at {_at(first)}"
    # The logs the scan listed (read or not); discovery lists no log of a Marin attempt, only a Slurm one's `.out`.
    logs = log_order([*scan.log_uris, *scan.unread] if scan is not None else [o.uri for o in att.log_objects])
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
        log_uris=logs[:MAX_LOG_URIS_IN_RECORD],
        log_count=len(logs),
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
    reached_max: TrainerEvent | None = None  # the trainer's own stop-at-budget line
    reached_by: str = ""  # what shows the budget reached, for the deciding rule's sentence


def _last(events: list[TrainerEvent], *kinds: EventKind) -> TrainerEvent | None:
    return next((e for e in reversed(events) if e.kind in kinds), None)


def _evidence(layout: RunLayout, events: list[TrainerEvent], budget: int | None, budget_reason: str) -> _Evidence:
    """What the artifacts and trainer strings show about the budget; the budget itself is steps/budget.py's rule."""
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

    resolved = resolve_budget(budget, budget_reason, events)
    effective = resolved.value
    notes.append(resolved.reason)

    marker_text = f"the commit marker {layout.marker_uri}" if layout.marker_uri else "the commit marker"
    reached = by_logs_only = False
    reached_by = ""
    if marker is None:
        notes.append(f"No readable commit marker at {layout.marker_uri or 'the checkpoint root'}.")
        finish = done or final_save
        if effective is not None and reached_max is not None and finish is not None:
            reached = by_logs_only = True
            reached_by = f"the trainer strings at {_at(reached_max)} and {_at(finish)} (no marker)"
            notes.append(
                f"Without a marker, completion rests on the trainer strings "
                f"'{event_phrase(reached_max.kind, reached_max.text)}' at "
                f"{_at(reached_max)} and '{finish.text.strip()}' at {_at(finish)}."
            )
    elif effective is None:
        notes.append(f"{marker_text} reads {marker}.")
    elif marker == effective:
        reached, reached_by = True, f"{marker_text} reads {marker}"
        notes.append(f"{marker_text} reads {marker}, equal to the budget {effective}.")
    elif marker == effective + 1:
        reached, reached_by = True, f"{marker_text} reads {marker} (budget + 1)"
        notes.append(
            f"{marker_text} reads {marker}, the budget {effective} + 1 (the MarinSkyRL fork labels the final save "
            "one past the last step)."
        )
    elif marker > effective + 1:
        notes.append(
            f"{marker_text} reads {marker}, beyond budget + 1 ({effective + 1}): the derived budget looks wrong, "
            "so the marker cannot show completion."
        )
    else:
        # Only what the marker reads: whether the budget was reached is the decision's one sentence ("Budget: ..."),
        # since a valid receipt or a resume's "already complete" line may show it where the marker does not.
        notes.append(f"{marker_text} reads {marker} (the budget is {effective}).")

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
    return _Evidence(effective, reached, by_logs_only, complete_tail, done, notes, reached_max, reached_by)


def _unrecovered(first: FirstError | None, scans: list[AttemptScan], stitched: StitchedMetrics) -> bool:
    """A causal error counts against `cancelled` unless a later attempt trained past the failing one."""
    if first is None or not first.causal:
        return False
    if first.attempt_index >= len(scans):  # no log was read (a late export's cause is its attempt record)
        return True
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


def _precedence_inputs(
    layout: RunLayout,
    sources: list[Source],
    ev: _Evidence,
    events: list[TrainerEvent],
    stitched: StitchedMetrics,
    scans: list[AttemptScan],
    first: FirstError | None,
    protocol: ProtocolFacts | None,
    *,
    pre_cancel: bool,
    controller_absent: bool,
    now: datetime,
) -> Inputs:
    reached = ev.reached or ev.already_complete is not None
    reached_by = [ev.reached_by] if ev.reached else []
    if ev.already_complete is not None:
        reached_by.append(f"a resume found it already complete at {_at(ev.already_complete)}")
    receipt = protocol.training if protocol is not None else None
    budget = ev.budget
    valid_step = receipt.global_step if receipt is not None and receipt.valid else None
    if valid_step is not None and budget is not None and valid_step >= budget:
        reached = True
        reached_by.append(f"the valid training receipt reads global_step {valid_step}")
    if ev.reached and ev.reached_max is not None:
        reached_by.append(f"the trainer's stop-at-budget line at {_at(ev.reached_max)}")
    reached_valid = receipt.valid if receipt is not None else reached
    terminal = layout.terminal or {}
    terminal_state = normalize_state(
        str(get(terminal, "response.state") or get(terminal, "result.state") or ""), "protocol"
    )[0]
    success_record = layout.terminal is not None and terminal_state == SUCCEEDED
    if receipt is not None:
        export = protocol.export if protocol is not None else None
        export_ok = export is None or export.valid
        success_artifact_valid = receipt.valid and export_ok
    else:
        marker = layout.marker_step
        steps = {marker, marker - 1} if marker is not None else set()
        success_artifact_valid = any(s in layout.export_steps for s in steps)
    running_locks = [st.lock for st in layout.steps if st.executor_status == "RUNNING"]
    if not layout.steps and layout.executor_status == "RUNNING":
        running_locks = [layout.lock]
    running = bool(running_locks)
    fresh = any(lock is not None and lock_fresh(lock.timestamp, now, LOCK_STALE_SECONDS) for lock in running_locks)
    entry = layout.run_config.entry if layout.run_config is not None else None
    return Inputs(
        sources=sources,
        budget=budget,
        budget_reached=reached,
        reached_valid=reached_valid,
        # Only a marker alone needs 'Training done!' besides: the trainer's own stop-at-budget line, a resume that
        # found the run complete or a valid receipt already say the budget was trained.
        needs_done_line=ev.already_complete is None
        and not (receipt is not None and receipt.valid)
        and ev.reached_max is None,
        reached_by="; ".join(reached_by),
        training_done=ev.training_done is not None,
        early_stop=_last(events, EventKind.stopped_early) is not None,
        last_step=_last_trained_step(stitched, events, budget),
        success_record=success_record,
        success_artifact_valid=success_artifact_valid,
        pre_cancel=pre_cancel,
        controller_absent=controller_absent,
        running_fresh_lock=running and fresh,
        running_stale=running and not fresh,
        causal_error=first is not None and first.causal,
        unrecovered_error=_unrecovered(first, scans, stitched),
        generation_only=entry is not None and entry.kind is EntrypointKind.generation,
        proof_lacking=proof_lacking(completion_proof(protocol)) if reached and not reached_valid else "",
    )


def establish_terminal_state(
    layout: RunLayout,
    scans: list[AttemptScan],
    budget: int | None,
    *,
    budget_reason: str = "derivation not given",
    event_state: str | int | None = None,
    event_source: str | None = None,
    controller_absent: bool = False,
    protocol: ProtocolFacts | None = None,
    pre_cancel: bool = False,
    now: datetime | None = None,
    receipts: list[FoundReceipt] | None = None,
) -> TerminalVerdict:
    scans = _ordered_scans(layout, scans)
    stitched = stitch([(s.attempt_id, s.metric_rows) for s in scans])
    events = [e for s in scans for e in s.events]
    ev = _evidence(layout, events, budget, budget_reason)
    reasons = list(ev.notes)

    readings = read_controller(layout, event_state, event_source, controller_absent)
    controller = readings.controller
    if controller_absent:
        reasons.append("The controller's job vanished (no row, 0 pods): it gives no verdict.")
    if controller is None:
        reasons.append(
            "No controller state is available (no event, .executor_status, terminal.json or attempt record)."
        )
    elif Verdict(controller.state).has_outcome:
        reasons.append(f"Controller state: {describe_controller(controller)}.")
        others = readings.disagreeing()
        if others:
            reasons.append("Other sources disagree: " + "; ".join(describe_controller(r) for r in others) + ".")
    else:
        reasons.append(
            f"The controller still reads {describe_controller(controller)} with no terminal record: it is stale, "
            "so the run is settled from its artifacts."
        )

    first = find_first_cause(layout, scans, receipts or [])
    inputs = _precedence_inputs(
        layout,
        readings.sources,
        ev,
        events,
        stitched,
        scans,
        first,
        protocol,
        pre_cancel=pre_cancel,
        controller_absent=controller_absent,
        now=now or datetime.now(UTC),
    )
    precedence = decide(inputs)
    decision = _decision(layout, inputs, precedence, first, protocol, controller, reasons)
    reasoning = render_reasoning(decision, log_attempts=len(scans))

    by_id = {s.attempt_id: s for s in scans}
    attempts = [_attempt_model(a, by_id.get(a.attempt_id), stitched) for a in layout.attempts]
    return TerminalVerdict(
        decision=decision,
        reasoning=reasoning,
        controller=controller,
        step_budget=ev.budget,
        last_trained_step=_last_trained_step(stitched, events, ev.budget),
        last_saved_step=layout.last_saved_step,
        attempts=attempts,
        coverage=stitched.coverage,
        stitched=stitched,
    )


def _decision(
    layout: RunLayout,
    inputs: Inputs,
    precedence: Decision,
    first: FirstError | None,
    protocol: ProtocolFacts | None,
    controller: Source | None,
    readings: list[str],
) -> TerminalDecision:
    """The one decision the terminal fields and the reasoning are rendered from."""
    state = precedence.state
    status, proof = budget_status(inputs, precedence, protocol)
    cause = first.cause() if precedence.with_cause and first is not None and first.causal else None
    recovered = first.cause() if first is not None and first.causal and cause is None else None
    symptom = first if first is not None and not first.causal else None
    notes: list[str] = []
    if state is TerminalState.completed and controller is not None and controller.state in (FAILED, CANCELLED):
        notes.append(
            f"The controller reported {describe_controller(controller)}, but the run is completed; the controller's "
            "verdict is overridden."
        )
    if layout.unfinished_save is not None:
        kept = f"global_step_{layout.committed_before}" if layout.committed_before is not None else "none"
        notes.append(
            f"The marker names global_step_{layout.unfinished_save}, whose Megatron save never wrote metadata.json "
            f"(an async save's marker precedes it): it is not a saved checkpoint; the last finished save is {kept}."
        )
    if state is TerminalState.failed and cause is None and first is None:
        notes.append("The controller reported failure; no error in the logs explains it.")
    quoted_symptom = symptom is not None and state is not TerminalState.completed
    return TerminalDecision(
        state=state,
        rule=precedence.rule,
        why=precedence.why,
        budget=inputs.budget,
        budget_status=status,
        reached_by=inputs.reached_by,
        proof=proof,
        cause=cause,
        recovered_error=LoggedError(error=recovered) if recovered is not None else None,
        symptom=LoggedError(error=symptom.cause(), noise_reason=symptom.candidate.noise_reason)
        if symptom is not None
        else None,
        quoted_symptom=quoted_symptom,
        first_failure_reason=NO_CAUSAL_ERROR_FOUND
        if state in (TerminalState.failed, TerminalState.cancelled, TerminalState.indeterminate)
        and cause is None
        and symptom is not None
        else None,
        readings=readings,
        receipts=list(protocol.notes) if protocol is not None else [],
        sources=precedence.sources,
        rule_notes=precedence.notes,
        notes=notes,
        checks=person_checks(layout, status, proof),
    )
