"""Tiny llama-shaped Hugging Face exports with real safetensors shards, written by hand (no numpy, no torch)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

NUM_LAYERS = 2
HIDDEN = 64
VOCAB = 256
INTERMEDIATE = 176  # Σ params = 133,440 vs 12·L·H² + 2·V·H = 131,072 (+1.8%)
NUM_SHARDS = 3
_BF16_BYTES = 2
_TRANSFORMERS = "4.57.1"
_PT_METADATA = {"format": "pt"}  # transformers' save_pretrained

Shape = list[int]


def _layer(i: int) -> list[tuple[str, Shape]]:
    p = f"model.layers.{i}."
    h, inter = HIDDEN, INTERMEDIATE
    return [
        (p + "input_layernorm.weight", [h]),
        (p + "mlp.down_proj.weight", [h, inter]),
        (p + "mlp.gate_proj.weight", [inter, h]),
        (p + "mlp.up_proj.weight", [inter, h]),
        (p + "post_attention_layernorm.weight", [h]),
        (p + "self_attn.k_proj.weight", [h, h]),
        (p + "self_attn.o_proj.weight", [h, h]),
        (p + "self_attn.q_proj.weight", [h, h]),
        (p + "self_attn.v_proj.weight", [h, h]),
    ]


def shard_layout() -> list[list[tuple[str, Shape]]]:
    """Tensors per shard: embeddings + layer 0 | layer 1 | final norm + lm_head."""
    return [
        [("model.embed_tokens.weight", [VOCAB, HIDDEN]), *_layer(0)],
        _layer(1),
        [("lm_head.weight", [VOCAB, HIDDEN]), ("model.norm.weight", [HIDDEN])],
    ]


def shard_name(k: int) -> str:
    return f"model-{k:05d}-of-{NUM_SHARDS:05d}.safetensors"


def tensor_bytes(shape: Shape) -> int:
    return math.prod(shape) * _BF16_BYTES


def write_safetensors(
    path: Path, tensors: list[tuple[str, Shape]], metadata: dict[str, str] | None = _PT_METADATA
) -> int:
    """A safetensors file of zero BF16 tensors (`tensors`: name, shape), header padded to 8 bytes. `metadata` None
    leaves out `__metadata__`, as `safetensors.torch.save_file(tensors, path)` does (Megatron-Bridge's export)."""
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": dict(metadata)}
    offset = 0
    for name, shape in tensors:
        size = tensor_bytes(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


def model_config() -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": 4096,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 4,
        "num_hidden_layers": NUM_LAYERS,
        "num_key_value_heads": 4,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": _TRANSFORMERS,
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def _tokenizer_json() -> dict[str, Any]:
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for i in range(len(specials), VOCAB):
        vocab[f"t{i:03d}"] = i
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in enumerate(specials)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def _dump(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=False) + "\n")


def write_tokenizer_files(dest: Path) -> None:
    _dump(dest / "generation_config.json", {"bos_token_id": 1, "do_sample": True, "eos_token_id": 2})
    _dump(dest / "tokenizer.json", _tokenizer_json())
    _dump(
        dest / "tokenizer_config.json",
        {
            "add_bos_token": True,
            "add_eos_token": False,
            "bos_token": "<s>",
            "chat_template": "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}",
            "clean_up_tokenization_spaces": False,
            "eos_token": "</s>",
            "model_max_length": 4096,
            "pad_token": "</s>",
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": "<unk>",
        },
    )
    _dump(
        dest / "special_tokens_map.json",
        {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>"},
    )


def write_hf_export(dest: Path, breakage: str | None = None) -> None:
    """Write a full HF export into `dest` (the `policy/` dir).

    breakage: None | "missing_shard" (no shard 2) | "truncated_shard" (shard 3 cut short) |
    "index_total_size" (index records the parameter count instead of bytes).
    """
    dest.mkdir(parents=True, exist_ok=True)
    _dump(dest / "config.json", model_config())
    write_tokenizer_files(dest)
    weight_map: dict[str, str] = {}
    total = 0
    for k, tensors in enumerate(shard_layout(), start=1):
        name = shard_name(k)
        data_len = write_safetensors(dest / name, tensors)
        total += data_len
        weight_map.update({t: name for t, _ in tensors})
    if breakage == "missing_shard":
        (dest / shard_name(2)).unlink()
    elif breakage == "truncated_shard":
        path = dest / shard_name(3)
        path.write_bytes(path.read_bytes()[: -(tensor_bytes([VOCAB, HIDDEN]) // 2)])
    recorded = total // _BF16_BYTES if breakage == "index_total_size" else total
    _dump(
        dest / "model.safetensors.index.json",
        {"metadata": {"total_size": recorded}, "weight_map": dict(sorted(weight_map.items()))},
    )


def write_checkpoint_dir(dest: Path, step: int, world_size: int = 2, missing: tuple[str, ...] = ()) -> None:
    """A SkyRL FSDP2 checkpoint dir `global_step_<step>`; `missing` names files (relative) to leave out."""
    files: dict[str, bytes] = {
        "data.pt": _pt_placeholder(f"dataloader state at global_step {step}"),
        "trainer_state.pt": _pt_placeholder(f"trainer state global_step={step}"),
        "policy/fsdp_config.json": json.dumps({"fsdp_strategy": "fsdp2", "world_size": world_size}).encode(),
        "policy/huggingface/config.json": (json.dumps(model_config(), indent=2) + "\n").encode(),
    }
    for r in range(world_size):
        for kind in ("model", "optim", "extra_state"):
            name = f"policy/{kind}_world_size_{world_size}_rank_{r}.pt"
            files[name] = _pt_placeholder(f"{kind} shard rank {r}/{world_size} step {step}")
    for rel, data in files.items():
        if rel in missing:
            continue
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    hf = dest / "policy" / "huggingface"
    if hf.is_dir():
        write_tokenizer_files(hf)


def _pt_placeholder(what: str) -> bytes:
    return b"PK\x03\x04" + f"rlcleanup sample placeholder: {what}\n".encode()
