"""Stage validate (validate-candidate): header-only validation of export candidates, a batch per invocation with
each candidate its own fan-out member (`validate:candidate:<step>`), and the resume-safety check (`validate:resume`);
then the `selection` barrier, which sends the run on to selection once every validation is stored."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlcleanup.errors import ErrorKind, PermanentError, defect_message, error_kind
from rlcleanup.models.events import CandidateMessage, RunMessage, target_step
from rlcleanup.models.outcomes import MemberError, ValidationOutcome
from rlcleanup.models.plans import CapturePlan, SelectionStarted, ValidationSet
from rlcleanup.models.record import Candidate, ResumeSafety
from rlcleanup.models.vocab import CandidateProblem
from rlcleanup.runtime.attempt_scope import unscoped
from rlcleanup.runtime.claims import once, stored
from rlcleanup.runtime.layouts import run_layout
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages.barrier import (
    Gathered,
    advance,
    barrier_work,
    member_key,
    member_prefix,
    member_set_key,
)
from rlcleanup.runtime.stages.common import publish
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.metrics_store import load_metric_steps
from rlcleanup.steps.validate import check_resume_safety, validate_candidate, validate_many
from rlcleanup.uris import join

log = logging.getLogger(__name__)

FAN_OUT = "validation"  # topology.yaml fan_outs[].name
BARRIER = "selection"  # topology.yaml barriers[].name: it sends the run on to what that entry publishes


def validation_message(run_id: str, scope: str, run_uri: str, preserve_root: str, **members: Any) -> CandidateMessage:
    """A candidate-validation message: one `target`, or a batch of `targets`."""
    return CandidateMessage(run_id=run_id, scope=scope, run_uri=run_uri, preserve_root=preserve_root, **members)


def validate_one(p: Ports, msg: CandidateMessage, attributes: dict[str, str]) -> str:
    if msg.targets:
        _validate_batch(p, msg)
    else:
        _validate_target(p, msg)
    return advance(p, msg.run_id, msg.scope, FAN_OUT)


def _validate_target(p: Ports, msg: CandidateMessage) -> None:
    """One member in its own message: a failure here is the member's (dispatch completes it as failed)."""

    def work() -> ValidationOutcome:
        if msg.step is None:
            layout = run_layout(p, msg.run_id, msg.run_uri, msg.scope)
            return ValidationOutcome(resume_safety=check_resume_safety(p.storage, layout))
        inputs = _validation_inputs(p, msg)
        candidate = validate_candidate(
            p.storage, inputs.layout, msg.step, metric_steps=inputs.metric_steps, step_budget=inputs.step_budget
        )
        return ValidationOutcome(candidate=candidate)

    once(p, msg.run_id, member_key(p, msg.scope, FAN_OUT, msg.members[0]), work, model=ValidationOutcome)


def _validate_batch(p: Ports, msg: CandidateMessage) -> None:
    """Several members in one invocation, validated together. Each still completes its own claim. A member whose
    validation fails (anything but a transient error) is sent on as a message of its own and fails there exactly
    as a lone member would, so a batch never decides a sibling's outcome. A transient error: the members that
    succeeded are completed, then it is raised and the redelivery redoes only the rest."""
    run_id, scope = msg.run_id, msg.scope
    todo = list(msg.targets)
    results: dict[str, Candidate | Exception]
    try:
        done = p.claims.done_keys(run_id, member_prefix(p, scope, FAN_OUT))  # a redelivery redoes only the rest
        todo = [t for t in todo if member_key(p, scope, FAN_OUT, t) not in done]
        inputs = _validation_inputs(p, msg)
        target_of = {step: t for t in todo if (step := target_step(t)) is not None}
        by_step = validate_many(
            p.storage,
            inputs.layout,
            list(target_of),
            metric_steps=inputs.metric_steps,
            step_budget=inputs.step_budget,
            validate=validate_candidate,
        )
        results = {target_of[step]: outcome for step, outcome in by_step.items()}
    except Exception as exc:  # what the whole batch needs failed: every member goes on alone
        results = dict.fromkeys(todo, exc)
    transient: Exception | None = None
    for target, outcome in results.items():
        if isinstance(outcome, Candidate):
            validated = ValidationOutcome(candidate=outcome)
            once(p, run_id, member_key(p, scope, FAN_OUT, target), _returning(validated), model=ValidationOutcome)
        elif error_kind(outcome) is ErrorKind.transient:
            transient = transient or outcome
        else:
            log.warning(
                "validation of %s in a batch of run %s failed (%s): sent on as its own message",
                target,
                run_id,
                defect_message(outcome),
                extra={"run_id": run_id},
            )
            alone = validation_message(run_id, scope, msg.run_uri, msg.preserve_root, target=target)
            publish(p, p.topology.fan_out(FAN_OUT).topic, alone)
    if transient is not None:
        raise transient


