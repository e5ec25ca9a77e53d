"""One decision behind every terminal field (issue 44): over every bundled sample scenario and generated variations
of them, the record's terminal fields are the decision's and the reasoning rendered from it never names a cause the
field lacks nor says the budget was and was not reached (the checks: tests/unit/decision_properties.py). Then issue
44 item 4's case itself: a protocol-v2 run that reached its budget in every artifact but wrote no training receipt.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from decision_properties import contradictions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.models.vocab import TerminalState
from rlcleanup.parsing.attempt_logs import scan_attempt
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import SCENARIOS, write_sample_run
from rlcleanup.steps.layout import discover
from rlcleanup.steps.settle import decision_fields, terminal_verdict
from rlcleanup.steps.terminal import TerminalVerdict
from rlcleanup.steps.terminal_decision import BudgetStatus


def settle(run: Path) -> tuple[TerminalVerdict, dict[str, Any]]:
    """The run's terminal verdict as the pipeline's terminal step takes it, and the record fields it writes."""
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(run))
    verdict, _ = terminal_verdict(storage, layout, [scan_attempt(storage, a) for a in layout.attempts])
    return verdict, decision_fields(verdict)


def _drop_training_receipts(run_root: Path) -> None:
    for receipt in run_root.rglob("receipts/*.json"):
        if "exports" not in receipt.parts and "outcomes" not in receipt.parts:
            receipt.unlink()


def _status(value: str) -> Callable[[Path], None]:
    def write(run_root: Path) -> None:
        for status in run_root.rglob(".executor_status"):
            status.write_text(value + "\n")

    return write


def _drop(pattern: str) -> Callable[[Path], None]:
    def drop(run_root: Path) -> None:
        for path in run_root.rglob(pattern):
            path.unlink()

    return drop


def _marker(step: int) -> Callable[[Path], None]:
    def write(run_root: Path) -> None:
        for marker in run_root.rglob("latest_ckpt_global_step.txt"):
            marker.write_text(f"{step}\n")

    return write


def _strip_lines(needle: str) -> Callable[[Path], None]:
    def strip(run_root: Path) -> None:
        for log in run_root.rglob("*.log"):
            text = log.read_text(errors="replace")
            if needle in text:
                log.write_text("".join(ln for ln in text.splitlines(keepends=True) if needle not in ln))

    return strip


# What a variation may do to a generated run: the facts the terminal rules weigh, each changed alone or together.
VARIATIONS: dict[str, Callable[[Path], None]] = {
    "no training receipt": _drop_training_receipts,
    "status SUCCESS": _status("SUCCESS"),
    "status FAILED": _status("FAILED"),
    "status RUNNING": _status("RUNNING"),
    "no terminal.json": _drop("terminal.json"),
    "no attempt records": _drop("attempts/*.json"),
    "no marker": _drop("latest_ckpt_global_step.txt"),
    "marker 19": _marker(19),
    "marker 20": _marker(20),
    "marker 21": _marker(21),
    "no 'Training done!'": _strip_lines("Training done!"),
    "no stop-at-budget line": _strip_lines("Reached max"),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_sample_scenario_renders_its_decision(scenario: str, tmp_path: Path) -> None:
    verdict, fields = settle(write_sample_run(tmp_path / "runs", scenario))
    assert verdict.decision is not None
    assert contradictions(verdict.decision, fields) == []


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=st.sampled_from(sorted(SCENARIOS)),
    changes=st.lists(st.sampled_from(sorted(VARIATIONS)), min_size=1, max_size=3, unique=True),
)
def test_variations_never_contradict_their_decision(scenario: str, changes: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        run = write_sample_run(root, scenario)
        for change in changes:
            VARIATIONS[change](root)
        verdict, fields = settle(run)
    assert verdict.decision is not None
    assert contradictions(verdict.decision, fields) == [], (scenario, changes)


def test_protocol_v2_without_its_receipt_says_what_decided_and_what_to_check(tmp_path: Path) -> None:
    """Issue 44 item 4: the marker equals the budget, an export sits at the marker, 'Training done!' and 'Saved
    final checkpoint.' are logged and the controller says SUCCESS, but the training receipt protocol v2 requires
    (run-layout-v2.md §2: "success = valid receipt") is missing. The run stays indeterminate (rule (1) needs valid
    artifacts), and the reasoning says why, in agreement with itself, and what a person should check; it used to
    close with "the durable outputs do not show the budget reached" two lines after saying they did."""
    root = tmp_path / "runs"
    run = write_sample_run(root, "protocol-v2")
    _drop_training_receipts(root)
    verdict, fields = settle(run)
    decision = verdict.decision
    assert decision is not None
    assert (decision.state, decision.rule, decision.budget_status) == (
        TerminalState.indeterminate,
        "(proof)",
        BudgetStatus.reached_unproven,
    )
    assert decision.proof is not None and decision.proof.missing and decision.proof.name == "the training receipt"
    reasoning = fields["terminal_reasoning"]
    budget = next(s for s in reasoning if s.startswith("Budget: "))
    assert "the budget 20 was reached in the artifacts" in budget
    assert "the completion proof the protocol requires, the training receipt " in budget and "is missing" in budget
    assert reasoning.index(budget) + 1 == next(i for i, s in enumerate(reasoning) if s.startswith("Rule (proof) "))
    check = next(s for s in reasoning if s.startswith("To check: "))
    assert decision.proof.uri is not None and decision.proof.uri in check and "global_step_20" in check
    assert not any("do not show the budget" in s for s in reasoning)
    assert contradictions(decision, fields) == []


def test_a_recovered_error_is_never_called_the_first_cause(tmp_path: Path) -> None:
    """A completed run whose chain logged a causal error it recovered from: the field holds no cause, so no
    sentence presents the error as the first causal error (it used to read "First causal error: ..." above
    "did not stop the chain from completing the budget")."""
    root = tmp_path / "runs"
    run = write_sample_run(root, "failed-first-link")
    _marker(20)(root)
    _status("SUCCESS")(root)
    verdict, fields = settle(run)
    assert verdict.decision is not None and verdict.terminal_state is TerminalState.completed
    assert fields["first_failure_cause"] is None and verdict.decision.recovered_error is not None
    assert not any(s.startswith("First causal error") for s in fields["terminal_reasoning"])
    assert any("it is not the run's failure cause" in s for s in fields["terminal_reasoning"])
    assert contradictions(verdict.decision, fields) == []


def test_the_pipeline_records_the_unproven_completion_and_asks_a_person_to_check(tmp_path: Path) -> None:
    """Item 4 end to end: the record the pipeline writes for the receipt-less protocol-v2 run agrees with itself
    (class, signature and reasoning included), and its remaining work carries what to check."""
    root = tmp_path / "runs"
    run = write_sample_run(root, "protocol-v2")
    _drop_training_receipts(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
        record = run_embedded(str(run), db_path=tmp_path / "r.db", preserve_root=str(tmp_path / "p"))
    assert record is not None and record.terminal_state is TerminalState.indeterminate
    assert contradictions(None, record.model_dump(mode="json")) == []
    (check,) = [item for item in record.remaining_work if item.startswith("check how the run ended: ")]
    assert "/receipts/" in check and "global_step_20" in check
