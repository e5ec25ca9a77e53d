"""A tiny Qwen3-MoE export for the sample runs (split from samples/v2.py): its config, its tensors per expert or
fused, written as one safetensors file whose header is real and whose data is zeros."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlcleanup.samples.v2_common import dump_json

MOE_LAYERS, MOE_EXPERTS, MOE_HIDDEN, MOE_FF, MOE_VOCAB, MOE_HEADS, MOE_KV, MOE_HEAD_DIM = 2, 4, 64, 32, 256, 4, 2, 16


def moe_config() -> dict[str, Any]:
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": MOE_HIDDEN,
        "intermediate_size": 128,
        "moe_intermediate_size": MOE_FF,
        "num_hidden_layers": MOE_LAYERS,
        "num_attention_heads": MOE_HEADS,
        "num_key_value_heads": MOE_KV,
        "head_dim": MOE_HEAD_DIM,
        "num_experts": MOE_EXPERTS,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": MOE_VOCAB,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def moe_tensors(fused: bool, experts_named: int = MOE_EXPERTS) -> dict[str, list[int]]:
    """Per-expert names as Qwen3-MoE checkpoints are published, or a fused w1/w2/w3 layout nothing loads.
    `experts_named` other than the config's 4: an export of a model trained with another expert count (its router
    and its per-expert names say so; the names alone load, transformers 5 fuses them whatever the index)."""
    h, q, kv = MOE_HIDDEN, MOE_HEADS * MOE_HEAD_DIM, MOE_KV * MOE_HEAD_DIM
    out: dict[str, list[int]] = {"model.embed_tokens.weight": [MOE_VOCAB, h], "model.norm.weight": [h]}
    out["lm_head.weight"] = [MOE_VOCAB, h]
    for layer in range(MOE_LAYERS):
        p = f"model.layers.{layer}."
        out |= {p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]}
        out |= {p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h]}
        out |= {p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q]}
        out |= {p + "self_attn.q_norm.weight": [MOE_HEAD_DIM], p + "self_attn.k_norm.weight": [MOE_HEAD_DIM]}
        out[p + "mlp.gate.weight"] = [experts_named, h]
        if fused:
            out |= {
                p + "mlp.moe.experts.w1": [MOE_EXPERTS, MOE_FF, h],
                p + "mlp.moe.experts.w3": [MOE_EXPERTS, MOE_FF, h],
            }
            out[p + "mlp.moe.experts.w2"] = [MOE_EXPERTS, h, MOE_FF]
        else:
            for e in range(experts_named):
                out[f"{p}mlp.experts.{e}.gate_proj.weight"] = [MOE_FF, h]
                out[f"{p}mlp.experts.{e}.up_proj.weight"] = [MOE_FF, h]
                out[f"{p}mlp.experts.{e}.down_proj.weight"] = [h, MOE_FF]
    return out


def write_moe_export(dest: Path, *, fused: bool, experts_named: int = MOE_EXPERTS) -> None:
    """One model.safetensors (BF16, zero data) plus config and tokenizer files."""
    from rlcleanup.samples.hf_export import write_tokenizer_files

    dest.mkdir(parents=True, exist_ok=True)
    dump_json(dest / "config.json", moe_config())
    write_tokenizer_files(dest)
    header: dict[str, Any] = {}
    offset = 0
    for name, shape in sorted(moe_tensors(fused, experts_named).items()):
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    (dest / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(offset))
