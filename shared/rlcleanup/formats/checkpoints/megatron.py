"""A Megatron (torch_dist) checkpoint role dir, checked for completeness without loading anything.

run-layout-v2.md §5 (from NVIDIA/Megatron-LM `megatron/core/dist_checkpointing/serialization.py` and `core.py`,
and SkyRL `skyrl/backends/skyrl_train/distributed/megatron/megatron_strategy.py` `save_checkpoint`):
`dist_checkpointing.save` writes `common.pt` (rank 0's non-sharded state), then the torch_dist strategy writes one
`__<rank>_<i>.distcp` per rank and item plus torch DCP's `.metadata` (the coordinator, after every rank), and
`metadata.json` (`CheckpointingConfig {sharded_backend, ...}`, `core.CONFIG_FNAME`) LAST. None of them = incomplete.
SkyRL's async save (`megatron_config.async_dist_ckpt_save`) returns before the shards land, and the trainer then
writes the commit marker: a marker over a dir without `metadata.json` is an unfinished save, not a checkpoint.
`.metadata` is a pickle and is never loaded here (anchors.md §2).
"""

from __future__ import annotations

import re

from rlcleanup.formats.checkpoints.base import (
    CheckpointFormat,
    Findings,
    FormatKind,
    FormatReport,
    Listing,
    ReadOptions,
    read_json,
    step_ranges,
)
from rlcleanup.models.vocab import CheckpointProblem as KP
from rlcleanup.ports.storage import ObjectInfo, Storage

_DISTCP = re.compile(r"^__(?P<rank>\d+)_(?P<item>\d+)\.distcp$")
CONFIG_NAME = "metadata.json"  # megatron.core.dist_checkpointing.core.CONFIG_FNAME
COMMON_NAME = "common.pt"  # serialization.COMMON_STATE_FNAME
DCP_METADATA = ".metadata"  # torch.distributed.checkpoint filesystem writer's metadata file
_MAX_RANKS = 1 << 20


class MegatronCheckpoint(CheckpointFormat):
    name = "megatron"
    kind = FormatKind.checkpoint
    strategies: tuple[str, ...] = ("megatron",)

    def detect(self, listing: Listing) -> bool:
        names = listing.top
        return any(_DISTCP.match(n) for n in names) or COMMON_NAME in names or CONFIG_NAME in names

    def validate(
        self, storage: Storage, listing: Listing, step: int, f: Findings, options: ReadOptions
    ) -> FormatReport:
        role = listing.uri.rstrip("/").rsplit("/", 1)[-1]
        top = listing.top
        shards: dict[int, list[tuple[int, ObjectInfo]]] = {}
        for name, info in top.items():
            m = _DISTCP.match(name)
            if m and int(m["rank"]) < _MAX_RANKS:
                shards.setdefault(int(m["rank"]), []).append((int(m["item"]), info))
        common = top.get(COMMON_NAME)
        if common is None or common.size <= 0:
            f.add(KP.missing_common_state, f"{role}/{COMMON_NAME} is {'empty' if common else 'absent'}")
        if not shards:
            f.add(KP.missing_distcp_shard, f"{role}/ has no __<rank>_<i>.distcp shard")
        else:
            ranks = max(shards) + 1
            gaps = [r for r in range(ranks) if r not in shards]
            if gaps:
                f.add(
                    KP.missing_distcp_shard,
                    f"{role}/__<rank>_*.distcp absent for ranks {step_ranges(gaps)} of 0-{ranks - 1}",
                )
            empty = sorted(f"__{r}_{i}.distcp" for r, items in shards.items() for i, info in items if info.size <= 0)
            if empty:
                f.add(KP.missing_distcp_shard, f"{role}/ has empty shards: {', '.join(empty[:5])}")
        if DCP_METADATA not in top:
            f.add(KP.missing_distcp_metadata, f"{role}/{DCP_METADATA} is absent (torch DCP never finished)")
        if CONFIG_NAME not in top:
            f.add(
                KP.missing_dist_checkpoint_config,
                f"{role}/{CONFIG_NAME} is absent: Megatron writes it last, so the save did not finish "
                "(an async save's marker can precede it)",
            )
        else:
            config, why = read_json(storage, f"{listing.uri.rstrip('/')}/{CONFIG_NAME}")
            backend = config.get("sharded_backend") if config else None
            if config is None:
                f.add(KP.missing_dist_checkpoint_config, f"{role}/{CONFIG_NAME} is unreadable: {why}")
            elif backend != "torch_dist":
                f.warnings.append(f"{role}/{CONFIG_NAME} sharded_backend={backend!r} (SkyRL saves torch_dist)")
        return FormatReport(shard_count=sum(len(v) for v in shards.values()))
