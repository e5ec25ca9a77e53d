"""The PEFT LoRA adapter export (formats/checkpoints/lora_adapter.py): an adapter is its own candidate kind,
validated by its config, its base model reference and its tensors, never read as a broken full model.

Fixtures follow upstream: SkyRL `_save_lora_adapters` (`safetensors.torch.save_file` of PEFT's state dict, names
`base_model.model.model.layers.<i>.self_attn.<m>.lora_A.weight`, and `asdict(LoraConfig)`), written here with the
real `safetensors` writer; both places upstream keeps the files (the export dir's top, or `lora_adapter/`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy as stn
from test_validate import make_layout  # the small RunLayout builder of the validator tests

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.checkpoints.base import Findings, ReadOptions, list_dir
from rlcleanup.formats.checkpoints.registry import BUILTIN
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import CandidateKind, CandidateState, problem_code
from rlcleanup.report.verdict import build_verdict
from rlcleanup.samples.exports_v3 import adapter_config
from rlcleanup.steps.validate import validate_candidate

RANK, IN, OUT = 4, 16, 16
MODULES = ("q_proj", "v_proj")
PER_MODULE = RANK * IN + OUT * RANK  # lora_A [r, in] + lora_B [out, r]


def adapter_tensors(layers: int = 2, rank: int = RANK, modules: tuple[str, ...] = MODULES) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for layer in range(layers):
        for module in modules:
            name = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            out[f"{name}.lora_A.weight"] = np.zeros((rank, IN), np.float32)
            out[f"{name}.lora_B.weight"] = np.zeros((OUT, rank), np.float32)
    return out


def config(**changes: Any) -> dict[str, Any]:
    cfg = adapter_config("Qwen/Qwen2.5-0.5B-Instruct") | {"r": RANK, "target_modules": list(MODULES)}
    return {k: v for k, v in (cfg | changes).items() if v is not _DROP}


_DROP = object()


def write_adapter(
    root: Path,
    step: int = 10,
    *,
    where: str = "",
    tensors: dict[str, np.ndarray] | None = None,
    cfg: dict[str, Any] | None = None,
    with_config: bool = True,
    with_weights: bool = True,
) -> Path:
    policy = root / "exports" / f"global_step_{step}" / "policy"
    adapter = policy / where if where else policy
    adapter.mkdir(parents=True, exist_ok=True)
    if with_weights:
        stn.save_file(adapter_tensors() if tensors is None else tensors, str(adapter / "adapter_model.safetensors"))
    if with_config:
        (adapter / "adapter_config.json").write_text(json.dumps(config() if cfg is None else cfg, indent=4))
    (policy / "tokenizer.json").write_text("{}")
    return policy


def validate(root: Path, step: int = 10) -> Any:
    layout = make_layout(root, marker=step)
    return validate_candidate(LocalStorage(checksums=True), layout, step, metric_steps=None, step_budget=None)


@pytest.mark.parametrize("where", ["", "lora_adapter"])
def test_an_adapter_is_its_own_valid_candidate_counted_from_its_tensors(tmp_path: Path, where: str) -> None:
    write_adapter(tmp_path, where=where)
    c = validate(tmp_path)
    assert (c.state, c.valid, c.kind, c.format, c.problems) == (
        CandidateState.valid,
        True,
        CandidateKind.adapter,
        "peft-lora-adapter",
        [],
    )
    assert c.parameter_count == 2 * len(MODULES) * PER_MODULE and c.shard_count == 1
    assert c.base_model == "Qwen/Qwen2.5-0.5B-Instruct" and c.size_label == "512"
    assert c.digest is not None  # a grant can pin it like any export


def test_before_the_adapter_format_it_read_as_a_broken_full_model(tmp_path: Path) -> None:
    """The failure issue 34 reported: the HF format alone calls the adapter a model without its index."""
    policy = write_adapter(tmp_path)
    storage = LocalStorage()
    f = Findings()
    BUILTIN.get("hf-safetensors").validate(storage, list_dir(storage, str(policy)), 10, f, ReadOptions())
    assert "missing_index" in {problem_code(p) for p in f.problems}
    assert validate(tmp_path).problems == []  # the registry now detects the adapter first


def test_a_full_export_with_an_adapter_beside_it_is_still_a_full_model(tmp_path: Path) -> None:
    policy = write_adapter(tmp_path, where="lora_adapter")
    stn.save_file({"lm_head.weight": np.zeros((4, 4), np.float32)}, str(policy / "model.safetensors"))
    (policy / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    c = validate(tmp_path)
    assert (c.kind, c.format) == (CandidateKind.full, "hf-safetensors")


BROKEN: dict[str, tuple[dict[str, Any], str]] = {
    "no config": ({"with_config": False}, "missing_adapter_config"),
    "unreadable config": ({"cfg": "not json"}, "missing_adapter_config"),
    "no base model": ({"cfg": config(base_model_name_or_path=_DROP)}, "missing_base_model_reference"),
    "empty base model": ({"cfg": config(base_model_name_or_path="  ")}, "missing_base_model_reference"),
    "no rank": ({"cfg": config(r=0)}, "invalid_adapter_config"),
    "no alpha": ({"cfg": config(lora_alpha="16")}, "invalid_adapter_config"),
    "no targets": ({"cfg": config(target_modules=[])}, "invalid_adapter_config"),
    "not lora": ({"cfg": config(peft_type="IA3")}, "invalid_adapter_config"),
    "no weights": ({"with_weights": False}, "missing_adapter_weights"),
    "empty weights": ({"tensors": {}}, "missing_adapter_weights"),
    "lora_B missing": (
        {"tensors": {k: v for k, v in adapter_tensors().items() if "layers.1.self_attn.v_proj.lora_B" not in k}},
        "adapter_tensor_mismatch",
    ),
    "other rank": ({"tensors": adapter_tensors(rank=8)}, "adapter_tensor_mismatch"),
    "untargeted module": ({"tensors": adapter_tensors(modules=("q_proj", "k_proj"))}, "adapter_tensor_mismatch"),
    "full model tensors": ({"tensors": {"model.layers.0.w": np.zeros((2, 2), np.float32)}}, "adapter_tensor_mismatch"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_adapter_is_invalid_with_its_own_problem(tmp_path: Path, case: str) -> None:
    kwargs, code = BROKEN[case]
    if kwargs.get("cfg") == "not json":
        write_adapter(tmp_path, with_config=False)
        (tmp_path / "exports" / "global_step_10" / "policy" / "adapter_config.json").write_text("{r: 4")
    else:
        write_adapter(tmp_path, **kwargs)
    c = validate(tmp_path)
    assert (c.state, c.valid, c.kind) == (CandidateState.invalid, False, CandidateKind.adapter)
    assert code in c.problem_codes, c.problems


def test_a_rank_pattern_or_whole_modules_to_save_are_peft_adapters_too(tmp_path: Path) -> None:
    tensors = adapter_tensors(rank=8) | {"base_model.model.lm_head.weight": np.zeros((4, 4), np.float32)}
    write_adapter(
        tmp_path, tensors=tensors, cfg=config(rank_pattern={"q_proj": 8, "v_proj": 8}, modules_to_save=["lm_head"])
    )
    assert validate(tmp_path).problems == []


def test_a_truncated_adapter_is_invalid(tmp_path: Path) -> None:
    policy = write_adapter(tmp_path)
    weights = policy / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    assert "truncated_shard" in validate(tmp_path).problem_codes


def test_the_verdict_says_an_adapter_runs_candidates_are_adapters(tmp_path: Path) -> None:
    """Issue 44 item 8: a LoRA run's one-line verdict read like a full-model run's; it now says its candidates are
    adapters, and of which base (a mixed run says how many)."""
    write_adapter(tmp_path)
    adapter = validate(tmp_path)
    record = CompletionRecord(run_id="lora-run", run_uri=str(tmp_path), candidates=[adapter])
    parts = {p.key: p.text for p in build_verdict(record).parts}
    assert parts["adapters"] == "candidates are LoRA adapters of Qwen/Qwen2.5-0.5B-Instruct, not full models"
    full = adapter.model_copy(update={"step": 20, "kind": CandidateKind.full, "base_model": None})
    mixed = {p.key: p.text for p in build_verdict(record.model_copy(update={"candidates": [adapter, full]})).parts}
    assert mixed["adapters"] == "1 of 2 candidates are LoRA adapters of Qwen/Qwen2.5-0.5B-Instruct"
    only_full = record.model_copy(update={"candidates": [full]})
    assert "adapters" not in {p.key for p in build_verdict(only_full).parts}
