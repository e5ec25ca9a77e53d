"""Step 1: classify the run from its resolved configuration — never from its name.

Marin injects `trials_dir` and `generator.trajectory_retention.output_path` into every run, so those keys are
reported as seen but never counted as agentic signals.
"""

from __future__ import annotations

from typing import Any

from rlcleanup.formats.config import get
from rlcleanup.formats.launch import EntrypointKind, lookup_entrypoint, read_run_config
from rlcleanup.models.record import Classification
from rlcleanup.models.vocab import ClassificationKind
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import join

STANDARD_ENTRYPOINTS = ("skyrl_train.entrypoints.main_base",)
AGENT_HARNESS_ENTRYPOINTS = ("terminal_bench", "harbor", "mini_swe_agent", "miniswe", "swe_agent", "openhands")
AGENTIC_BLOCKS = ("terminal_bench", "harbor", "config_groups.terminal_bench_config", "generator.miniswe_config_path")
SANDBOX_KEY_FRAGMENTS = ("daytona", "n_concurrent_trials", "sandbox")
# marin skyrl.py `retention_overrides`: `++terminal_bench_config.trials_dir=...` and the trajectory output path go
# into every run's overrides; older adapters injected a top-level `trials_dir`.
INJECTED_EVERYWHERE = (
    "trials_dir",
    "terminal_bench_config.trials_dir",
    "generator.trajectory_retention.output_path",
)
STANDARD_DATA_KINDS = ("parquet", "jsonl", "json", "hf_dataset")


def _entrypoint(config: dict[str, Any], skyrl: dict[str, Any]) -> str | None:
    for source, key in (
        (config, "runtime.entrypoint"),  # SkyRLLaunchConfig (run-layout-v2.md §1)
        (skyrl, "entrypoint"),
        (config, "entrypoint"),
        (config, "run.entrypoint"),
    ):
        value = get(source, key)
        if isinstance(value, str) and value:
            return value
    return None


def _walk_keys(node: Any, prefix: str = "", depth: int = 0) -> list[str]:
    if depth > 12 or not isinstance(node, dict):
        return []
    keys: list[str] = []
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        keys.append(path)
        keys.extend(_walk_keys(value, path, depth + 1))
    return keys


def classify(storage: Storage, layout: RunLayout) -> Classification:  # noqa: C901 -- the spec's classification rules, one signal per branch
    config, skyrl = layout.config, layout.skyrl
    standard: list[str] = []
    agentic: list[str] = []
    notes: list[str] = []

    run_config = layout.run_config or read_run_config(config)
    entrypoint = _entrypoint(config, skyrl)
    standard_entrypoint = False
    if entrypoint is not None:
        entry = lookup_entrypoint(entrypoint)
        # run-layout-v2.md §1: the entrypoint table decides (oc: main_base/fully_async standard; mini_swe and
        # terminal_bench* agentic; *_generate generation-only, no budget).
        if entry is not None and entry.agent_harness:
            agentic.append(f"entrypoint={entrypoint} (agent harness)")
        elif entry is not None:
            standard_entrypoint = True
            if entry.kind is EntrypointKind.generation:
                standard.append(
                    f"entrypoint={entrypoint} (generation-only: trains nothing, so no step budget and no candidates)"
                )
            elif entry.kind is EntrypointKind.checkpoint_export:
                standard.append(f"entrypoint={entrypoint} (checkpoint export: converts a trained checkpoint)")
            else:
                standard.append(f"entrypoint={entrypoint}")
        elif any(h in entrypoint.lower() for h in AGENT_HARNESS_ENTRYPOINTS):
            agentic.append(f"entrypoint={entrypoint} (agent harness)")
        else:
            notes.append(f"entrypoint={entrypoint} (not a known standard or harness entrypoint)")
    if run_config.launch is not None and run_config.launch.inputs.data_kind:
        data_kind_in = run_config.launch.inputs.data_kind
        if data_kind_in == "parquet":
            standard.append("inputs.data_kind=parquet (single-turn RLVR rows)")
        else:
            notes.append(f"inputs.data_kind={data_kind_in} (MarinSkyRL's default task data; decides nothing alone)")

    env_class = get(skyrl, "environment.env_class")
    if isinstance(env_class, str) and env_class:
        if any(h in env_class.lower() for h in AGENT_HARNESS_ENTRYPOINTS):
            agentic.append(f"environment.env_class={env_class} (agent harness)")
        else:
            standard.append(f"environment.env_class={env_class}")

    data_kind = get(skyrl, "data.kind")
    train_data = get(skyrl, "data.train_data")
    if isinstance(data_kind, str) and data_kind in STANDARD_DATA_KINDS and train_data:
        standard.append(f"data.kind={data_kind} with data.train_data")

    for block in AGENTIC_BLOCKS:
        if get(skyrl, block) is not None or get(config, block) is not None:
            agentic.append(f"{block} present (agent harness config)")
    if get(skyrl, "generator.enable_http_endpoint") is True and get(skyrl, "generator.miniswe_config_path"):
        agentic.append("generator.enable_http_endpoint=true with a mini-swe-agent config")

    for key in _walk_keys(config):
        leaf = key.rsplit(".", 1)[-1].lower()
        if any(fragment in leaf for fragment in SANDBOX_KEY_FRAGMENTS):
            agentic.append(f"{key} present (sandbox / concurrent trials)")

    if layout.temp_root is not None:
        # Marin's temp area keeps them under attempts/; Layout D's storage policy directly under the temp root
        # (MarinSkyRL cloud/iris/storage_policy.py trace_root).
        for trace_root in (join(layout.temp_root, "attempts", "trace_jobs"), join(layout.temp_root, "trace_jobs")):
            if next(iter(storage.list(trace_root)), None) is not None:
                agentic.append(f"per-trial outputs under {trace_root}")
                break

    for key in INJECTED_EVERYWHERE:
        if get(skyrl, key) is not None or get(config, key) is not None:
            notes.append(f"{key} present: injected by Marin into every run, not an agentic signal")

    if agentic and standard:
        kind = ClassificationKind.unknown
        evidence = [f"contradictory: standard signal {s}" for s in standard] + [
            f"contradictory: agentic signal {a}" for a in agentic
        ]
    elif agentic:
        kind, evidence = ClassificationKind.agentic, agentic
    elif standard_entrypoint or len(standard) >= 2:  # an unrecognised entrypoint adds no weight
        kind, evidence = ClassificationKind.standard, standard
    else:
        kind = ClassificationKind.unknown
        evidence = standard or ["no standard entrypoint, environment or dataset signal; no agentic signal"]
    return Classification(kind=kind, evidence=evidence + notes)
