"""Step 2 as the pipeline runs it: from every attempt's log scans (`steps.logscan` parts), settle the terminal
state and preserve the stitched metrics beside the evidence (the record references them by URI, not embedded)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rlcleanup.formats.config import get
from rlcleanup.models.record import Attempt, StepSummary, utcnow
from rlcleanup.parsing.attempt_logs import AttemptScan
from rlcleanup.ports.storage import Storage, WriteOutcome
from rlcleanup.steps.capture import write_derived
from rlcleanup.steps.evidence_sources import read_receipts
from rlcleanup.steps.facts import run_facts
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.receipts import protocol_facts
from rlcleanup.steps.terminal import TerminalVerdict, establish_terminal_state, step_budget


def step_summaries(layout: RunLayout) -> list[StepSummary]:
    out: list[StepSummary] = []
    for step in layout.steps:
        last = step.attempts[-1].record if step.attempts else {}
        records = [step.terminal or {}, last]
        state = next((v for r in records for k in ("response.state", "result.state") if (v := get(r, k))), None)
        failure = next((v for r in records for k in ("response.failure", "result.failure") if (v := get(r, k))), None)
        out.append(
            StepSummary(
                name=step.name,
                uri=step.uri,
                role=step.role.value,
                executor_status=step.executor_status,
                state=state if isinstance(state, str) else None,
                attempt_ids=[a.attempt_id for a in step.attempts],
                failure=failure if isinstance(failure, str) else None,
            )
        )
    return out


METRICS_FILE = "metrics.jsonl"


def terminal_verdict(
    storage: Storage,
    layout: RunLayout,
    scans: list[AttemptScan],
    *,
    event_state: str | None = None,
    event_source: str | None = None,
    controller_absent: bool = False,
    pre_cancel: bool = False,
    now: datetime | None = None,
) -> tuple[TerminalVerdict, list[str]]:
    """The run's terminal decision (steps/terminal.py) from its budget, receipts and scans, and the receipts that
    could not be read ('code: detail')."""
    entry = layout.run_config.entry if layout.run_config is not None else None
    if entry is not None and not entry.trains:
        # run-layout-v2.md §1 (oc): a generation-only run trains nothing, so it has no step budget.
        budget, budget_reason = None, f"none: {entry.module} trains nothing (generation-only)"
    else:
        budget, budget_reason = step_budget(layout.skyrl)
    protocol = protocol_facts(storage, layout)
    receipts, receipt_problems = read_receipts(storage, layout)  # the most trusted source: read before the logs
    verdict = establish_terminal_state(
        layout,
        scans,
        budget,
        budget_reason=budget_reason,
        event_state=event_state,
        event_source=event_source,
        controller_absent=controller_absent,
        protocol=protocol,
        pre_cancel=pre_cancel,
        now=now,
        receipts=receipts,
    )
    return verdict, [f"unreadable_receipt: {problem}" for problem in receipt_problems]


def decision_fields(verdict: TerminalVerdict) -> dict[str, Any]:
    """The record's fields that the terminal decision owns, each taken from it (the reasoning rendered from it)."""
    return {
        "terminal_state": verdict.terminal_state.value,
        "terminal_reasoning": verdict.reasoning,
        "controller_state": verdict.controller_state,
        "step_budget": verdict.step_budget,
        "last_trained_step": verdict.last_trained_step,
        "last_saved_step": verdict.last_saved_step,
        "first_failure_cause": verdict.first_failure_cause.model_dump(mode="json")
        if verdict.first_failure_cause
        else None,
        "first_failure_reason": verdict.first_failure_reason,
        "earliest_symptom": verdict.earliest_symptom.model_dump(mode="json") if verdict.earliest_symptom else None,
    }


def settle_terminal_state(
    storage: Storage,
    layout: RunLayout,
    scans: list[AttemptScan],
    dest_root: str,
    *,
    event_state: str | None = None,
    event_source: str | None = None,
    controller_absent: bool = False,
    pre_cancel: bool = False,
    now: datetime | None = None,
    screen_command: Callable[[str], str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Returns the record fields this step owns, and error strings ('code: detail'). `screen_command`: the
    launch command as it may be preserved (authority/config_screen.screen_command: no credential by value)."""
    verdict, receipt_errors = terminal_verdict(
        storage,
        layout,
        scans,
        event_state=event_state,
        event_source=event_source,
        controller_absent=controller_absent,
        pre_cancel=pre_cancel,
        now=now,
    )
    errors = [f"unreadable_log: {problem}" for scan in scans for problem in scan.problems]
    errors += receipt_errors
    metrics_uri, outcome = write_derived(storage, dest_root, METRICS_FILE, verdict.stitched.to_jsonl().encode())
    if outcome is WriteOutcome.conflict:
        errors.append(f"write_once_conflict: {metrics_uri} exists with different content; kept the earlier one")
    command = run_facts(layout).launch_command
    if command and screen_command is not None:
        command = screen_command(command)
    if command:
        uri, outcome = write_derived(storage, dest_root, "launch_command.txt", (command + "\n").encode())
        if outcome is WriteOutcome.conflict:
            errors.append(f"write_once_conflict: {uri} exists with different content")
    fields: dict[str, Any] = {
        **decision_fields(verdict),
        "chain": {
            "attempts": [a.model_dump(mode="json") for a in verdict.attempts],
            "coverage": verdict.coverage.model_dump(mode="json"),
            "steps": [s.model_dump(mode="json") for s in step_summaries(layout)],
            "warnings": list(layout.problems),
        },
        "metrics_uri": metrics_uri,
        "ended_at": run_ended_at(verdict.attempts, now),
    }
    return fields, errors


def run_ended_at(attempts: list[Attempt], now: datetime | None = None) -> datetime:
    """The run's end: its last attempt's end when any attempt tells, else now (when rlcleanup saw it had ended)."""
    # A stamp without a zone is UTC (as the attempt records and log stamps are read): never compare naive to aware.
    ends = [a.ended_at if a.ended_at.tzinfo else a.ended_at.replace(tzinfo=UTC) for a in attempts if a.ended_at]
    return max(ends) if ends else (now or utcnow())