def _returning(outcome: ValidationOutcome) -> Callable[[], ValidationOutcome]:
    return lambda: outcome


@dataclass(frozen=True)
class ValidationInputs:
    layout: RunLayout
    metric_steps: set[int] | None
    step_budget: int | None


def _validation_inputs(p: Ports, msg: CandidateMessage) -> ValidationInputs:
    return validation_inputs(p, msg.run_id, msg.run_uri, msg.scope)


def validation_inputs(p: Ports, run_id: str, run_uri: str, scope: str) -> ValidationInputs:
    """What validating any candidate of the run needs: the stored layout, the steps the metrics cover, the budget
    (the sweep validates an export job's new export with the same, runtime/export_follow.py)."""
    layout = run_layout(p, run_id, run_uri, scope)
    record = p.records.get(run_id)
    metric_steps = load_metric_steps(p.storage, record.metrics_uri) if record and record.metrics_uri else None
    return ValidationInputs(layout, metric_steps, record.step_budget if record else None)


@barrier_work(BARRIER)
def start_selection(p: Ports, run_id: str, scope: str, gathered: Gathered) -> SelectionStarted:
    """Every validation is stored: send the run on (to selection, unless topology.yaml puts a stage between)."""
    targets = gathered.member_set(FAN_OUT, ValidationSet)
    run_uri, preserve_root = targets.run_uri, targets.preserve_root
    if run_uri is None or preserve_root is None:  # a set stored before it kept them: the record and capture plan
        record = p.records.get(run_id)
        plan = stored(p, run_id, member_set_key(p, scope, "capture"), CapturePlan)
        run_uri = run_uri or (record.run_uri if record else "")
        preserve_root = preserve_root or (plan.preserve_root if plan else "")
    selection = RunMessage(run_id=run_id, scope=scope, run_uri=run_uri, preserve_root=preserve_root)
    publish(p, p.topology.barrier_next(BARRIER), selection)
    return SelectionStarted()


def failed_validation(
    p: Ports, key: str, check: CandidateMessage, error: PermanentError
) -> list[tuple[str, ValidationOutcome]]:
    """What a validation that failed stores: an invalid candidate (or an unsafe resume point) naming why."""
    failure = MemberError(code=error.code, message=str(error)[:2000])
    code = error.code if error.code in CandidateProblem.__members__ else CandidateProblem.internal_error.value
    problem = f"{code}: validation could not finish: {failure.message}"
    step = target_step(
        unscoped(key).removeprefix(p.topology.fan_out(FAN_OUT).member_prefix)
    )  # the failed member's own target (a batch names several)
    if step is None:
        resume = ResumeSafety(safe=False, reasons=[problem])
        return [(key, ValidationOutcome(ok=False, error=failure, resume_safety=resume))]
    uri = _export_uri(p, check.run_id, check.run_uri, step, check.scope)
    candidate = Candidate(step=step, uri=uri, valid=False, problems=[problem])
    return [(key, ValidationOutcome(ok=False, error=failure, candidate=candidate))]


def _export_uri(p: Ports, run_id: str, run_uri: str, step: int, scope: str = "") -> str:
    try:
        return run_layout(p, run_id, run_uri, scope).export_uri(step)
    except Exception:  # the listing may be what failed: name the conventional place instead
        return join(run_uri, "exports", f"global_step_{step}", "policy")
