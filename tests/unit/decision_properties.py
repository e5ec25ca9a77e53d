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


def contradictions(decision: TerminalDecision | None, record: Mapping[str, Any]) -> list[str]:
    """Every way `record` (the record's terminal fields: `terminal_state`, `first_failure_cause`,
    `earliest_symptom`, `first_failure_reason`, `terminal_reasoning`) disagrees with itself or with `decision`;
    empty when they agree. `decision` may be None (a record read back from a store): the text checks still run."""
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
