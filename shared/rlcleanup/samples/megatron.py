"""What SkyRL's Megatron strategy writes: torch_dist checkpoints and the Megatron-Bridge HF export, rank by rank.

Followed upstream:
- NovaSky-AI/SkyRL @a9564572e `skyrl/backends/skyrl_train/distributed/megatron/megatron_strategy.py`
  `save_checkpoint`: `dist_checkpointing.save` with the `torch_dist` strategy wrapped in
  `FullyParallelSaveStrategyWrapper` (every rank writes its own `__<rank>_<i>.distcp`; rank 0 `common.pt`, torch DCP's
  `.metadata`, and Megatron-LM's `metadata.json` last), then global rank 0 alone `huggingface/` (config + tokenizer,
  `save_hf_configs`). The trainer (`skyrl/train/trainer.py` `save_checkpoints`) adds `data.pt` and `trainer_state.pt`.
- the same file's `save_hf_model` → NVIDIA-NeMo/Megatron-Bridge @067f987df
  `src/megatron/bridge/models/hf_pretrained/state.py` `_save_generator_distributed` (SkyRL's
  `trainer.policy.megatron_config.hf_export_config.distributed_save`): the source model's shard names, assigned
  round-robin to the saver ranks `0, N, 2N, ...` (`save_every_n_ranks`), each shard written by its saver with
  `safetensors.torch.save_file` and no `__metadata__`; after a barrier rank 0 alone writes
  `model.safetensors.index.json` from the shards it can see (the source index's `metadata` with `total_size` set to
  the bytes every saver wrote, `indent=4`, the source's tensor order); then rank 0 `save_artifacts` and
  `save_hf_configs` (config.json, generation_config.json, tokenizer files).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from rlcleanup.samples.hf_export import (
    _pt_placeholder,
    model_config,
    shard_layout,
    shard_name,
    write_safetensors,
    write_tokenizer_files,
)

# torch_dist's default writer threads per rank (Megatron-LM TorchDistSaveShardedStrategy thread_count=2): `__<r>_0/1`.
ITEMS_PER_RANK = 2
_CHECKPOINT_CONFIG = {
    "sharded_backend": "torch_dist",
    "sharded_backend_version": 1,
    "common_backend": "torch",
    "common_backend_version": 1,
}


def write_megatron_checkpoint(
    dest: Path, step: int, *, finished: bool = True, ranks: int = 2, hf_tokenizer: bool = False
) -> None:
    """A SkyRL Megatron checkpoint dir `global_step_<step>`: common.pt, every rank's shards and .metadata, then
    metadata.json last (an unfinished async save lacks it); `hf_tokenizer` adds rank 0's tokenizer files beside
    `huggingface/config.json`, as `save_hf_configs` writes them."""
    files: dict[str, bytes] = {
        "data.pt": _pt_placeholder(f"dataloader state at global_step {step}"),
        "trainer_state.pt": _pt_placeholder(f"trainer state global_step={step}"),
        "policy/common.pt": _pt_placeholder(f"megatron common state step {step}"),
        "policy/.metadata": b"\x80\x04torch-dcp-metadata-placeholder",
        "policy/huggingface/config.json": (json.dumps(model_config(), indent=2) + "\n").encode(),
    }
    for rank in range(ranks):
        for item in range(ITEMS_PER_RANK):
            files[f"policy/__{rank}_{item}.distcp"] = _pt_placeholder(f"distcp rank {rank} item {item} step {step}")
    if finished:
        files["policy/metadata.json"] = json.dumps(_CHECKPOINT_CONFIG).encode()
    for rel, data in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if hf_tokenizer:
        write_tokenizer_files(dest / "policy" / "huggingface")


def saver_shards(world_size: int, save_every_n_ranks: int) -> dict[int, list[str]]:
    """Which rank writes which shard: Megatron-Bridge deals the sorted shard names round-robin to the saver ranks."""
    savers = list(range(0, world_size, save_every_n_ranks))
    names = sorted(shard_name(k) for k in range(1, len(shard_layout()) + 1))
    return {rank: [n for i, n in enumerate(names) if i % len(savers) == index] for index, rank in enumerate(savers)}


def write_distributed_hf_export(
    dest: Path, *, world_size: int, save_every_n_ranks: int, visible_to_rank_0: set[int] | None = None
) -> dict[int, list[str]]:
    """A distributed Megatron-Bridge export into `dest` (the `policy/` dir); returns the shards each saver wrote.

    `visible_to_rank_0`: the saver ranks whose shards rank 0 could see when it built the index (None: all, a shared
    filesystem). On node-local export paths the others' shards land elsewhere and the index names only what rank 0
    saw, while `total_size` still sums every saver's bytes (upstream's documented hazard).
    """
    dest.mkdir(parents=True, exist_ok=True)
    tensors_of = {shard_name(k): tensors for k, tensors in enumerate(shard_layout(), start=1)}
    by_rank = saver_shards(world_size, save_every_n_ranks)
    seen = set(by_rank) if visible_to_rank_0 is None else visible_to_rank_0
    total = 0
    visible: set[str] = set()
    for rank, names in by_rank.items():
        for name in names:
            written = write_safetensors(dest / name, tensors_of[name], metadata=None)
            total += written
            if rank in seen:
                visible.add(name)
            else:
                (dest / name).unlink()  # it exists on that rank's node only
    weight_map = {t: name for name, tensors in tensors_of.items() if name in visible for t, _ in tensors}
    parameters = sum(math.prod(shape) for tensors in tensors_of.values() for _, shape in tensors)
    index = {"metadata": {"total_parameters": parameters, "total_size": total}, "weight_map": weight_map}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=4))
    (dest / "config.json").write_text(json.dumps(model_config(), indent=2) + "\n")
    write_tokenizer_files(dest)
    return by_rank
