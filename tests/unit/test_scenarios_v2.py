"""The run-layout-v2 sample scenarios through the whole embedded pipeline, asserting each record's whole verdict:
classification, terminal state and the §6 rule that decided it, first failure cause (or its absence with the
earliest symptom), budget, candidates, resume safety, the Marin steps of the chain.

Expected values follow from the scenario facts in `samples/v2.py` (budget 20, ckpt interval 5, HF exports every 5
where the run writes them) and run-layout-v2.md, written as literals.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sample_runs import scenario_records

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import ClassificationKind, RecordStatus, TerminalState
from rlcleanup.samples.generator import SCENARIOS
from rlcleanup.samples.v2 import SCENARIOS_V2

INJECTED = [
    "terminal_bench_config.trials_dir present: injected by Marin into every run, not an agentic signal",
    "generator.trajectory_retention.output_path present: injected by Marin into every run, not an agentic signal",
]
V1_INJECTED = [
    "trials_dir present: injected by Marin into every run, not an agentic signal",
    "generator.trajectory_retention.output_path present: injected by Marin into every run, not an agentic signal",
]
MAIN_BASE = "entrypoint=skyrl_train.entrypoints.main_base"


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CompletionRecord]:
    return scenario_records(tmp_path_factory.mktemp("v2"), SCENARIOS_V2)


def _rule(record: CompletionRecord) -> str:
    (line,) = [r for r in record.terminal_reasoning if r.startswith("Rule ")]
    return line.split(" of ", 1)[0].removeprefix("Rule ")


def _candidates(record: CompletionRecord) -> list[tuple[int, bool, list[str]]]:
    return [(c.step, c.valid, [p.split(":", 1)[0] for p in c.problems]) for c in record.candidates]


def _steps(record: CompletionRecord) -> list[tuple[str, str, str | None, str | None]]:
    return [(s.name, s.role, s.executor_status, s.state) for s in record.chain.steps]


def test_every_v2_scenario_is_listed_and_runs_clean(records: dict[str, CompletionRecord]) -> None:
    assert set(SCENARIOS_V2) <= set(SCENARIOS)
    for name, record in records.items():
        assert record.errors == [], name


def test_launch_yaml_v1(records: dict[str, CompletionRecord]) -> None:
    r = records["launch-yaml-v1"]
    assert r.classification is not None and r.classification.kind is ClassificationKind.standard
    assert r.classification.evidence == [
        MAIN_BASE,
        "inputs.data_kind=parquet (single-turn RLVR rows)",
        "environment.env_class=gsm8k",
        *INJECTED,
    ]
    assert (r.terminal_state, _rule(r), r.step_budget, r.last_saved_step) == (TerminalState.completed, "(1)", 20, 20)
    assert r.first_failure_cause is None and r.first_failure_reason is None and r.earliest_symptom is None
    assert _candidates(r) == [(5, True, []), (10, True, []), (15, True, []), (20, True, [])]
    assert r.resume_safety is not None and (r.resume_safety.safe, r.resume_safety.from_step) == (True, 20)
    assert _steps(r) == [("math-rl-launch-yaml-v1", "single", "SUCCESS", "succeeded")]
    assert [a.state for a in r.chain.attempts] == ["succeeded"]
    assert r.run_id == "math-rl-launch-yaml-v1-2026.11.30"  # from the launch manifest's result.run_id
    assert r.resolved_config is not None and r.resolved_config.uri.endswith("/resolved-launch.yaml")
    assert r.status is RecordStatus.awaiting_authority


def test_protocol_v2_three_step_run(records: dict[str, CompletionRecord]) -> None:
    r = records["protocol-v2"]
    assert r.classification is not None and r.classification.kind is ClassificationKind.standard
    assert r.classification.evidence == [MAIN_BASE, "environment.env_class=gsm8k", *INJECTED]
    # The budget lives only in hydra_args (trainer.max_steps=20), composed with Hydra's parser.
    assert (r.terminal_state, _rule(r), r.step_budget, r.last_saved_step) == (TerminalState.completed, "(1)", 20, 20)
    assert any(line.startswith("Training receipt ") and " is valid " in line for line in r.terminal_reasoning)
    assert any(line.startswith("Export receipt ") and " is valid " in line for line in r.terminal_reasoning)
    assert any("request_fingerprint recomputed from the manifest's request" in line for line in r.terminal_reasoning)
    # Both steps' evidence is preserved: the export step's root ("run") and the training step's ("training-run").
    assert r.manifest_uri is not None
    preserved = json.loads(Path(r.manifest_uri).read_text())["objects"]
    training = sorted(
        o["destination"].split("/training-run/", 1)[1] for o in preserved if "/training-run/" in o["destination"]
    )
    assert training == [
        ".artifact.json",
        ".executor_info",
        ".executor_status",
        f"receipts/{r.chain.attempts[0].attempt_id}.json",
        "resolved-skyrl.json",
        "terminal.json",
    ]
    # Candidates come from the export step only; the training step exported nothing (hf_save_interval=-1).
    assert _candidates(r) == [(20, True, [])]
    assert r.candidates[0].uri.endswith("/math-rl-protocol-v2/2026.11.30/exports/global_step_20/policy")
    # The checkpoint root is not in hydra_args: it comes from the manifest's request.output.checkpoint_root (T).
    assert r.resume_safety is not None and (r.resume_safety.safe, r.resume_safety.from_step) == (True, 20)
    assert _steps(r) == [
        ("math-rl-protocol-v2-training", "training", "SUCCESS", "succeeded"),
        ("math-rl-protocol-v2", "export", "SUCCESS", "succeeded"),
    ]
    assert r.first_failure_cause is None


def test_export_failed_after_temp_checkpoints_expired(records: dict[str, CompletionRecord]) -> None:
    r = records["export-expired"]
    # Issue 34 item 6: the training receipt (durable, in R) vouches for a checkpoint the temp TTL deleted, and the
    # export step failed on it (export_job.py validate_native_checkpoint): no artifact holds the budget, the chain's
    # last step FAILED, so the run failed (was `completed` by rule (1)).
    assert (r.terminal_state, _rule(r), r.step_budget) == (TerminalState.failed, "(4)", 20)
    receipt = next(line for line in r.terminal_reasoning if line.startswith("Training receipt "))
    assert " is invalid (" in receipt and "the checkpoint it vouches for expired with the temp root" in receipt
    assert r.last_saved_step is None and r.candidates == []
    assert _steps(r) == [
        ("math-rl-export-expired-training", "training", "SUCCESS", "succeeded"),
        ("math-rl-export-expired", "export", "FAILED", "failed"),
    ]
    expired = "The export step failed because the training step's temp checkpoints expired"
    assert any(line.startswith(expired) for line in r.terminal_reasoning)
    (owed,) = [w for w in r.remaining_work if w.startswith("the export step failed because the training step's temp")]
    assert "Checkpoint file is missing or changed" in owed
    assert r.resume_safety is not None and not r.resume_safety.safe
    assert r.resume_safety.reasons[0].startswith("marker_missing: ")
    assert r.status is RecordStatus.complete
    # Issue 44 item 3: the export step's own error (its attempt record's `response.failure`, the only place it is
    # stored) is the first cause; it used to be null with "no error in the logs explains it".
    cause = r.first_failure_cause
    assert cause is not None and cause.evidence_source == "attempt_record"
    assert (cause.error_type, cause.line, cause.attempt_id) == (
        "export attempt failure",
        1,
        r.chain.steps[1].attempt_ids[0],
    )
    assert cause.message.startswith("Checkpoint file is missing or changed: ")
    assert cause.message.endswith(
        "/math-rl-export-expired-training/2026.11.30/checkpoints/global_step_20/trainer_state.pt"
    )
    assert cause.source_uri.endswith(f"/math-rl-export-expired/2026.11.30/attempts/{cause.attempt_id}.json")
    (named,) = [line for line in r.terminal_reasoning if line.startswith("First causal error: ")]
    assert f"export attempt failure: {cause.message} at {cause.source_uri}:1" in named
    assert not any("no error in the logs explains it" in line for line in r.terminal_reasoning)
    assert r.first_failure_reason is None and r.earliest_symptom is None
    assert r.failure_evidence is not None and r.failure_evidence.evidence == "cause"


def test_metrics_mode_has_no_checkpoints_by_design(records: dict[str, CompletionRecord]) -> None:
    r = records["metrics-mode"]
    assert (r.terminal_state, _rule(r), r.step_budget, r.last_trained_step) == (TerminalState.completed, "(1)", 20, 20)
    assert r.last_saved_step is None and r.candidates == []
    assert r.resume_safety is not None and r.resume_safety.reasons[0].startswith(
        "not applicable: completion_mode=metrics"
    )
    assert r.remaining_work == [
        "no export candidates by design: completion_mode=metrics keeps no checkpoint (ckpt_interval=-1), so the run "
        'is not resumable (docs/run-layouts.md, "Marin steps")'
    ]
    assert _steps(r) == [("math-rl-metrics-mode-metrics", "metrics", "SUCCESS", "succeeded")]
    assert r.errors == []


def test_killed_iris_job_is_cancelled_without_a_cause(records: dict[str, CompletionRecord]) -> None:
    r = records["killed-iris"]
    assert (r.terminal_state, _rule(r), r.step_budget) == (TerminalState.cancelled, "(2)", 20)
    assert r.first_failure_cause is None  # the SIGTERM notices are symptoms of the kill, never its cause
    assert r.first_failure_reason == "no_causal_error_found"
    assert r.earliest_symptom is not None and r.earliest_symptom.error_type == "signal"
    assert "sending SIGTERM" in r.earliest_symptom.message
    assert (r.last_saved_step, r.last_trained_step) == (5, 8)
    assert _candidates(r) == [(5, True, [])]
    assert _steps(r) == [("math-rl-killed-iris", "single", "FAILED", "failed")]
    assert any("is read as the kill's echo" in line for line in r.terminal_reasoning)


def test_teardown_cascade_hides_nothing(records: dict[str, CompletionRecord]) -> None:
    r = records["teardown-cascade"]
    assert (r.terminal_state, _rule(r), r.step_budget) == (TerminalState.failed, "(4)", 20)
    cause = r.first_failure_cause
    assert cause is not None
    second = r.chain.attempts[1].attempt_id
    assert (cause.attempt_id, cause.error_type, cause.message, cause.line) == (
        second,
        "RuntimeError",
        "CUDA error: an illegal memory access was encountered",
        2,
    )
    assert cause.source_uri.endswith("ray_session_logs/worker-engine-core-01000000-4234.err")
    assert cause.traceback.splitlines()[0] == "Traceback (most recent call last):"  # vLLM prefixes stripped
    assert r.first_failure_reason is None and r.earliest_symptom is None
    assert [(a.state, a.first_step, a.last_step) for a in r.chain.attempts] == [("failed", 1, 7), ("failed", 6, 9)]
    assert _candidates(r) == [(5, True, [])]


def test_all_teardown_reports_no_cause_and_the_earliest_symptom(records: dict[str, CompletionRecord]) -> None:
    r = records["all-teardown"]
    assert (r.terminal_state, _rule(r), r.step_budget) == (TerminalState.failed, "(4)", 20)
    assert r.first_failure_cause is None
    assert r.first_failure_reason == "no_causal_error_found"
    symptom = r.earliest_symptom
    assert symptom is not None and symptom.error_type in ("absl_sigterm", "signal", "nccl_watchdog")
    assert any("no_causal_error_found" in line for line in r.terminal_reasoning)


def test_megatron_async_save_without_metadata_json_is_not_resumable(records: dict[str, CompletionRecord]) -> None:
    r = records["megatron-checkpoint"]
    # Issue 34 item 6: the marker names step 20, but its async save never wrote metadata.json, so the last saved
    # checkpoint is 15 (was 20). Training finished (Training done!, the controller's success, the export at 20).
    assert (r.terminal_state, _rule(r), r.step_budget, r.last_saved_step) == (TerminalState.completed, "(1)", 20, 15)
    assert any(line.startswith("The marker names global_step_20, whose Megatron save") for line in r.terminal_reasoning)
    assert _candidates(r) == [(5, True, []), (10, True, []), (15, True, []), (20, True, [])]
    assert r.resume_safety is not None and not r.resume_safety.safe
    assert [p.split(":", 1)[0] for p in r.resume_safety.reasons] == ["missing_dist_checkpoint_config"]


def test_generation_only_run(records: dict[str, CompletionRecord]) -> None:
    r = records["generation-only"]
    assert r.classification is not None and r.classification.kind is ClassificationKind.standard
    assert r.classification.evidence[0] == (
        "entrypoint=skyrl_train.entrypoints.main_generate (generation-only: trains nothing, so no step budget and "
        "no candidates)"
    )
    assert (r.terminal_state, _rule(r), r.step_budget) == (TerminalState.completed, "(gen)", None)
    assert r.candidates == [] and r.last_saved_step is None
    assert r.not_applicable_evidence[-1].startswith("checkpoints, exports and candidates: ")
    assert r.remaining_work[0].startswith("no export candidates by design: ")
    assert r.status is RecordStatus.complete


def test_fused_moe_export_would_not_load(records: dict[str, CompletionRecord]) -> None:
    r = records["fused-moe-export"]
    assert (r.terminal_state, _rule(r), r.step_budget) == (TerminalState.completed, "(1)", 20)
    # The dev env has the layout-check extra (Makefile), so the real check runs (test_tensor_layout.py covers the
    # skipped path). Per-expert Qwen3-MoE tensors load (transformers 5 fuses them at load); fused w1/w2/w3 ones do not,
    # nor 8 experts named against the config's 4 (issue 34 item 6).
    assert _candidates(r) == [
        (5, True, []),
        (10, False, ["tensor_layout_mismatch"]),
        (15, True, []),
        (20, False, ["tensor_layout_mismatch"]),
    ]
    (too_many,) = r.candidates[1].problems
    assert "8 expert count mismatches with config.json, first: model.layers.0.mlp.experts.down_proj" in too_many
    assert "experts 4-7 outside the 4 config.json declares" in too_many
    (problem,) = r.candidates[3].problems
    assert problem.startswith("tensor_layout_mismatch: Qwen3MoeForCausalLM from config.json would load with 4 missing")
    assert "first: model.layers.0.mlp.experts.down_proj" in problem
    assert "6 unexpected, first: model.layers.0.mlp.moe.experts.w1" in problem
