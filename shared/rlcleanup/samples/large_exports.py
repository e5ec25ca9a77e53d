"""70B-shaped exports and FSDP checkpoints for the large sample run (split from samples/large.py): llama tensor
lists per model shape, shard templates with real safetensors headers, and sparse files so a 141 GB export costs no
disk."""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcleanup.samples.generator import _dump_json as dump_json
from rlcleanup.samples.hf_export import write_checkpoint_dir, write_tokenizer_files

BF16 = 2


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    vocab: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int


MODELS: dict[str, ModelShape] = {
    "llama-70b": ModelShape(80, 8192, 128256, 28672, 64, 8, 128),
    "llama-tiny": ModelShape(80, 32, 512, 112, 4, 1, 8),  # same tensor list, ~1.1M parameters
}
LLAMA_70B = MODELS["llama-70b"]


def llama_tensors(shape: ModelShape = LLAMA_70B) -> list[tuple[str, list[int]]]:
    h, inter, vocab = shape.hidden, shape.intermediate, shape.vocab
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    out = [("model.embed_tokens.weight", [vocab, h])]
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", [h]),
            (p + "post_attention_layernorm.weight", [h]),
            (p + "self_attn.q_proj.weight", [q, h]),
            (p + "self_attn.k_proj.weight", [kv, h]),
            (p + "self_attn.v_proj.weight", [kv, h]),
            (p + "self_attn.o_proj.weight", [h, q]),
            (p + "mlp.gate_proj.weight", [inter, h]),
            (p + "mlp.up_proj.weight", [inter, h]),
            (p + "mlp.down_proj.weight", [h, inter]),
        ]
    return [*out, ("model.norm.weight", [h]), ("lm_head.weight", [vocab, h])]


def llama70b_tensors() -> list[tuple[str, list[int]]]:
    return llama_tensors(LLAMA_70B)


def _nbytes(shape: list[int]) -> int:
    return math.prod(shape) * BF16


def bf16_shard_head(tensors: list[tuple[str, list[int]]]) -> tuple[bytes, int]:
    """A shard's first bytes as the safetensors library writes them (the 8-byte little-endian header length, then
    the JSON header padded with spaces to 8 bytes), for bf16 tensors laid end to end; and the data section's length."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + _nbytes(shape)]}
        offset += _nbytes(shape)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


@dataclass(frozen=True)
class ShardTemplate:
    name: str
    head: bytes  # 8-byte length + JSON header (8-byte aligned, like the library writes it)
    data_len: int
    tensors: tuple[str, ...]


def export_template(shards: int = 30, model: ModelShape = LLAMA_70B) -> list[ShardTemplate]:
    """Tensors in module order, cut into `shards` contiguous groups of about equal bytes."""
    tensors = llama_tensors(model)
    total = sum(_nbytes(s) for _, s in tensors)
    groups: list[list[tuple[str, list[int]]]] = [[] for _ in range(shards)]
    cursor = 0
    for name, shape in tensors:  # by where the tensor's middle byte falls
        groups[min(shards - 1, (cursor + _nbytes(shape) // 2) * shards // total)].append((name, shape))
        cursor += _nbytes(shape)
    out = []
    for k, group in enumerate(groups, start=1):
        head, offset = bf16_shard_head(group)
        name = f"model-{k:05d}-of-{shards:05d}.safetensors"
        out.append(ShardTemplate(name, head, offset, tuple(t for t, _ in group)))
    return out


def llama70b_config() -> dict[str, Any]:
    return llama_config(LLAMA_70B)


def llama_config(shape: ModelShape = LLAMA_70B) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "bos_token_id": 128000,
        "eos_token_id": 128009,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "max_position_embeddings": 131072,
        "model_type": "llama",
        "num_attention_heads": shape.heads,
        "num_hidden_layers": shape.layers,
        "num_key_value_heads": shape.kv_heads,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "vocab_size": shape.vocab,
    }


def write_70b_export(dest: Path, template: list[ShardTemplate], shape: ModelShape = LLAMA_70B) -> None:
    """A whole HF export: real headers, data sections as sparse holes of the exact length."""
    dest.mkdir(parents=True, exist_ok=True)
    dump_json(dest / "config.json", llama_config(shape))
    write_tokenizer_files(dest)
    for shard in template:
        with (dest / shard.name).open("wb") as fh:
            fh.write(shard.head)
            fh.truncate(len(shard.head) + shard.data_len)
    weight_map = {t: s.name for s in template for t in s.tensors}
    index = {"metadata": {"total_size": sum(s.data_len for s in template)}, "weight_map": weight_map}
    dump_json(dest / "model.safetensors.index.json", index)


def write_fsdp_checkpoint(dest: Path, step: int, world: int, shape: ModelShape = LLAMA_70B) -> None:
    """The small generator's checkpoint dir, with each rank file extended (sparse) to its real share."""
    write_checkpoint_dir(dest, step, world_size=world)
    params = sum(math.prod(s) for _, s in llama_tensors(shape))
    sizes = {"model": params * BF16 // world, "optim": params * 8 // world}  # bf16 weights; fp32 Adam m and v
    for r in range(world):
        for kind, size in sizes.items():
            path = dest / "policy" / f"{kind}_world_size_{world}_rank_{r}.pt"
            os.truncate(path, max(size, path.stat().st_size))  # never cut the small generator's real bytes
