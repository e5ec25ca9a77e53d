"""The one list of weight-file kinds: which object names hold tensors (never read as text, listed not copied).

Capture lists these with sizes and checksums instead of copying them (they are the bulk of a run and not
evidence), the secret scan never reads them as text, and the sample uploader never rewrites paths inside them.
Adding a kind here is the whole change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class WeightFileKind:
    suffix: str
    written_by: str
    # True: every such file is bulk weights. False: only per-rank shards are (`..._rank_<r>.pt`); a lone
    # trainer_state.pt or data.pt is small resume evidence and is preserved like any other file.
    always_bulk: bool = True


WEIGHT_FILE_KINDS: tuple[WeightFileKind, ...] = (
    WeightFileKind(".safetensors", "HF exports (save_pretrained), safetensors shards"),
    WeightFileKind(".bin", "legacy HF exports (pytorch_model-*.bin)"),
    WeightFileKind(".distcp", "torch.distributed.checkpoint / Megatron torch_dist shards (__<rank>_<i>.distcp)"),
    WeightFileKind(".pth", "torch.save checkpoints"),
    WeightFileKind(".ckpt", "Lightning-style checkpoints"),
    WeightFileKind(".gguf", "llama.cpp exports"),
    WeightFileKind(".pt", "torch.save: FSDP per-rank model/optim/extra_state shards", always_bulk=False),
)
WEIGHT_SUFFIXES: tuple[str, ...] = tuple(kind.suffix for kind in WEIGHT_FILE_KINDS)
_BULK_SUFFIXES = tuple(kind.suffix for kind in WEIGHT_FILE_KINDS if kind.always_bulk)
_RANK_SHARD = re.compile(r"_rank_\d+\.[A-Za-z0-9]+$")


def has_weight_suffix(name: str) -> bool:
    """A tensor file of any kind (including small ones such as trainer_state.pt): binary, never text."""
    return name.lower().endswith(WEIGHT_SUFFIXES)


def is_bulk_weight(uri: str) -> bool:
    """Weights that capture lists instead of copying: every always-bulk kind, and per-rank shards of the rest."""
    name = uri.rsplit("/", 1)[-1].lower()
    if name.endswith(_BULK_SUFFIXES):
        return True
    return has_weight_suffix(name) and _RANK_SHARD.search(name) is not None
