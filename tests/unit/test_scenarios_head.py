"""Issue 34 items 1-2: the NovaSky SkyRL HEAD and budget-from-log sample scenarios through the whole embedded
pipeline, asserting the record: the budget (and the one sentence that states it, citing its evidence), the terminal
state and the rule that decided it, and a declared selection policy scored on the console tracker's string floats.

Expected values follow from `samples/skyrl_head.py` (budget 20, checkpoints and exports every 5) as literals.
"""

from __future__ import annotations

import pytest
from sample_runs import scenario_records

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import ClassificationKind, TerminalState
from rlcleanup.samples.generator import SCENARIOS
from rlcleanup.samples.skyrl_head import SCENARIOS_HEAD


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CompletionRecord]:
    return scenario_records(tmp_path_factory.mktemp("head"), SCENARIOS_HEAD)


def _rule(record: CompletionRecord) -> str:
    (line,) = [r for r in record.terminal_reasoning if r.startswith("Rule ")]
    return line


def _budget_line(record: CompletionRecord) -> str:
    (line,) = [r for r in record.terminal_reasoning if r.startswith("The step budget is")]
    return line


def test_every_head_scenario_is_listed_and_runs_clean(records: dict[str, CompletionRecord]) -> None:
    assert set(SCENARIOS_HEAD) <= set(SCENARIOS)
    for name, record in records.items():
        assert record.errors == [], name
        assert record.classification is not None and record.classification.kind is ClassificationKind.standard


def test_novasky_head_budget_terminal_and_selection(records: dict[str, CompletionRecord]) -> None:
    r = records["novasky-head"]
    assert r.classification is not None and r.classification.evidence[0] == (
        "entrypoint=skyrl.train.entrypoints.main_base"
    )
    assert (r.terminal_state, r.step_budget, r.last_saved_step, r.last_trained_step) == (
        TerminalState.completed,
        20,
        20,
        20,
    )
    assert _budget_line(r).startswith(
        "The step budget is 20: the trainer logged 'Reached max_training_steps=20, stopping early' at "
    )
    assert "as the config says (trainer.max_training_steps = 20" in _budget_line(r)
    rule = _rule(r)
    assert rule.startswith("Rule (1) of run-layout-v2.md §6 decided: the budget 20 was reached in valid artifacts (")
    assert "latest_ckpt_global_step.txt reads 20; the trainer's stop-at-budget line at " in rule
    # The console tracker printed every float as '%.4f' text: the declared policy scores them all.
    sel = r.selection
    assert sel is not None and sel.status == "selected"
    assert (sel.step, sel.candidates_considered) == (20, [5, 10, 15, 20])
    assert set(sel.scores) == {"5", "10", "15", "20"} and all(isinstance(v, float) for v in sel.scores.values())
    assert r.chain.coverage.first_step == 1 and r.chain.coverage.last_step == 20 and r.chain.coverage.gaps == []


def test_novasky_head_lora_terminal_state_and_budget(records: dict[str, CompletionRecord]) -> None:
    # The adapter's candidate kind is another item of issue 34; the run's verdict comes from the same rule.
    r = records["novasky-head-lora"]
    assert (r.terminal_state, r.step_budget, r.last_saved_step) == (TerminalState.completed, 20, 20)
    assert _rule(r).startswith("Rule (1) of run-layout-v2.md §6 decided: the budget 20 was reached")


def test_budget_stated_only_by_the_log_decides_once(records: dict[str, CompletionRecord]) -> None:
    r = records["budget-from-log"]
    assert (r.terminal_state, r.step_budget, r.last_saved_step) == (TerminalState.completed, 20, 21)
    line = _budget_line(r)
    assert line.startswith("The step budget is 20: the trainer logged 'Reached max training steps (20)' at ")
    assert "; the config gives none (unknown: no trainer.max_training_steps / trainer.max_steps" in line
    rule = _rule(r)
    assert "reads 21 (budget + 1); the trainer's stop-at-budget line at " in rule
    # No sentence says the budget was reached while another rule decides otherwise.
    assert not any("needs 'Training done!'" in s for s in r.terminal_reasoning)
