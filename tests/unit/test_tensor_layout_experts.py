"""Issue 34 item 6: a MoE export whose experts do not fit config.json reads invalid.

transformers 5 fuses per-expert tensors at load (conversion_mapping.py `qwen2_moe` / `mixtral`: `MergeModulelist(dim=0)`
over `mlp.experts.*.gate_proj.weight` ...), so every `<e>` renames to the same fused name and a names-only check passed
8 experts named against `num_experts: 4`, a missing expert, an expert without `up_proj`, and a fused
`mlp.experts.gate_up_proj` holding the wrong number of experts. Configs come from transformers' own config classes;
the export names follow upstream: the meta model's non-expert keys, plus the per-expert names the published
checkpoints carry (Qwen3-MoE and DeepSeek-V3 `mlp.experts.<e>.{gate,up,down}_proj.weight`, Mixtral
`block_sparse_moe.experts.<e>.w1/w2/w3.weight`) or the fused transformers 5 parameters with header shapes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from test_validate import make_layout  # the small RunLayout builder of the validator tests

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.checkpoints.tensor_layout import check_tensor_layout
from rlcleanup.samples.moe import write_moe_export
from rlcleanup.steps.validate import validate_candidate

H, FF, VOCAB = 64, 32, 256
# Each architecture's per-expert projection names, in fused gate_up order then down (upstream checkpoint naming).
PER_EXPERT = {
    "qwen3_moe": (
        "mlp.experts.{e}.gate_proj.weight",
        "mlp.experts.{e}.up_proj.weight",
        "mlp.experts.{e}.down_proj.weight",
    ),
    "mixtral": (
        "block_sparse_moe.experts.{e}.w1.weight",
        "block_sparse_moe.experts.{e}.w3.weight",
        "block_sparse_moe.experts.{e}.w2.weight",
    ),
    "deepseek_v3": (
        "mlp.experts.{e}.gate_proj.weight",
        "mlp.experts.{e}.up_proj.weight",
        "mlp.experts.{e}.down_proj.weight",
    ),
}


def config(model_type: str) -> dict[str, Any]:
    """A tiny 4-expert config from the real transformers config class (the key differs: num_experts,
    num_local_experts, n_routed_experts)."""
    import transformers

    common = {"vocab_size": VOCAB, "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": 4}
    common |= {"num_experts_per_tok": 2, "tie_word_embeddings": False}
    if model_type == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(
            **common, num_key_value_heads=2, head_dim=16, num_experts=4, moe_intermediate_size=FF, intermediate_size=128
        )
        arch = "Qwen3MoeForCausalLM"
    elif model_type == "mixtral":
        cfg = transformers.MixtralConfig(**common, num_key_value_heads=2, num_local_experts=4, intermediate_size=FF)
        arch = "MixtralForCausalLM"
    else:
        cfg = transformers.DeepseekV3Config(
            **common,
            num_key_value_heads=4,
            n_routed_experts=4,
            n_shared_experts=1,
            moe_intermediate_size=FF,
            intermediate_size=128,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            kv_lora_rank=16,
            q_lora_rank=32,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
        )
        arch = "DeepseekV3ForCausalLM"
    return cfg.to_dict() | {"architectures": [arch]}


@cache
def _meta_shapes(model_type: str) -> dict[str, list[int]]:
    """The meta model's own keys and shapes (transformers 5: fused `mlp.experts.gate_up_proj` / `down_proj`)."""
    import torch
    import transformers

    cfg = transformers.AutoConfig.for_model(**config(model_type))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return {name: list(t.shape) for name, t in model.state_dict().items()}


