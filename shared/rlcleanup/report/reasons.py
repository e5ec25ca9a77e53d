"""The terminal reasoning as every surface shows it (the report's "Terminal state" section and `show`): one
function, so the report and the CLI never word the same finding two ways (issue 38: `show` said "no failure"
where the report said "No causal error was found")."""

from __future__ import annotations

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import TerminalState

NO_FAILURE = "no failure: the run completed (restarts and preemptions are listed in the chain below)"


def terminal_reasons(r: CompletionRecord) -> list[str]:
    """The record's terminal reasoning for a reader: the first cause left out (its own section or line says it in
    full), and a completed run's "no causal error was found" (about teardown noise, never a cause) said as what it
    means to a reader: no failure. The record keeps every line as the step wrote it."""
    out: list[str] = []
    for reason in r.terminal_reasoning:
        if r.first_failure_cause is not None and reason.startswith("First causal error:"):
            continue
        if r.terminal_state is TerminalState.completed and reason.startswith("No causal error was found"):
            out.append(NO_FAILURE)
            continue
        out.append(reason)
    return out
