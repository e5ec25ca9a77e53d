"""run-layout-v3 export shapes on top of a standard Layout A sample: deferred HF exports and a LoRA run.

`deferred-export` follows MarinSkyRL's deferred export (skyrl-train `hf_export.py` / `hf_export_schema.py`,
`cloud/iris/export_hf_checkpoint.py`@05cb3a6, `cloud/iris/terminal_policy.py`@0f25366): training writes
`hf_export_request.json` beside each checkpoint and converts nothing; an export job per request converts it later,
setting the request `in_progress` (attempts + 1), then `complete` on exit 0 or back to `pending` with its exit code.
Retention keeps checkpoints whose export is not complete. Here, at the run's end:
- step 5: exported (its checkpoint rotated away with its completed request): a valid export;
- step 10: the export job failed twice (`pending`, attempts 2, last exit code 1): convertible;
- step 15: an export job killed after one shard (`in_progress`, attempts 1, a `.tmp-hf-export-*` staging dir with
  `model-00001-of-00003.safetensors` only, as SkyRL's `_atomic_local_export_dir` leaves it): partial;
- step 20 (the marker): the terminal policy export never ran (`pending`, attempts 0, a Hub destination): convertible.

`lora` is a LoRA run (NovaSky-AI/SkyRL `fsdp_strategy.py`@a956457): each checkpoint keeps
`policy/lora_adapter/{adapter_model.safetensors, adapter_config.json}` and each export is the PEFT adapter
(`save_pretrained` of the PeftModel: the two adapter files, then the model's config.json and the tokenizer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlcleanup.samples.configs import BASE_MODEL
from rlcleanup.samples.hf_export import (
    HIDDEN,
    NUM_LAYERS,
    model_config,
    shard_layout,
    shard_name,
    write_checkpoint_dir,
    write_safetensors,
    write_tokenizer_files,
)

SCENARIOS_EXPORTS_V3: dict[str, str] = {
    "deferred-export": "deferred HF exports: export 5 made; 10 failed twice (convertible); 15 died after one shard "
    "(partial, .tmp-hf-export-*); 20 never ran (convertible, Hub destination)",
    "lora": "LoRA run (r=8, q/k/v/o_proj): checkpoints keep policy/lora_adapter/, exports 5..20 are PEFT adapters",
}
DEFERRED_DROPPED = (10, 15, 20)  # steps whose export the training run never wrote (the generator drops them)
LORA_STEPS = (5, 10, 15, 20)
LORA_RANK = 8
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
HUB_REPO = "marin-community/math-rl-qwen-deferred"
_REQUESTS = {  # step -> (status, attempts, last exit code)
    10: ("pending", 2, 1),
    15: ("in_progress", 1, None),
    20: ("pending", 0, None),
}


def _dump(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def export_request(
    step: int,
    ckpt_root: Path,
    export_root: Path,
    status: str,
    attempts: int,
    exit_code: int | None,
    *,
    hub_repo: str | None = None,
) -> dict[str, Any]:
    """A request as the newest upstream schema writes it (`timeout`, model source fields, sorted keys)."""
    return {
        "attempts": attempts,
        "checkpoint_base_path": str(ckpt_root),
        "checkpoint_path": str(ckpt_root / f"global_step_{step}"),
        "export_path": str(export_root),
        "gpus_per_node": 2,
        "hf_hub_private": True,
        "hf_hub_repo_id": hub_repo,
        "hf_hub_revision": "main",
        "hf_upload_mode": "latest",
        "last_exit_code": exit_code,
        "model_path": BASE_MODEL,
        "model_source_identity": None,
        "model_source_uri": None,
        "num_nodes": 1,
        "schema_version": 1,
        "status": status,
        "step": step,
        "timeout": 7200 if attempts else None,
    }


def finish_deferred(durable: Path, temp: Path) -> None:
    ckpt_root, export_root = temp / "checkpoints", durable / "exports"
    write_checkpoint_dir(ckpt_root / "global_step_10", 10)  # retention keeps it: its export is still owed
    for step, (status, attempts, exit_code) in _REQUESTS.items():
        hub = HUB_REPO if step == max(_REQUESTS) else None
        request = export_request(step, ckpt_root, export_root, status, attempts, exit_code, hub_repo=hub)
        _dump(ckpt_root / f"global_step_{step}" / "hf_export_request.json", request)
    staging = export_root / "global_step_15" / ".tmp-hf-export-k3j9x2"
    staging.mkdir(parents=True, exist_ok=True)
    write_safetensors(staging / shard_name(1), shard_layout()[0])  # killed before shard 2 and config.json


def lora_tensors(rank: int = LORA_RANK) -> list[tuple[str, list[int]]]:
    """PEFT's saved names for a LoRA on q/k/v/o_proj of the tiny llama: lora_A [r, in], lora_B [out, r]."""
    tensors: list[tuple[str, list[int]]] = []
    for layer in range(NUM_LAYERS):
        for module in LORA_TARGETS:
            name = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors += [(f"{name}.lora_A.weight", [rank, HIDDEN]), (f"{name}.lora_B.weight", [HIDDEN, rank])]
    return tensors


def adapter_config(base_model: str | None = BASE_MODEL) -> dict[str, Any]:
    """`asdict(LoraConfig)` as SkyRL's `_save_lora_adapters` dumps it (enums as strings, target_modules a list)."""
    return {
        "alpha_pattern": {},
        "auto_mapping": None,
        "base_model_name_or_path": base_model,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": False,
        "init_lora_weights": True,
        "layers_pattern": None,
        "layers_to_transform": None,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": LORA_RANK,
        "rank_pattern": {},
        "revision": None,
        "target_modules": list(LORA_TARGETS),
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
    }


def write_adapter(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    write_safetensors(dest / "adapter_model.safetensors", lora_tensors())
    _dump(dest / "adapter_config.json", adapter_config())


def finish_lora(durable: Path, temp: Path) -> None:
    for step in LORA_STEPS:
        policy = durable / "exports" / f"global_step_{step}" / "policy"
        write_adapter(policy)
        _dump(policy / "config.json", model_config())
        write_tokenizer_files(policy)
        (policy / "README.md").write_text(f"---\nbase_model: {BASE_MODEL}\nlibrary_name: peft\n---\n")
    for ckpt in sorted((temp / "checkpoints").glob("global_step_*")):
        write_adapter(ckpt / "policy" / "lora_adapter")
    config_path = durable / "resolved-skyrl.json"
    config = json.loads(config_path.read_text())
    config["trainer"]["policy"]["model"]["lora"] = {"rank": LORA_RANK, "alpha": 16, "dropout": 0.0}
    config["trainer"]["policy"]["model"]["lora"] |= {"target_modules": list(LORA_TARGETS)}
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def finish_exports_v3(scenario: str, durable: Path, temp: Path) -> None:
    """Turn the standard sample written for `scenario` into its v3 export shape."""
    if scenario == "deferred-export":
        finish_deferred(durable, temp)
    elif scenario == "lora":
        finish_lora(durable, temp)
    else:
        raise ValueError(f"{scenario!r} is not an export scenario ({', '.join(SCENARIOS_EXPORTS_V3)})")
