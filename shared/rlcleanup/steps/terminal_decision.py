"""One decision behind the terminal fields (issue 44): the terminal state, the rule that decided it, where the budget
stands, the first cause (or the error that was logged and did not decide, or the earliest symptom) and what a person
should check, as one pydantic model; `terminal_reasoning` is rendered from it (`render_reasoning`).

Why one object: the record's fields and its reasoning were written side by side, so the reasoning could name a
"first causal error" the `first_failure_cause` field did not hold (a completed run's recovered error), or cite the
budget reached in one line and close with "the durable outputs do not show the budget reached" (a protocol-v2 run
whose receipt was missing). Rendered from one model, a sentence about the cause exists only for the cause the field
holds, and a sentence about the budget only as `budget_status` says it.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from rlcleanup.models.record import FailureCause
from rlcleanup.models.vocab import TerminalState

CHECK_PREFIX = "To check: "  # a reasoning line saying what a person should check (wrap-up makes it remaining work)


class BudgetStatus(StrEnum):
    reached = "reached"  # in valid artifacts (the marker, a valid receipt, the trainer's own lines)
    reached_unproven = "reached_unproven"  # the artifacts reach it; the proof the protocol requires is missing
    not_reached = "not_reached"
    unknown = "unknown"  # no budget, or nothing read says where training stopped


class CompletionProof(BaseModel):
    """The completion proof a protocol requires beyond the artifacts (protocol v2: the training receipt,
    run-layout-v2.md §2 "v2 training exports nothing, success = valid receipt")."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="what is required, e.g. 'the training receipt'")
    required_by: str = Field(default="the protocol", description="who requires it: 'the protocol', 'rule (1)'")
    uri: str | None = None
    valid: bool
    missing: bool = Field(default=False, description="absent, not merely invalid")
    detail: str = Field(default="", description="why it does not hold ('training receipt absent', a mismatch)")

    def lacking(self) -> str:
        """The sentence the budget line and the deciding rule both use: what is owed and how it falls short."""
        state = "is missing" if self.missing else "does not hold"
        where = f" {self.uri}" if self.uri else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"the completion proof {self.required_by} requires, {self.name}{where}, {state}{detail}"


class LoggedError(BaseModel):
    """An error the logs hold, with how the decision treats it."""

    model_config = ConfigDict(frozen=True)

    error: FailureCause
    noise_reason: str | None = None  # teardown: why it is a consequence, never a cause


class TerminalDecision(BaseModel):
    """Everything the terminal-state step decided; the record's terminal fields and reasoning come from here."""

    model_config = ConfigDict(frozen=True)

    state: TerminalState
    rule: str = Field(description="the rule of docs/run-layouts.md §6 that decided, e.g. '(1)', '(proof)', '(v1)'")
    why: str = Field(description="the deciding rule's own sentence")
    budget: int | None
    budget_status: BudgetStatus
    reached_by: str = ""
    proof: CompletionProof | None = None
    cause: FailureCause | None = Field(default=None, description="first_failure_cause: the only cause named")
    recovered_error: LoggedError | None = Field(
        default=None, description="a causal error that did not decide the state (a recovered link, a tail attempt)"
    )
    symptom: LoggedError | None = Field(default=None, description="the earliest teardown error when none is causal")
    quoted_symptom: bool = Field(default=False, description="earliest_symptom holds it (not for a completed run)")
    first_failure_reason: str | None = None
    readings: list[str] = Field(default_factory=list, description="what was read: the budget, the controller")
    receipts: list[str] = Field(default_factory=list, description="what the protocol's receipts say")
    sources: str = Field(default="", description="the controller-side sources the rules weighed")
    rule_notes: list[str] = Field(default_factory=list, description="what the rules noted before deciding")
    notes: list[str] = Field(default_factory=list, description="what follows from the state (overrides, saves)")
    checks: list[str] = Field(default_factory=list, description="what a person should check")

    @property
    def earliest_symptom(self) -> FailureCause | None:
        return self.symptom.error if self.symptom is not None and self.quoted_symptom else None


def cite(error: FailureCause) -> str:
    """An error as the reasoning quotes it: type, message, where, which attempt, which evidence source."""
    return (
        f"{error.error_type}: {error.message} at {error.source_uri}:{error.line} (attempt {error.attempt_id}), "
        f"from the {error.evidence_source}"
    )


def budget_sentence(d: TerminalDecision) -> str | None:
    """Where the budget stands, said once, as `budget_status` says it."""
    by = f" ({d.reached_by})" if d.reached_by else ""
    if d.budget_status is BudgetStatus.reached:
        # Rule (1)'s own sentence says exactly this, with what showed it: not said twice.
        return None if d.rule == "(1)" else f"Budget: the budget {d.budget} was reached in valid artifacts{by}."
    if d.budget_status is BudgetStatus.reached_unproven and d.proof is not None:
        return f"Budget: the budget {d.budget} was reached in the artifacts{by}; {d.proof.lacking()}."
    if d.budget_status is BudgetStatus.not_reached:
        return f"Budget: the durable outputs do not show the budget {d.budget} reached."
    return None


def _error_sentence(d: TerminalDecision) -> str | None:
    if d.cause is not None:
        if d.cause.evidence_source == "failure_receipt":
            return (
                "First causal error, as the failing process recorded it in its failure receipt (receipts are read "
                f"before logs): {cite(d.cause)}."
            )
        return f"First causal error: {cite(d.cause)}."
    if d.recovered_error is not None:
        error = d.recovered_error.error
        if d.state is TerminalState.completed and error.evidence_source == "attempt_record":
            return (
                f"An error was logged, {cite(error)}; it is not the run's failure cause: the training completed, and "
                "the export that failed is work still owed, not a failure of the run."
            )
        if d.state is TerminalState.completed:
            return (
                f"An error was logged, {cite(error)}; it is not the run's failure cause: the error "
                f"({error.error_type}) did not stop the chain from completing the budget (a redundant tail attempt "
                "or a recovered link)."
            )
        return (
            f"An error was logged, {cite(error)}; it is not reported as the run's failure cause: the rule that "
            "decided the state does not rest on it."
        )
    if d.symptom is not None:
        return (
            f"No causal error was found (no_causal_error_found); the earliest symptom is quoted separately, never as "
            f"the cause: {cite(d.symptom.error)} ({d.symptom.noise_reason})."
        )
    return None


def render_reasoning(d: TerminalDecision, log_attempts: int = 0) -> list[str]:
    """`terminal_reasoning`: what was read, the error (only as the fields hold it), the receipts, the sources, where
    the budget stands, the deciding rule, what follows, and what a person should check."""
    lines = list(d.readings)
    error = _error_sentence(d)
    if error is not None:
        lines.append(error)
    elif log_attempts:
        lines.append(f"No traceback or fatal line was found in the logs of {log_attempts} attempt(s).")
    lines.extend(d.receipts)
    if d.sources:
        lines.append(d.sources)
    lines.extend(d.rule_notes)
    budget = budget_sentence(d)
    if budget is not None:
        lines.append(budget)
    lines.append(f"Rule {d.rule} of the terminal-state rules in docs/run-layouts.md decided: {d.why}")
    lines.extend(d.notes)
    lines.extend(f"{CHECK_PREFIX}{check}" for check in d.checks)
    return lines
