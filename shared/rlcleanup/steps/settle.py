"""Step 2 as the pipeline runs it: from every attempt's log scans (`steps.logscan` parts), settle the terminal
state and preserve the stitched metrics beside the evidence (the record references them by URI, not embedded)."""

from __future__ import annotations

from typing import Any

from rlcleanup.parsing.logs import AttemptScan
from rlcleanup.ports.storage import Storage, WriteOutcome
from rlcleanup.steps.capture import write_derived
from rlcleanup.steps.facts import run_facts
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.terminal import establish_terminal_state, step_budget

METRICS_FILE = "metrics.jsonl"


def settle_terminal_state(
    storage: Storage,
    layout: RunLayout,
    scans: list[AttemptScan],
    dest_root: str,
    *,
    event_state: str | None = None,
    event_source: str | None = None,
    controller_absent: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """Returns the record fields this step owns, and error strings ('code: detail')."""
    budget, budget_reason = step_budget(layout.skyrl)
    verdict = establish_terminal_state(
        layout,
        scans,
        budget,
        budget_reason=budget_reason,
        event_state=event_state,
        event_source=event_source,
        controller_absent=controller_absent,
    )
    errors = [f"unreadable_log: {problem}" for scan in scans for problem in scan.problems]
    metrics_uri, outcome = write_derived(storage, dest_root, METRICS_FILE, verdict.stitched.to_jsonl().encode())
    if outcome is WriteOutcome.conflict:
        errors.append(f"write_once_conflict: {metrics_uri} exists with different content; kept the earlier one")
    command = run_facts(layout).launch_command
    if command:
        uri, outcome = write_derived(storage, dest_root, "launch_command.txt", (command + "\n").encode())
        if outcome is WriteOutcome.conflict:
            errors.append(f"write_once_conflict: {uri} exists with different content")
    fields: dict[str, Any] = {
        "terminal_state": verdict.terminal_state.value,
        "terminal_reasoning": verdict.reasoning,
        "controller_state": verdict.controller_state,
        "step_budget": verdict.step_budget,
        "last_trained_step": verdict.last_trained_step,
        "last_saved_step": verdict.last_saved_step,
        "first_failure_cause": verdict.first_failure_cause.model_dump(mode="json")
        if verdict.first_failure_cause
        else None,
        "chain": {
            "attempts": [a.model_dump(mode="json") for a in verdict.attempts],
            "coverage": verdict.coverage.model_dump(mode="json"),
        },
        "metrics_uri": metrics_uri,
    }
    return fields, errors
