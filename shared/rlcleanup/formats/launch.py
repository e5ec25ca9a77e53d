"""The resolved configuration in every shape MarinSkyRL writes, reduced to one view: the SkyRL keys, the entrypoint,
and the artifact roots.

Shapes (run-layout-v2.md §0-§2, upstream MarinSkyRL `cloud/iris/launch_config.py` `SkyRLLaunchConfig` and
`cloud/iris/training_result.py`):
- `launch.yaml` / `resolved-launch.yaml`, `schema_version: 1`: sections `run`, `runtime`, `iris`, `ingress`, `ray`,
  `artifacts`, `inputs`, `skyrl`; the entrypoint module is `runtime.entrypoint`, the data kind `inputs.data_kind`,
  the composed SkyRL config `skyrl`.
- `resolved-skyrl.json` = `{entrypoint, hydra_args}` (protocol v2): the SkyRL keys are the Hydra overrides, composed
  with Hydra's own parser (formats.hydra_overrides).
- older envelopes: a flat SkyRL config, or a launch.yaml without `schema_version` whose `skyrl` holds the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from rlcleanup.formats.config import get
from rlcleanup.formats.hydra_overrides import compose_overrides

# -- the entrypoint table (run-layout-v2.md §1) ----------------------------------------------------------------


class EntrypointKind(StrEnum):
    standard = "standard"  # trains, candidates are its exports
    agentic = "agentic"  # an agent harness: routed to agentic cleanup
    generation = "generation"  # trains nothing: no budget, no checkpoints, no candidates
    checkpoint_export = "checkpoint_export"  # converts a native checkpoint to HF: the export step


@dataclass(frozen=True)
class Entrypoint:
    module: str
    kind: EntrypointKind
    trains: bool
    agent_harness: bool
    source: str


_RL = "MarinSkyRL cloud/iris/rl_config_translation.py RL_ENTRYPOINTS"
_HEAD = "NovaSky-AI/SkyRL skyrl/train/entrypoints/ @a956457"
# Upstream `training_type_for_entrypoint` returns None (trains nothing) for main_generate and
# terminal_bench_generate; `(oc)` §1 makes mini_swe and terminal_bench* agentic and *_generate generation-only.
ENTRYPOINTS: dict[str, Entrypoint] = {
    e.module: e
    for e in (
        Entrypoint("skyrl_train.entrypoints.main_base", EntrypointKind.standard, True, False, _RL),
        Entrypoint("skyrl_train.entrypoints.fully_async", EntrypointKind.standard, True, False, _RL),
        Entrypoint("skyrl_train.entrypoints.mini_swe", EntrypointKind.agentic, True, True, _RL),
        Entrypoint("skyrl_train.entrypoints.terminal_bench", EntrypointKind.agentic, True, True, _RL),
        Entrypoint("skyrl_train.entrypoints.main_generate", EntrypointKind.generation, False, False, _RL),
        # A harness that trains nothing: agentic (harness) first, and generation-only as well.
        Entrypoint("skyrl_train.entrypoints.terminal_bench_generate", EntrypointKind.agentic, False, True, _RL),
        # NovaSky SkyRL HEAD moved the package to `skyrl.train` (NovaSky-AI/SkyRL @a956457
        # `skyrl/train/entrypoints/{main_base,main_generate}.py`; run-layout-v3.md §5); the fork keeps `skyrl_train`.
        Entrypoint("skyrl.train.entrypoints.main_base", EntrypointKind.standard, True, False, _HEAD),
        Entrypoint("skyrl.train.entrypoints.main_generate", EntrypointKind.generation, False, False, _HEAD),
        Entrypoint(
            "skyrl_train.entrypoints.checkpoint_export",
            EntrypointKind.checkpoint_export,
            False,
            False,
            "MarinSkyRL cloud/iris/runtime_environment.py CHECKPOINT_EXPORT_ENTRYPOINT",
        ),
    )
}
# Recipes name entrypoints by their registered short name (RLEntrypoint values); `standard` is main_base.
_SHORT_NAMES = {
    "standard": "skyrl_train.entrypoints.main_base",
    "main_base": "skyrl_train.entrypoints.main_base",
    "fully_async": "skyrl_train.entrypoints.fully_async",
    "mini_swe": "skyrl_train.entrypoints.mini_swe",
    "terminal_bench": "skyrl_train.entrypoints.terminal_bench",
    "generate": "skyrl_train.entrypoints.main_generate",
    "main_generate": "skyrl_train.entrypoints.main_generate",
    "terminal_bench_generate": "skyrl_train.entrypoints.terminal_bench_generate",
    "checkpoint_export": "skyrl_train.entrypoints.checkpoint_export",
}


def lookup_entrypoint(value: str | None) -> Entrypoint | None:
    """A module path (`skyrl_train.entrypoints.main_base`, also `python -m ...` or `skyrl.train.entrypoints...`)
    or a registered short name (`terminal_bench`)."""
    if not value:
        return None
    text = value.strip().removeprefix("python -m ").strip()
    if text in ENTRYPOINTS:
        return ENTRYPOINTS[text]
    if text in _SHORT_NAMES:
        return ENTRYPOINTS[_SHORT_NAMES[text]]
    tail = text.rsplit(".", 1)[-1]
    if text.startswith(("skyrl_train.", "skyrl.")) and tail in _SHORT_NAMES:
        return ENTRYPOINTS[_SHORT_NAMES[tail]]
    return None


# -- the launch document (schema_version 1) --------------------------------------------------------------------


class _Section(BaseModel):
    # Tolerant: every field optional, unknown keys kept (run-layout.md "unknown keys are ignored").
    model_config = ConfigDict(extra="allow")


class LaunchRun(_Section):
    id: str | None = None
    attempt_id: str | None = None
    seed: int | None = None
    mode: str | None = None  # train | checkpoint_export
    submission: str | None = None  # prepare | detach | wait
    export_hf: bool | None = None  # upstream default true; Marin passes false unless asked (§1)


class LaunchRuntime(_Section):
    launcher_commit: str | None = None
    profile: str | None = None
    entrypoint: str | None = None
    training_type: str | None = None  # null: trains nothing


class LaunchIris(_Section):
    cluster: str | None = None
    job_name: str | None = None
    max_retries: int | None = None


class LaunchArtifacts(_Section):
    checkpoint_root: str | None = None
    export_root: str | None = None
    attempts_root: str | None = None
    resolved_config_uri: str | None = None
    terminal_manifest_uri: str | None = None
    resume_checkpoint_count: int | None = None


class LaunchInputs(_Section):
    model: dict[str, Any] | None = None
    data_kind: str | None = None  # tasks (upstream default) | parquet
    train_data: list[Any] | None = None
    validation_data: list[Any] | None = None


class LaunchDocument(_Section):
    schema_version: int | None = None
    run: LaunchRun = LaunchRun()
    runtime: LaunchRuntime = LaunchRuntime()
    iris: LaunchIris = LaunchIris()
    artifacts: LaunchArtifacts = LaunchArtifacts()
    inputs: LaunchInputs = LaunchInputs()
    skyrl: dict[str, Any] = {}


# -- the one view ----------------------------------------------------------------------------------------------


class ConfigShape(StrEnum):
    launch_v1 = "launch.yaml schema_version 1"
    launch_legacy = "launch.yaml envelope without schema_version"
    hydra_args = "resolved-skyrl.json {entrypoint, hydra_args}"
    flat = "flat SkyRL config"


@dataclass
class RunConfig:
    shape: ConfigShape
    skyrl: dict[str, Any]  # the SkyRL keys (composed from hydra_args for that shape)
    entrypoint: str | None
    entrypoint_source: str | None  # the key it was read from
    launch: LaunchDocument | None = None
    hydra_args: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def entry(self) -> Entrypoint | None:
        return lookup_entrypoint(self.entrypoint)

    @property
    def data_kind(self) -> str | None:
        if self.launch is not None and self.launch.inputs.data_kind:
            return self.launch.inputs.data_kind
        value = get(self.skyrl, "data.kind")
        return value if isinstance(value, str) else None

    def artifact_root(self, name: str) -> str | None:
        """`artifacts.<name>` of a launch document (§1: roots come from there when present)."""
        if self.launch is None:
            return None
        value = getattr(self.launch.artifacts, name, None)
        return value.rstrip("/") if isinstance(value, str) and value.strip() else None

    @property
    def completion_mode(self) -> str | None:
        """`trainer.completion.mode` (protocol v2: metrics | checkpoint); None for v1 runs."""
        value = get(self.skyrl, "trainer.completion.mode")
        return value if isinstance(value, str) else None


def _has_skyrl_keys(node: Any) -> bool:
    return isinstance(node, dict) and any(k in node for k in ("trainer", "generator", "data", "environment"))


def read_run_config(config: dict[str, Any]) -> RunConfig:
    """Recognise the shape by its keys (never by the file name) and reduce it to a RunConfig."""
    hydra_args = config.get("hydra_args")
    if isinstance(hydra_args, list) and "trainer" not in config:
        composed = compose_overrides(hydra_args)
        entrypoint = config.get("entrypoint")
        return RunConfig(
            shape=ConfigShape.hydra_args,
            skyrl=composed.config,
            entrypoint=entrypoint if isinstance(entrypoint, str) else None,
            entrypoint_source="entrypoint",
            hydra_args=[a for a in hydra_args if isinstance(a, str)],
            problems=composed.problems,
        )
    if "skyrl" in config and isinstance(config.get("skyrl"), dict):
        problems: list[str] = []
        try:
            launch: LaunchDocument | None = LaunchDocument.model_validate(config)
        except ValidationError as exc:
            # One mistyped section must not lose the others: keep the SkyRL part and say what did not fit.
            problems.append(f"launch document does not fit SkyRLLaunchConfig: {exc.errors()[0].get('msg')}")
            launch = None
        skyrl = config["skyrl"]
        versioned = launch is not None and launch.schema_version is not None
        if versioned and launch is not None and launch.schema_version != 1:
            problems.append(f"launch.yaml schema_version {launch.schema_version} (1 is the known one); read as 1")
        entrypoint, source = None, None
        for key in ("runtime.entrypoint", "skyrl.entrypoint", "entrypoint", "run.entrypoint"):
            value = get(config, key)
            if isinstance(value, str) and value:
                entrypoint, source = value, key
                break
        return RunConfig(
            shape=ConfigShape.launch_v1 if versioned else ConfigShape.launch_legacy,
            skyrl=skyrl if _has_skyrl_keys(skyrl) or versioned else config,
            entrypoint=entrypoint,
            entrypoint_source=source,
            launch=launch,
            problems=problems,
        )
    entrypoint = config.get("entrypoint")
    return RunConfig(
        shape=ConfigShape.flat,
        skyrl=config,
        entrypoint=entrypoint if isinstance(entrypoint, str) else None,
        entrypoint_source="entrypoint" if isinstance(entrypoint, str) else None,
    )
