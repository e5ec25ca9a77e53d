"""Step 1: standard / agentic / unknown from the resolved configuration, never from the run's name."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.config import skyrl_section
from rlcleanup.models.vocab import ClassificationKind
from rlcleanup.samples import configs
from rlcleanup.steps.classify import classify
from rlcleanup.steps.layout import RunLayout

STANDARD = [
    "entrypoint=skyrl_train.entrypoints.main_base",
    "environment.env_class=gsm8k",
    "data.kind=parquet with data.train_data",
]
INJECTED = [
    "trials_dir present: injected by Marin into every run, not an agentic signal",
    "generator.trajectory_retention.output_path present: injected by Marin into every run, not an agentic signal",
]
NOTHING = "no standard entrypoint, environment or dataset signal; no agentic signal"


def _layout(config: dict[str, Any], temp_root: Path | None = None, run_uri: str = "/runs/math-rl/v1") -> RunLayout:
    return RunLayout(
        run_uri=run_uri,
        kind="A",
        config_uri=f"{run_uri}/resolved-skyrl.json",
        config_bytes=json.dumps(config).encode(),
        config=config,
        skyrl=skyrl_section(config),
        temp_root=str(temp_root) if temp_root is not None else None,
        checkpoints_root=f"{temp_root or run_uri}/checkpoints",
        exports_root=f"{run_uri}/exports",
        attempts=[],
    )


def _classify(config: dict[str, Any], temp_root: Path | None = None, **kw: str) -> tuple[ClassificationKind, list[str]]:
    result = classify(LocalStorage(), _layout(config, temp_root, **kw))
    return result.kind, result.evidence


def _standard(run_name: str = "math-rl") -> dict[str, Any]:
    return configs.standard_config(
        budget=20, ckpt_path="/t/checkpoints", export_path="/r/exports", temp_root="/t", run_name=run_name
    )


MINIMAL_STANDARD: dict[str, Any] = {
    "entrypoint": "skyrl_train.entrypoints.main_base",
    "environment": {"env_class": "gsm8k"},
    "data": {"kind": "parquet", "train_data": ["gs://b/train.parquet"], "val_data": ["gs://b/val.parquet"]},
}


def test_minimal_standard() -> None:
    assert _classify(MINIMAL_STANDARD) == (ClassificationKind.standard, STANDARD)


def test_marin_injected_keys_alone_do_not_make_a_run_agentic() -> None:
    # The sample standard config carries trials_dir and generator.trajectory_retention.output_path.
    assert _classify(_standard()) == (ClassificationKind.standard, STANDARD + INJECTED)
    only_injected = {
        "trials_dir": "/t/attempts/trace_jobs",
        "generator": {"trajectory_retention": {"output_path": "/x"}},
    }
    assert _classify(only_injected) == (ClassificationKind.unknown, [NOTHING, *INJECTED])


def test_launch_yaml_envelope_reads_the_skyrl_section() -> None:
    doc = configs.launch_yaml(
        _standard(), name="math-rl", version="v1", run_root="/r", temp_root="/t", runtime={"trainer_commit": "abc"}
    )
    assert _classify(doc) == (ClassificationKind.standard, STANDARD + INJECTED)


@pytest.mark.parametrize(
    ("config", "evidence"),
    [
        ({"entrypoint": "terminal_bench"}, ["entrypoint=terminal_bench (agent harness)"]),
        (
            {"entrypoint": "examples.mini_swe_agent.main_miniswe"},
            ["entrypoint=examples.mini_swe_agent.main_miniswe (agent harness)"],
        ),
        ({"harbor": {"agent_name": "terminus-2"}}, ["harbor present (agent harness config)"]),
        ({"terminal_bench": {"max_turns": 40}}, ["terminal_bench present (agent harness config)"]),
        (
            {"generator": {"daytona_target": "us"}},
            ["generator.daytona_target present (sandbox / concurrent trials)"],
        ),
        ({"n_concurrent_trials": 16}, ["n_concurrent_trials present (sandbox / concurrent trials)"]),
        (
            {"generator": {"enable_http_endpoint": True, "miniswe_config_path": "swe.yaml"}},
            [
                "generator.miniswe_config_path present (agent harness config)",
                "generator.enable_http_endpoint=true with a mini-swe-agent config",
            ],
        ),
    ],
)
def test_each_agentic_signal_alone(config: dict[str, Any], evidence: list[str]) -> None:
    assert _classify(config) == (ClassificationKind.agentic, evidence)


def test_sample_agentic_config() -> None:
    cfg = configs.agentic_config(
        budget=10, ckpt_path="/t/checkpoints", export_path="/r/exports", temp_root="/t", run_name="x"
    )
    kind, evidence = _classify(cfg)
    assert kind is ClassificationKind.agentic
    assert evidence[0] == "entrypoint=terminal_bench (agent harness)"
    assert "sandbox.daytona_api_url present (sandbox / concurrent trials)" in evidence
    assert "terminal_bench.harbor.n_concurrent_trials present (sandbox / concurrent trials)" in evidence
    assert not any(e.startswith("contradictory") for e in evidence)


def _trace_jobs(temp_root: Path) -> None:
    trial = temp_root / "attempts" / "trace_jobs" / "hello-world__1a2b3c4"
    trial.mkdir(parents=True)
    (trial / "result.json").write_text('{"verifier_result": {"reward": 1.0}}')


def test_per_trial_outputs_are_an_agentic_signal(tmp_path: Path) -> None:
    _trace_jobs(tmp_path)
    trace_root = f"{tmp_path}/attempts/trace_jobs"
    assert _classify({}, tmp_path) == (ClassificationKind.agentic, [f"per-trial outputs under {trace_root}"])


def test_empty_trace_jobs_dir_is_no_signal(tmp_path: Path) -> None:
    (tmp_path / "attempts" / "trace_jobs").mkdir(parents=True)  # Marin's trials_dir exists for every run
    assert _classify(_standard(), tmp_path) == (ClassificationKind.standard, STANDARD + INJECTED)


def test_contradictory_signals_are_unknown_with_both_listed(tmp_path: Path) -> None:
    cfg = copy.deepcopy(MINIMAL_STANDARD) | {"harbor": {"agent_name": "terminus-2"}}
    assert _classify(cfg) == (
        ClassificationKind.unknown,
        [f"contradictory: standard signal {s}" for s in STANDARD]
        + ["contradictory: agentic signal harbor present (agent harness config)"],
    )
    _trace_jobs(tmp_path)
    kind, evidence = _classify(MINIMAL_STANDARD, tmp_path)
    assert kind is ClassificationKind.unknown
    assert evidence[-1] == f"contradictory: agentic signal per-trial outputs under {tmp_path}/attempts/trace_jobs"
    assert evidence[0] == "contradictory: standard signal entrypoint=skyrl_train.entrypoints.main_base"


def test_never_by_name() -> None:
    agentic_name = "tbench-agentic-swe-agent-rl"
    cfg = _standard(run_name=agentic_name)
    cfg["trainer"]["project_name"] = "terminal-bench-agentic"
    assert _classify(cfg, run_uri=f"/runs/{agentic_name}/v1") == (ClassificationKind.standard, STANDARD + INJECTED)
    # ...and a standard-sounding name does not rescue an agentic config.
    agentic = {"entrypoint": "terminal_bench", "trainer": {"run_name": "gsm8k-standard-parquet"}}
    assert _classify(agentic, run_uri="/runs/gsm8k-standard/v1") == (
        ClassificationKind.agentic,
        ["entrypoint=terminal_bench (agent harness)"],
    )


def test_weak_or_unrecognised_signals_are_unknown() -> None:
    # One standard signal without the standard entrypoint is not enough.
    assert _classify({"environment": {"env_class": "gsm8k"}}) == (
        ClassificationKind.unknown,
        ["environment.env_class=gsm8k"],
    )
    # An entrypoint that is neither standard nor a harness adds no weight either way.
    assert _classify({"entrypoint": "lab_rl.train", "environment": {"env_class": "gsm8k"}}) == (
        ClassificationKind.unknown,
        ["environment.env_class=gsm8k", "entrypoint=lab_rl.train (not a known standard or harness entrypoint)"],
    )
    # Environment + parquet data are two independent standard signals.
    cfg = {k: v for k, v in MINIMAL_STANDARD.items() if k != "entrypoint"}
    assert _classify(cfg) == (ClassificationKind.standard, STANDARD[1:])
    # A parquet kind without train_data is not a dataset signal.
    assert _classify({"data": {"kind": "parquet"}}) == (ClassificationKind.unknown, [NOTHING])


def test_standard_entrypoint_alone_is_standard() -> None:
    assert _classify({"entrypoint": "skyrl_train.entrypoints.main_base"}) == (ClassificationKind.standard, STANDARD[:1])