def export(
    model_type: str, *, fused: bool, experts: Sequence[int] = range(4), fused_experts: int = 4
) -> dict[str, list[int]]:
    """A 4-expert export's header names and shapes: per-expert names for `experts`, or fused tensors holding
    `fused_experts` experts."""
    out: dict[str, list[int]] = {}
    gate_up, down = PER_EXPERT[model_type][:2], PER_EXPERT[model_type][2]
    for name, shape in _meta_shapes(model_type).items():
        if not name.endswith((".experts.gate_up_proj", ".experts.down_proj")):
            out[name] = shape
        elif fused:
            out[name] = [fused_experts, *shape[1:]]
        else:
            layer = name[: name.index("mlp.experts.")]
            if name.endswith("gate_up_proj"):  # [E, 2 * ff, h]: each of gate and up is [ff, h]
                out |= {layer + p.format(e=e): [shape[1] // 2, shape[2]] for p in gate_up for e in experts}
            else:
                out |= {layer + down.format(e=e): shape[1:] for e in experts}
    return out


def _experts(model_type: str, tensors: dict[str, list[int]]) -> list[str]:
    report = check_tensor_layout(config(model_type), tensors)
    assert (report.checked, report.missing, report.unexpected) == (True, [], []), report
    return report.experts


@pytest.mark.parametrize("model_type", sorted(PER_EXPERT))
def test_a_whole_export_in_either_naming_has_no_expert_finding(model_type: str) -> None:
    assert _experts(model_type, export(model_type, fused=False)) == []
    assert _experts(model_type, export(model_type, fused=True)) == []


# (model type, the first MoE layer's prefix, gate_up source pattern as transformers' converter names it, down's)
MOE_LAYER = {
    "qwen3_moe": ("model.layers.0.mlp.experts.", "mlp.experts.*.gate_proj.weight", "mlp.experts.*.down_proj.weight"),
    "mixtral": ("model.layers.0.mlp.experts.", ".experts.*.w1.weight", ".experts.*.w2.weight"),
    "deepseek_v3": ("model.layers.1.mlp.experts.", "mlp.experts.*.gate_proj.weight", "mlp.experts.*.down_proj.weight"),
}


@pytest.mark.parametrize("model_type", sorted(PER_EXPERT))
def test_per_expert_indices_beyond_the_config_are_found(model_type: str) -> None:
    """8 experts named against a config declaring 4 (all projections, every MoE layer)."""
    prefix, gate_pattern, down_pattern = MOE_LAYER[model_type]
    found = _experts(model_type, export(model_type, fused=False, experts=range(8)))
    layers = 2 if model_type != "deepseek_v3" else 1  # DeepSeek-V3's first_k_dense_replace=1: layer 0 is dense
    assert len(found) == 3 * layers
    assert f"{prefix}down_proj from {down_pattern}: experts 4-7 outside the 4 config.json declares" in found
    assert f"{prefix}gate_up_proj from {gate_pattern}: experts 4-7 outside the 4 config.json declares" in found


@pytest.mark.parametrize("model_type", sorted(PER_EXPERT))
def test_an_index_below_zero_or_not_a_number_is_outside(model_type: str) -> None:
    prefix = MOE_LAYER[model_type][0]
    layer = prefix[: prefix.index("mlp.")]
    tensors = export(model_type, fused=False)
    name = layer + PER_EXPERT[model_type][0].format(e=3)
    assert name in tensors
    for bad in ("-1", "x"):
        shifted = dict(tensors)
        shifted[name.replace(".3.", f".{bad}.")] = shifted.pop(name)
        found = _experts(model_type, shifted)
        assert any(f"expert {bad} outside the 4 config.json declares" in f for f in found), found
        assert any(f.endswith("expert 3 of 4 missing") for f in found), found


@pytest.mark.parametrize("model_type", sorted(PER_EXPERT))
def test_a_missing_expert_and_a_missing_projection_are_found(model_type: str) -> None:
    prefix, _, down_pattern = MOE_LAYER[model_type]
    layers = 2 if model_type != "deepseek_v3" else 1
    gappy = _experts(model_type, export(model_type, fused=False, experts=range(3)))
    assert len(gappy) == 3 * layers and all(f.endswith("expert 3 of 4 missing") for f in gappy)
    assert f"{prefix}down_proj from {down_pattern}: expert 3 of 4 missing" in gappy
    # One expert of one layer without its up projection (Mixtral: w3): only that projection is reported.
    up = PER_EXPERT[model_type][1].format(e=2)
    tensors = export(model_type, fused=False)
    del tensors[prefix[: prefix.index("mlp.")] + up]
    (only,) = _experts(model_type, tensors)
    up_pattern = {"mixtral": ".experts.*.w3.weight"}.get(model_type, "mlp.experts.*.up_proj.weight")
    assert only == f"{prefix}gate_up_proj from {up_pattern}: expert 2 of 4 missing"
    # A projection named for no expert at all: beside its gate partner, every expert is missing; alone in its fused
    # target (down), the target itself is a missing key.
    per_expert = [re.compile(p.replace(".", r"\.").replace("{e}", r"\d+") + "$") for p in PER_EXPERT[model_type]]
    no_up = {n: s for n, s in export(model_type, fused=False).items() if not per_expert[1].search(n)}
    assert f"{prefix}gate_up_proj from {up_pattern}: experts 0-3 of 4 missing" in _experts(model_type, no_up)
    no_down = {n: s for n, s in export(model_type, fused=False).items() if not per_expert[2].search(n)}
    report = check_tensor_layout(config(model_type), no_down)
    assert f"{prefix}down_proj" in report.missing and report.mismatch


@pytest.mark.parametrize("model_type", sorted(PER_EXPERT))
@pytest.mark.parametrize("held", [2, 8])
def test_a_fused_experts_tensor_whose_expert_dim_disagrees_is_found(model_type: str, held: int) -> None:
    prefix = MOE_LAYER[model_type][0]
    tensors = export(model_type, fused=True, fused_experts=held)
    found = _experts(model_type, tensors)
    shape = tensors[prefix + "gate_up_proj"]
    assert shape[0] == held
    assert (
        f"{prefix}gate_up_proj has header shape {shape}, its leading dim is not the 4 experts config.json declares"
        in (found)
    )
    layers = 2 if model_type != "deepseek_v3" else 1
    assert len(found) == 2 * layers
    # Names alone (no shapes given) cannot tell: the expert dims are then unchecked, never guessed.
    assert check_tensor_layout(config(model_type), set(tensors)).experts == []


def test_a_router_with_more_rows_than_experts_is_found() -> None:
    tensors = export("qwen3_moe", fused=False)
    tensors["model.layers.1.mlp.gate.weight"] = [8, H]
    assert _experts("qwen3_moe", tensors) == [
        "model.layers.1.mlp.gate.weight has header shape [8, 64], its leading dim is not the 4 experts config.json "
        "declares"
    ]


def test_many_missing_experts_are_summarised_as_spans() -> None:
    tensors = export("qwen3_moe", fused=False, experts=(2,))
    found = _experts("qwen3_moe", tensors)
    assert (
        found[0]
        == "model.layers.0.mlp.experts.down_proj from mlp.experts.*.down_proj.weight: experts 0-1, 3 of 4 missing"
    )


def test_an_export_with_too_many_experts_is_an_invalid_candidate(tmp_path: Path) -> None:
    """Through the validator, from a written safetensors header: tensor_layout_mismatch with the expert detail."""
    policy = tmp_path / "exports" / "global_step_20" / "policy"
    write_moe_export(policy, fused=False, experts_named=8)
    layout = make_layout(tmp_path, marker=20)
    candidate = validate_candidate(LocalStorage(checksums=False), layout, 20, metric_steps=None, step_budget=None)
    (problem,) = [p for p in candidate.problems if p.startswith("tensor_layout_mismatch")]
    assert problem.startswith(
        "tensor_layout_mismatch: Qwen3MoeForCausalLM from config.json would load with 8 expert count mismatches with "
        "config.json, first: model.layers.0.mlp.experts.down_proj from mlp.experts.*.down_proj.weight: experts 4-7 "
        "outside the 4 config.json declares"
    ), problem
