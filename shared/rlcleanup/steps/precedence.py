"""The terminal-state precedence rule of run-layout-v2.md §6, applied in one place.

(oc) first match:
  (1) the budget reached in valid artifacts -> completed
  (2) KILLED anywhere (any attempt of any step, the event, a failure string saying so), CANCELLED/STOPPED, or a
      pre-cancel then a non-success (the chain's final word is not a success) -> cancelled, even if Marin says FAILED
  (3) terminal.json + a valid receipt/export -> completed, unless the budget is known, not reached, and no early stop
      (`Training stopped early by callback`) is logged: then indeterminate, reason `success_below_budget`
  (4) FAILED / WORKER_FAILED / UNSCHEDULABLE, or a failed attempt (its record's state is a source) -> failed
  (proof) the artifacts reach the budget but the completion proof the protocol requires (v2: a valid training
      receipt, §2 "success = valid receipt") is missing or invalid -> indeterminate, saying exactly that (issue 44:
      the closing sentence said "the durable outputs do not show the budget reached" two lines after they did)
  (5) the controller row gone after being seen, 0 pods -> (1)-(3) already tried, so indeterminate
  (6) never seen, or RUNNING without a fresh `.executor_status.lock` -> indeterminate
Where none of them speaks (a controller that claims success without a terminal record or export), the v1 rules
decide and the reasoning says so ("(v1)").

Every source read is listed in the reasoning, then the rule that decided.

Sources carry two flags the rules need: `superseded` (a reading of an attempt a later attempt of the same step
followed: it still counts for "KILLED anywhere", but a retried failure is not the run's failure) and `final` (the
reading belongs to the chain's last step, or is the event: what "then a non-success" is judged on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from rlcleanup.models.controller_states import IRIS
from rlcleanup.models.vocab import TerminalState

# MarinSkyRL's launcher words a non-zero Iris outcome `f"Iris job reached {outcome.job_state}"` (cloud/iris/launch.py,
# artifact_protocol.py, export_job.py): the state is the lowercase name in v1 (`killed`) and `.value` in v2, so the
# token goes through the Iris state table like any other spelling. A bare "killed" elsewhere in prose is not a kill
# (`Worker killed by the OOM killer` is a failure).
IRIS_REACHED = re.compile(r"\bIris job reached (?P<state>[A-Za-z_.]+|\d+)\b")
ENUM_KILLED = re.compile(r"\b(?:JOB|TASK)_STATE_KILLED\b")
FAILED_STATES = ("failed",)  # normalized: FAILED, WORKER_FAILED, UNSCHEDULABLE, DEP_FAILED, SkyPilot FAILED_*


@dataclass(frozen=True)
class Source:
    """One controller-side reading: where, how it spells the state, and what that means."""

    where: str  # within its step: `.executor_status`, `terminal.json response.state`, `iris event`
    raw: str
    state: str  # a models.controller_states.Verdict: succeeded | failed | cancelled | running | pending | unknown
    killed: bool = False  # the Iris job was KILLED (spelled so, or said so in a failure string)
    superseded: bool = False  # an earlier attempt of its step: a later attempt followed it
    final: bool = True  # from the chain's last step (or the event): the chain's final word
    step: str = ""  # the Marin step it was read in, as a prefix of `where` ("" for the event or a run without steps)
    spelled: str | None = None  # as the record quotes it: an enum number by its name (5 -> FAILED)

    def describe(self) -> str:
        flags = [f for f, on in (("KILLED", self.killed), ("superseded by a later attempt", self.superseded)) if on]
        return f"{self.step}{self.where}: {self.raw} -> {self.state}{''.join(f' ({f})' for f in flags)}"


@dataclass
class Inputs:
    sources: list[Source]
    budget: int | None
    budget_reached: bool  # the marker (or receipt, or trainer strings) shows the budget reached
    reached_valid: bool  # ... in artifacts that hold up (v2: a valid receipt; v1: marker/strings as read)
    needs_done_line: bool  # reached by the marker alone with no controller verdict: 'Training done!' is required
    training_done: bool
    early_stop: bool
    last_step: int | None
    success_record: bool  # terminal.json (success-only) exists
    success_artifact_valid: bool  # v2: valid receipt (+ export receipt when joined); v1: an export at the marker
    pre_cancel: bool
    controller_absent: bool  # the row was seen and is gone, 0 pods
    running_fresh_lock: bool
    running_stale: bool  # RUNNING with no lock or a stale one: a vanished controller
    causal_error: bool
    unrecovered_error: bool  # a causal error no later attempt trained past
    generation_only: bool = False
    notes: list[str] = field(default_factory=list)
    reached_by: str = ""  # the evidence that shows the budget reached, cited by rule (1)
    # The completion proof the protocol requires that is missing or invalid while the artifacts reach the budget
    # (protocol v2: the training receipt, run-layout-v2.md §2), as a sentence naming it; "" when none is owed.
    proof_lacking: str = ""


def budget_words(inp: Inputs) -> str:
    """What the durable outputs show about the budget, worded as the rules' closing sentences use it: never
    "not reached" when the artifacts reach it (issue 44 item 4)."""
    if inp.budget_reached and inp.proof_lacking:
        return f"the budget {inp.budget} was reached in the artifacts, but {inp.proof_lacking}"
    if inp.budget_reached:
        # Rule (1)'s other gate: the marker alone, no controller verdict and no 'Training done!'.
        return (
            f"the marker alone reaches the budget {inp.budget}, with neither a controller verdict nor "
            "'Training done!' to confirm that training finished"
        )
    if inp.budget is None:
        return "no budget is known and the durable outputs do not show completion"
    return f"the durable outputs do not show the budget {inp.budget} reached"


@dataclass
class Decision:
    state: TerminalState
    rule: str
    why: str  # the deciding rule's sentence
    with_cause: bool  # report the first causal error as the cause
    sources: str = ""  # "Sources read: ..."
    notes: list[str] = field(default_factory=list)  # what the rules noted before one decided
    budget_confirmed: bool = False  # rule (1)'s test held in full: the budget reached in valid, confirmed artifacts

    @property
    def reasons(self) -> list[str]:
        return [
            self.sources,
            *self.notes,
            f"Rule {self.rule} of the terminal-state rules in docs/run-layouts.md decided: {self.why}",
        ]


def decide(inp: Inputs) -> Decision:  # noqa: C901 -- the spec's precedence rule: its ordered cases, one branch each
    sources = "Sources read: " + ("; ".join(s.describe() for s in inp.sources) if inp.sources else "none") + "."
    reasons: list[str] = []
    killed = [s for s in inp.sources if s.killed]  # anywhere: superseded attempts and earlier steps included
    current = [s for s in inp.sources if not s.superseded]
    stopped = [s for s in current if s.state == "cancelled" and not s.killed]
    succeeded = [s for s in current if s.state == "succeeded"]
    final_success = [s for s in succeeded if s.final]  # an earlier step's success does not end the chain
    failed = [s for s in current if s.state in FAILED_STATES]
    terminal_seen = [s for s in current if s.state in ("succeeded", "failed", "cancelled")]

    no_verdict = not terminal_seen or inp.controller_absent or inp.running_stale
    confirmed = (
        inp.budget_reached and inp.reached_valid and not (inp.needs_done_line and no_verdict and not inp.training_done)
    )

    def done(state: TerminalState, rule: str, why: str, *, cause: bool) -> Decision:
        return Decision(state, rule, why, cause, sources, reasons, confirmed)

    if inp.generation_only and (succeeded or inp.success_record):
        return done(
            TerminalState.completed,
            "(gen)",
            "a generation-only run (it trains nothing, so no budget applies) whose controller reports success.",
            cause=False,
        )
    # (1)
    if inp.budget_reached and inp.reached_valid:
        if confirmed:
            by = f" ({inp.reached_by})" if inp.reached_by else ""
            override = f" (overriding {', '.join(s.describe() for s in failed + killed)})" if failed or killed else ""
            return done(
                TerminalState.completed,
                "(1)",
                f"the budget {inp.budget} was reached in valid artifacts{by}{override}.",
                cause=False,
            )
        reasons.append(
            f"The commit marker reaches the budget {inp.budget}, but with no controller verdict and no trainer line "
            "saying the budget was trained, completion also needs 'Training done!', which was not logged."
        )
    # (2)
    if killed or stopped or (inp.pre_cancel and not final_success):
        stops = [s.describe() for s in killed + stopped]
        if inp.pre_cancel and not final_success:
            stops.append("a pre-cancel request, then no success from the chain's last step")
        marin_failed = [s for s in failed if not s.killed]
        echo = "the kill's echo" if killed or stopped else "the cancel's echo"
        also = f"; {', '.join(s.describe() for s in marin_failed)} is read as {echo}" if marin_failed else ""
        return done(
            TerminalState.cancelled,
            "(2)",
            f"the job was stopped ({'; '.join(stops)}){also}.",
            cause=inp.causal_error,
        )
    # (3)
    if inp.success_record and inp.success_artifact_valid:
        if inp.budget is not None and not inp.budget_reached and not inp.early_stop:
            return done(
                TerminalState.indeterminate,
                "(3)",
                f"success_below_budget: success is recorded with a valid receipt/export, but the last step "
                f"{inp.last_step} is below the known budget {inp.budget} and no 'Training stopped early by callback' "
                "was logged.",
                cause=inp.causal_error,
            )
        stop = " (the trainer stopped early by callback)" if inp.early_stop and not inp.budget_reached else ""
        return done(TerminalState.completed, "(3)", f"terminal.json and a valid receipt/export{stop}.", cause=False)
    # (4)
    # A failed attempt is one of `failed`: every attempt record's state is a source, and a superseded one (a later
    # attempt of its step followed) is left out, since a retried failure is not the run's failure.
    if failed:
        return done(TerminalState.failed, "(4)", f"{', '.join(s.describe() for s in failed)}.", cause=True)
    # (proof) rule (1) fell short only of the proof the protocol requires: say that, not "not reached".
    if inp.budget_reached and inp.proof_lacking:
        return done(
            TerminalState.indeterminate,
            "(proof)",
            f"{budget_words(inp)}; rule (1) needs the budget reached in valid artifacts (protocol v2: a valid "
            "training receipt, run-layout-v2.md §2), so the run stays indeterminate until the proof is found or a "
            "person confirms the outputs.",
            cause=inp.causal_error,
        )
    # (5)
    if inp.controller_absent:
        return done(
            TerminalState.indeterminate,
            "(5)",
            f"the controller's row vanished (0 pods) and {budget_words(inp)}.",
            cause=inp.causal_error,
        )
    # (6)
    if not terminal_seen or inp.running_stale:
        if inp.running_fresh_lock:
            why = "the step still reads RUNNING with a fresh .executor_status.lock: it has not ended."
        elif inp.running_stale:
            why = (
                "RUNNING without a fresh .executor_status.lock (a vanished controller), and no artifact shows an end "
                f"({budget_words(inp)})."
            )
        else:
            why = f"no controller state was ever seen and {budget_words(inp)}."
        return done(TerminalState.indeterminate, "(6)", why, cause=inp.causal_error)
    # (v1) a success claim with no terminal record or export: the v1 rules.
    if succeeded:
        if inp.unrecovered_error:
            return done(
                TerminalState.failed,
                "(v1)",
                f"the controller reported success, but {budget_words(inp)} and a causal error exists.",
                cause=True,
            )
        return done(
            TerminalState.indeterminate,
            "(v1)",
            f"the controller reported success but {budget_words(inp)}.",
            cause=False,
        )
    return done(TerminalState.indeterminate, "(v1)", "no rule applies to the sources read.", cause=inp.causal_error)


def failure_says_killed(failure: str) -> bool:
    """A failure string that says the Iris job was KILLED (Marin records an Iris kill as FAILED, §4)."""
    reached = IRIS_REACHED.search(failure)
    if reached is not None and IRIS.spell(reached.group("state")) == "KILLED":
        return True
    return ENUM_KILLED.search(failure) is not None


def lock_fresh(timestamp: datetime | None, now: datetime, stale_seconds: int) -> bool:
    return timestamp is not None and (now - timestamp).total_seconds() <= stale_seconds
