"""What must hold between a run's terminal decision, its record fields and its rendered reasoning (issue 44, "one
decision behind every field"). One function, `contradictions`, so any set of runs can be checked: the sample
scenarios and their variations (tests/unit/test_decision_properties.py), and a corpus of real failures
(tests/corpus/) by handing it each excerpt's decision and record.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.models.record import FailureCause
from rlcleanup.parsing.attempt_logs import scan_attempt
from rlcleanup.steps.layout import discover
from rlcleanup.steps.settle import decision_fields, terminal_verdict
from rlcleanup.steps.terminal import TerminalVerdict
from rlcleanup.steps.terminal_decision import BudgetStatus, TerminalDecision

# Sentences that say the budget was reached, and sentences that say it was not: a reasoning holds one kind or none.
SAYS_REACHED = re.compile(
    r"budget \d+ was reached|equal to the budget|, the budget \d+ \+ 1|reaches the budget|completing the budget"
    r"|found the run already complete|found it already complete"
)
SAYS_NOT_REACHED = re.compile(
    r"do not show the budget(?: \d+)? reached|short of the budget|below the known budget|budget (?:\d+ )?was not "
    r"reached|not reached"
)
# The terminal step's sentence for a marker whose Megatron save never finished (steps/terminal.py).
UNFINISHED_SAVE = re.compile(r"The marker names global_step_(\d+), whose Megatron save never wrote metadata\.json")
# Sentences that present an error as the run's cause.
NAMES_A_CAUSE = re.compile(r"^First causal error|as the first causal error|^The run's cause:")


def settle(run: Path) -> tuple[TerminalVerdict, dict[str, Any]]:
    """The run's terminal verdict as the pipeline's terminal step takes it, and the record fields it writes."""
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(run))
    verdict, _ = terminal_verdict(storage, layout, [scan_attempt(storage, a) for a in layout.attempts])
    return verdict, decision_fields(verdict)


def _cause(record: Mapping[str, Any]) -> FailureCause | None:
    raw = record.get("first_failure_cause")
    if raw is None or isinstance(raw, FailureCause):
        return raw
    return FailureCause.model_validate(raw)


def contradictions(decision: TerminalDecision | None, record: Mapping[str, Any]) -> list[str]:  # noqa: C901 -- one check per contradiction the property names
    """Every way `record` (the record's terminal fields: `terminal_state`, `first_failure_cause`,
    `earliest_symptom`, `first_failure_reason`, `terminal_reasoning`; on a finished record also wrap-up's
    `failure_class`, `failure_evidence`, `signature`, `resume_safety`) disagrees with itself or with `decision`; empty when they
    agree. `decision` may be None (a record read back from a store, `record.model_dump(mode="json")`): the text and
    field checks still run."""
    found: list[str] = []
    reasoning: list[str] = list(record.get("terminal_reasoning") or [])
    cause = _cause(record)
    naming = [s for s in reasoning if NAMES_A_CAUSE.search(s)]
    if cause is not None and not naming:
        found.append(f"the field holds {cause.error_type} and no sentence names it as the cause")
    for sentence in reasoning:
        if NAMES_A_CAUSE.search(sentence):
            if cause is None:
                found.append(f"the reasoning names a cause the field lacks: {sentence[:200]}")
            elif f"{cause.error_type}: " not in sentence or f"{cause.source_uri}:{cause.line}" not in sentence:
                found.append(f"the reasoning names another cause than the field's {cause.error_type}: {sentence[:200]}")
    # Wrap-up's class and signature are computed from the decision's fields: a record whose class or signature rests
    # on a cause the field lacks, or that gives a completed run a failure class, contradicts its decision.
    state_value = str(getattr(record.get("terminal_state"), "value", record.get("terminal_state")))
    if record.get("failure_class") is not None and state_value == "completed":
        found.append(f"a completed run has failure_class {record.get('failure_class')}")
    if record.get("signature") is not None and cause is None:
        found.append("a signature without a first_failure_cause to fingerprint")
    evidence = record.get("failure_evidence")
    evidence = evidence.model_dump(mode="json") if hasattr(evidence, "model_dump") else evidence
    from_cause = isinstance(evidence, dict) and evidence.get("evidence") == "cause"
    if from_cause and (cause is None or evidence.get("evidence_uri") != cause.source_uri):
        found.append("failure_evidence cites a cause the first_failure_cause field does not hold")
    # Resume safety (validation's) never resumes from a step the reasoning says is no saved checkpoint.
    resume = record.get("resume_safety")
    resume = resume.model_dump(mode="json") if hasattr(resume, "model_dump") else resume
    unsaved = {int(m[1]) for line in reasoning if (m := UNFINISHED_SAVE.search(line))}
    if isinstance(resume, dict) and resume.get("safe") and resume.get("from_step") in unsaved:
        found.append(f"resume is safe from step {resume.get('from_step')}, which the reasoning says was never saved")
    reached = [s for s in reasoning if SAYS_REACHED.search(s)]
    not_reached = [s for s in reasoning if SAYS_NOT_REACHED.search(s)]
    if reached and not_reached:
        found.append(f"the budget is said reached ({reached[0][:160]}) and not ({not_reached[0][:160]})")
    if decision is None:
        return found
    state = record.get("terminal_state")
    if str(getattr(state, "value", state)) != decision.state.value:
        found.append(f"terminal_state {state} is not the decision's {decision.state.value}")
    if cause != decision.cause:
        found.append("first_failure_cause is not the decision's cause")
    if record.get("first_failure_reason") != decision.first_failure_reason:
        found.append("first_failure_reason is not the decision's")
    if decision.budget_status in (BudgetStatus.reached, BudgetStatus.reached_unproven) and not_reached:
        found.append(f"the decision has the budget reached, the reasoning says not: {not_reached[0][:160]}")
    if decision.budget_status is BudgetStatus.not_reached and reached:
        found.append(f"the decision has the budget not reached, the reasoning says it was: {reached[0][:160]}")
    if not any(s.startswith(f"Rule {decision.rule} ") for s in reasoning):
        found.append(f"the reasoning does not say that rule {decision.rule} decided")
    return found
