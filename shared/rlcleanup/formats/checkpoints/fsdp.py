"""SkyRL's FSDP checkpoint role dir: `<role>/{model,optim,extra_state}_world_size_<W>_rank_<r>.pt` for every rank.

The world size comes from `<role>/fsdp_config.json` (or, with a warning, from the shard names); every one of the
three kinds must exist for every rank 0..W-1, or SkyRL cannot resume from it.
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
    as_step,
    read_json,
    step_ranges,
)
from rlcleanup.models.vocab import CheckpointProblem as KP
from rlcleanup.ports.storage import Storage

RANK_KINDS = ("model", "optim", "extra_state")
_RANK_FILE = re.compile(r"^(?P<kind>model|optim|extra_state)_world_size_(?P<w>\d+)_rank_(?P<r>\d+)\.pt$")
_MAX_WORLD_SIZE = 65536
# SkyRL's docs (docs/checkpointing-logging/checkpointing.rst) show `model_state.pt` / `optimizer_state.pt`; no code
# in SkyRL writes them (fsdp_strategy.py saves the per-rank names above). Accepted, flagged (run-layout-v2.md §5).
DOC_ONLY_NAMES = ("model_state.pt", "optimizer_state.pt")


class FsdpCheckpoint(CheckpointFormat):
    name = "fsdp"
    kind = FormatKind.checkpoint
    strategies: tuple[str, ...] = ("fsdp", "fsdp2")

    def detect(self, listing: Listing) -> bool:
        return any(_RANK_FILE.match(name.rsplit("/", 1)[-1]) or name in DOC_ONLY_NAMES for name in listing.objects)

    def validate(
        self, storage: Storage, listing: Listing, step: int, f: Findings, options: ReadOptions
    ) -> FormatReport:
        """`listing` is one role dir (policy/ or critic/) of a checkpoint."""
        role = listing.uri.rstrip("/").rsplit("/", 1)[-1]
        names = set(listing.objects)
        if not any(_RANK_FILE.match(n) for n in names) and DOC_ONLY_NAMES[0] in names:
            f.warnings.append(
                f"{role}/ uses the documentation-only naming {', '.join(n for n in DOC_ONLY_NAMES if n in names)} "
                "(SkyRL's FSDP strategy writes {model,optim,extra_state}_world_size_<W>_rank_<r>.pt): accepted, "
                "but no SkyRL code resumes from it"
            )
            empty = [n for n in DOC_ONLY_NAMES if n in names and listing.objects[n].size <= 0]
            if empty:
                f.add(KP.missing_rank_shard, f"{role}/{', '.join(empty)} is empty")
            return FormatReport(shard_count=sum(1 for n in DOC_ONLY_NAMES if n in names))
        present: dict[str, set[tuple[int, int]]] = {kind: set() for kind in RANK_KINDS}
        for name in names:
            m = _RANK_FILE.match(name)
            if m:
                present[m["kind"]].add((int(m["w"]), int(m["r"])))
        world: int | None = None
        if "fsdp_config.json" in names:
            cfg, why = read_json(storage, f"{listing.uri}/fsdp_config.json")
            world = as_step(cfg.get("world_size")) if cfg else None
            if world is None:
                f.add(
                    KP.missing_rank_shard, f"{role}/fsdp_config.json has no integer world_size ({why or 'key absent'})"
                )
                return FormatReport()
        else:
            sizes = {w for kind in present.values() for w, _ in kind}
            if len(sizes) != 1:
                f.add(
                    KP.missing_rank_shard, f"{role}/fsdp_config.json is absent and the shard names give no world size"
                )
                return FormatReport()
            world = sizes.pop()
            f.warnings.append(f"{role}/fsdp_config.json is absent; world size {world} taken from the shard names")
        if not 0 < world <= _MAX_WORLD_SIZE:
            f.add(KP.missing_rank_shard, f"{role}/fsdp_config.json world_size={world} is implausible")
            return FormatReport()
        for kind in RANK_KINDS:
            missing = [r for r in range(world) if (world, r) not in present[kind]]
            if missing:
                f.add(
                    KP.missing_rank_shard,
                    f"{role}/{kind}_world_size_{world}_rank_<r>.pt absent for ranks {step_ranges(missing)} "
                    f"of 0-{world - 1}",
                )
        return FormatReport(shard_count=sum(len(ranks) for ranks in present.values()))
