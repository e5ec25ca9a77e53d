"""GPU-hours and compute cost for the report's banner (issue 47), from durable facts only, else "unknown".

The GPUs a run held come from its resolved configuration (the file the record names and hashes), never from a
default or a guess:
- a resolved `launch.yaml` (SkyRLLaunchConfig, run-layout-v2.md §1 and domain.md) states the Iris request,
  `iris.resources.gpu` (the accelerator type) and `iris.resources.gpu_count`, for a job of one task (`ray.num_nodes`
  absent or 1; for more, whether the count is per task is not stated, so it is unknown);
- a resolved SkyRL config states `trainer.placement` (domain.md: `policy_num_nodes`, `policy_num_gpus_per_node`).
  With `colocate_all: true` every model shares the policy's GPUs, so the run held
  `policy_num_nodes x policy_num_gpus_per_node`; without it the reference model and the inference engines hold
  placements of their own whose sizes the file need not state: unknown. It never names the accelerator type.
The hours are each attempt's own `started_at` → `ended_at` (the record's chain, from the attempt records): every
attempt needs both, else unknown. Cost is the GPU-hours times the declared price of that accelerator type
(RLCLEANUP_GPU_PRICES_USD_PER_HOUR, a JSON object such as {"H100": 2.99}); without a type or a price: unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlcleanup.formats.config import get, get_int, skyrl_section
from rlcleanup.models.record import CompletionRecord


@dataclass(frozen=True)
class Accelerators:
    """How many GPUs of which type a run held (None: the configuration does not say), and why."""

    count: int | None
    gpu_type: str | None
    basis: str


def accelerators(config: dict[str, Any] | None) -> Accelerators:
    """What the run's resolved configuration states about its GPUs (see the module docstring)."""
    if config is None:
        return Accelerators(None, None, "the resolved configuration was not read")
    iris_count = get_int(config, "iris.resources.gpu_count")
    if iris_count is not None and iris_count > 0:
        gpu_type = get(config, "iris.resources.gpu")
        kind = str(gpu_type) if isinstance(gpu_type, str) and gpu_type else None
        nodes = get_int(config, "ray.num_nodes")
        if nodes not in (None, 1):
            return Accelerators(None, kind, f"iris.resources.gpu_count for a job of {nodes} Ray nodes")
        return Accelerators(iris_count, kind, "iris.resources")
    skyrl = skyrl_section(config)
    if get(skyrl, "trainer.placement.colocate_all") is True:
        nodes, per_node = (
            get_int(skyrl, "trainer.placement.policy_num_nodes"),
            get_int(skyrl, "trainer.placement.policy_num_gpus_per_node"),
        )
        if nodes is not None and per_node is not None and nodes > 0 and per_node > 0:
            return Accelerators(nodes * per_node, None, "trainer.placement (colocate_all)")
    return Accelerators(None, None, "the configuration states no total GPU count (placement not colocated)")


def attempt_hours(record: CompletionRecord) -> float | None:
    """The wall hours of every attempt, summed; None when an attempt lacks its start or end."""
    attempts = record.chain.attempts
    if not attempts or any(a.started_at is None or a.ended_at is None or a.ended_at < a.started_at for a in attempts):
        return None
    return sum((a.ended_at - a.started_at).total_seconds() for a in attempts if a.started_at and a.ended_at) / 3600


def compute_facts(record: CompletionRecord, gpus: Accelerators, prices: Mapping[str, float]) -> list[str]:
    """The banner's GPU-hours and compute cost lines: a figure where the facts give one, else "unknown" and why."""
    hours = attempt_hours(record)
    if gpus.count is None:
        return [f"GPU-hours unknown ({gpus.basis})", "compute cost unknown"]
    if hours is None:
        return ["GPU-hours unknown (an attempt has no start or end time)", "compute cost unknown"]
    gpu_hours = gpus.count * hours
    named = f"{gpus.count} x {gpus.gpu_type}" if gpus.gpu_type else f"{gpus.count} GPUs"
    facts = [f"GPU-hours {gpu_hours:,.1f} ({named} from {gpus.basis}, over {len(record.chain.attempts)} attempts)"]
    price = prices.get(gpus.gpu_type) if gpus.gpu_type else None
    if price is None:
        why = f"no price declared for {gpus.gpu_type}" if gpus.gpu_type else "the GPU type is not stated"
        facts.append(f"compute cost unknown ({why})")
    else:
        facts.append(f"compute cost ${gpu_hours * price:,.2f} at ${price:g}/GPU-hour (declared)")
    return facts
