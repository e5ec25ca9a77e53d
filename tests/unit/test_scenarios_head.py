"""Issue 34 items 1-2: the NovaSky SkyRL HEAD and budget-from-log sample scenarios through the whole embedded
pipeline, asserting the record: the budget (and the one sentence that states it, citing its evidence), the terminal
state and the rule that decided it, and a declared selection policy scored on the console tracker's string floats.

Expected values follow from `samples/skyrl_head.py` (budget 20, checkpoints and exports every 5) and
`samples/megatron.py` (8 ranks, export writers every 4 ranks, 3 shards) as literals.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sample_runs import scenario_records
from test_validate import make_layout  # the small RunLayout builder of the validator tests

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.checkpoints.base import Findings, ReadOptions, list_dir
from rlcleanup.formats.checkpoints.registry import BUILTIN
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import CandidateKind, CandidateState, ClassificationKind, TerminalState, problem_code
from rlcleanup.samples.generator import SCENARIOS
from rlcleanup.samples.megatron import saver_shards, write_distributed_hf_export
from rlcleanup.samples.skyrl_head import SCENARIOS_HEAD
from rlcleanup.steps.validate import validate_candidate


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
    assert rule.startswith(
        "Rule (1) of the terminal-state rules in docs/run-layouts.md decided: the budget 20 was reached in valid artifacts ("
    )
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
    assert _rule(r).startswith(
        "Rule (1) of the terminal-state rules in docs/run-layouts.md decided: the budget 20 was reached"
    )


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


def test_novasky_head_megatron_distributed_export_completes(records: dict[str, CompletionRecord]) -> None:
    """A Megatron run whose HF exports were written by ranks 0 and 4 in parallel (the index by rank 0): completed
    at its budget, every export a valid full model, resumable from its torch_dist checkpoint, selected on the
    console tracker's string floats."""
    r = records["novasky-head-megatron"]
    assert r.errors == []
    assert (r.terminal_state, r.step_budget, r.last_saved_step, r.last_trained_step) == (
        TerminalState.completed,
        20,
        20,
        20,
    )
    assert _rule(r).startswith(
        "Rule (1) of the terminal-state rules in docs/run-layouts.md decided: the budget 20 was reached in valid artifacts"
    )
    assert [(c.step, c.kind, c.format, c.state, c.shard_count, c.problems) for c in r.candidates] == [
        (step, CandidateKind.full, "hf-safetensors", CandidateState.valid, 3, []) for step in (5, 10, 15, 20)
    ]
    assert all(c.parameter_count == 133_440 for c in r.candidates)
    assert r.resume_safety is not None and (r.resume_safety.safe, r.resume_safety.from_step) == (True, 20)
    sel = r.selection
    assert sel is not None and sel.status == "selected" and sel.policy is not None
    assert (sel.step, sel.candidates_considered) == (20, [5, 10, 15, 20])
    assert all(isinstance(v, float) for v in sel.scores.values()) and len(sel.scores) == 4
    # The resume point was read as the Megatron format trainer.strategy declares: all 8 ranks' shards counted.
    storage = LocalStorage()
    checkpoint = list_dir(storage, f"{r.run_uri}/global_step_20/policy")
    f = Findings()
    report = BUILTIN.for_strategy("megatron").validate(storage, checkpoint, 20, f, ReadOptions())
    assert (report.shard_count, f.problems) == (16, [])


def test_megatron_bridge_deals_shards_round_robin_to_the_saver_ranks() -> None:
    """Megatron-Bridge `_save_generator_distributed`: savers are ranks 0, N, 2N, ...; sorted shards dealt in turn."""
    one, two, three = (f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3))
    assert saver_shards(8, 4) == {0: [one, three], 4: [two]}
    assert saver_shards(8, 1) == {0: [one], 1: [two], 2: [three], 3: [], 4: [], 5: [], 6: [], 7: []}
    assert saver_shards(2, 8) == {0: [one, two, three]}


def test_distributed_export_split_across_node_local_paths_is_not_valid(tmp_path: Path) -> None:
    """Upstream's documented hazard (SkyRL docs/checkpointing.mdx, distributed HF export): on a node-local export
    path rank 0 indexes only the shards it sees while `total_size` sums every saver's bytes. The shard rank 4 kept on
    its node is named by the shard numbering, and the index's byte total disagrees: never a valid candidate."""
    policy = tmp_path / "exports" / "global_step_10" / "policy"
    write_distributed_hf_export(policy, world_size=8, save_every_n_ranks=4, visible_to_rank_0={0})
    layout = make_layout(tmp_path, marker=10)
    c = validate_candidate(LocalStorage(checksums=True), layout, 10, metric_steps=None, step_budget=None)
    assert c.state is CandidateState.invalid and not c.valid
    codes = {problem_code(p) for p in c.problems}
    assert {"missing_shard", "index_total_size_mismatch"} <= codes
    assert any("model-00002-of-00003.safetensors is implied by the 3-shard naming" in p for p in c.problems)
