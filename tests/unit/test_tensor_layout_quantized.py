"""Quantized exports through the tensor-layout check (issue 44 item 8): the meta model is built as `from_pretrained`
builds it, with the quantizer `config.json`'s `quantization_config` names (transformers quantizers/auto.py
`get_hf_quantizer`, then `preprocess_model`). An FP8 export carrying `*.weight_scale_inv` (FineGrainedFP8: `fp8`,
`weight_block_size`) loads; one without its scales is missing them. A quantizer whose package is not installed here
(compressed-tensors, bitsandbytes, GPTQ, AWQ need compressed-tensors / accelerate + bitsandbytes / optimum /
gptqmodel) is named in the skip, never reported as a layout mismatch. transformers' quantizers read here: 5.25."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from test_tensor_layout import _validate

from rlcleanup.formats.checkpoints.tensor_layout import check_tensor_layout
from rlcleanup.samples.hf_export import model_config, shard_layout, write_hf_export, write_safetensors

NAMES = {name for shard in shard_layout() for name, _ in shard}
LINEARS = sorted(n for n in NAMES if n.endswith("_proj.weight"))  # 7 per layer, 2 layers
SCALES = {n.replace(".weight", ".weight_scale_inv") for n in LINEARS}
FP8 = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic", "fmt": "e4m3"}


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def test_an_fp8_export_with_its_scales_loads_and_one_without_them_does_not() -> None:
    config = model_config() | {"quantization_config": FP8}
    fp8 = check_tensor_layout(config, NAMES | SCALES)
    assert (fp8.checked, fp8.quantization, fp8.missing, fp8.unexpected, fp8.mismatch) == (True, "fp8", [], [], False)
    if not _installed("accelerate"):  # from_pretrained's FP8 environment check wants it; the layout does not
        assert fp8.notes == ["Loading an FP8 quantized model requires accelerate (`pip install accelerate`)"]
    unscaled = check_tensor_layout(config, NAMES)
    assert unscaled.missing == sorted(SCALES) and len(unscaled.missing) == 14 and unscaled.unexpected == []
    # Without the quantization_config the same scales have no place: what the check used to say of every FP8 export.
    plain = check_tensor_layout(model_config(), NAMES | SCALES)
    assert plain.unexpected == sorted(SCALES) and plain.quantization is None


def test_an_fp8_export_through_the_validator_is_valid(tmp_path: Path) -> None:
    policy = tmp_path / "exports" / "global_step_20" / "policy"
    write_hf_export(policy)
    (policy / "config.json").write_text(json.dumps(model_config() | {"quantization_config": FP8}))
    scales = "model-scales.safetensors"
    write_safetensors(policy / scales, [(name, [1, 1]) for name in sorted(SCALES)])
    index = json.loads((policy / "model.safetensors.index.json").read_text())
    index["weight_map"] |= dict.fromkeys(SCALES, scales)
    index["metadata"]["total_size"] += 2 * len(SCALES)
    (policy / "model.safetensors.index.json").write_text(json.dumps(index))
    candidate = _validate(tmp_path)
    assert not any(p.startswith("tensor_layout_mismatch") for p in candidate.problems), candidate.problems
    assert not any(w.startswith("tensor layout check skipped") for w in candidate.warnings)
    if not _installed("accelerate"):
        assert "tensor layout checked with the fp8 quantizer; Loading an FP8 quantized model requires accelerate" in (
            " ".join(candidate.warnings)
        )


# Each format transformers ships a loader for that can be built on CPU meta, with the packages its quantizer asks
# for (validate_environment / the config's post_init, read in transformers 5.25).
QUANTIZED: list[tuple[str, dict[str, Any], tuple[str, ...], str]] = [
    (
        "compressed-tensors",
        {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "quantization_status": "compressed",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
                }
            },
            "ignore": ["lm_head"],
        },
        ("compressed_tensors",),
        "compressed-tensors",
    ),
    (
        "bitsandbytes 4-bit",
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
        ("accelerate", "bitsandbytes"),
        "accelerate",
    ),
    (
        "bitsandbytes 8-bit",
        {"quant_method": "bitsandbytes", "load_in_8bit": True},
        ("accelerate", "bitsandbytes"),
        "accelerate",
    ),
    (
        "gptq",
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
        ("optimum",),
        "optimum",
    ),
    (
        "awq",
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
        ("gptqmodel",),
        "gptqmodel",
    ),
]


@pytest.mark.parametrize(("name", "quantization", "packages", "named"), QUANTIZED, ids=[q[0] for q in QUANTIZED])
def test_a_quantizer_without_its_package_is_named_never_a_mismatch(
    name: str, quantization: dict[str, Any], packages: tuple[str, ...], named: str
) -> None:
    report = check_tensor_layout(model_config() | {"quantization_config": quantization}, NAMES)
    assert report.quantization == quantization["quant_method"] and not report.mismatch
    if _installed(*packages):  # the quantizer builds its model: the names are checked against it
        assert report.checked, report.skipped_reason
        return
    assert not report.checked and (report.missing, report.unexpected) == ([], [])
    assert report.skipped_reason is not None and named in report.skipped_reason
    assert f"the {quantization['quant_method']} quantizer" in report.skipped_reason


def test_a_quant_method_transformers_does_not_know_loads_unquantized_as_from_pretrained_does() -> None:
    report = check_tensor_layout(model_config() | {"quantization_config": {"quant_method": "nonsense"}}, NAMES)
    assert (report.checked, report.quantization, report.missing, report.unexpected) == (True, None, [], [])
