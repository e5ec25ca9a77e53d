"""A PEFT LoRA adapter export: `adapter_config.json` + `adapter_model.safetensors`, not a full model.

Upstream, as read:
- NovaSky-AI/SkyRL `skyrl/backends/skyrl_train/distributed/fsdp_strategy.py`@a956457 `_save_lora_adapters`: a LoRA
  run keeps `<ckpt>/policy/lora_adapter/{adapter_model.safetensors, adapter_config.json}`: the tensors of
  `fsdp_utils.layered_summon_lora_params` (PEFT's `get_peft_model_state_dict` per layer, so names like
  `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`) and `asdict(LoraConfig)` with `peft_type`,
  `task_type` as strings and `target_modules` as a list. `save_hf_model` of a PEFT model calls the PeftModel's
  `save_pretrained`, which writes the same two files at the top of the export dir (beside config.json and the
  tokenizer): the export of a LoRA run is the adapter (run-layout-v3.md §5).
- huggingface/peft `LoraConfig` / `PeftConfig.save_pretrained` (the config keys read here: `peft_type`,
  `base_model_name_or_path`, `r`, `lora_alpha`, `target_modules`, `rank_pattern`, `modules_to_save`, `bias`) and
  `get_peft_model_state_dict` (the adapter name removed from every key; `lora_A.weight` is `[r, in, ...]`,
  `lora_B.weight` is `[out, r, ...]`; `lora_embedding_A/B`, DoRA's `lora_magnitude_vector`; `modules_to_save`
  and, with `bias` other than `none`, `.bias` tensors saved whole).

Both places are accepted: the adapter files at the top of the export dir, or under its `lora_adapter/`. No tensor
byte is read: the one safetensors header gives the names, shapes and the parameter count.
"""

from __future__ import annotations

import re
from typing import Any

from rlcleanup.formats.checkpoints.base import (
    Findings,
    FormatKind,
    FormatReport,
    Listing,
    ReadOptions,
    read_listed_json,
)
from rlcleanup.formats.safetensors_header import CorruptHeaderError, SafetensorsHeader, read_header
from rlcleanup.models.vocab import CandidateKind
from rlcleanup.models.vocab import CandidateProblem as CP
from rlcleanup.ports.storage import Storage

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_PICKLE = "adapter_model.bin"  # older PEFT: a pickle, never loaded here
ADAPTER_SUBDIR = "lora_adapter"  # SkyRL's checkpoint-side folder
FULL_INDEX = "model.safetensors.index.json"
_LORA_PAIR = re.compile(r"^(?P<module>.+)\.lora_(?:embedding_)?(?P<half>[AB])(?:\.weight)?$")
_LORA_EXTRA = re.compile(r"\.lora_magnitude_vector(?:\.weight)?$")  # DoRA
PEFT_PREFIX = "base_model.model."
_SHOWN = 5


def adapter_prefix(listing: Listing) -> str | None:
    """Where the adapter files are ("" or "lora_adapter/"); None when this is no adapter-only export."""
    top = listing.top
    if FULL_INDEX in top or any(n.endswith(".safetensors") and n != ADAPTER_WEIGHTS for n in top):
        return None  # a full model's weights are here: an adapter beside them does not make it an adapter
    for prefix in ("", f"{ADAPTER_SUBDIR}/"):
        if any(f"{prefix}{name}" in listing.objects for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS)):
            return prefix
    return None


def _check_config(config: dict[str, Any], f: Findings) -> tuple[int | None, list[str] | None]:
    """(r when usable, target module names when a list) after adding the config's problems."""
    peft_type = config.get("peft_type")
    if peft_type is not None and str(peft_type).upper() != "LORA":
        f.add(CP.invalid_adapter_config, f"peft_type is {peft_type!r}: not a LoRA adapter")
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():
        f.add(CP.missing_base_model_reference, f"base_model_name_or_path is {base!r}: nothing says what it adapts")
    rank = config.get("r")
    usable_rank = rank if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0 else None
    if usable_rank is None:
        f.add(CP.invalid_adapter_config, f"r is {rank!r}, not a positive integer")
    alpha = config.get("lora_alpha")
    if not isinstance(alpha, int | float) or isinstance(alpha, bool):
        f.add(CP.invalid_adapter_config, f"lora_alpha is {alpha!r}, not a number")
    targets = config.get("target_modules")
    if isinstance(targets, list) and targets and all(isinstance(t, str) and t for t in targets):
        return usable_rank, targets
    if not (isinstance(targets, str) and targets):  # a string is a regex or "all-linear": not checked by name
        f.add(CP.invalid_adapter_config, f"target_modules is {targets!r}: no module to adapt")
    return usable_rank, None


def _check_tensors(
    header: SafetensorsHeader, config: dict[str, Any], rank: int | None, targets: list[str] | None, f: Findings
) -> None:
    """The names and shapes PEFT would load as this config's LoRA."""
    if not header.tensors:
        f.add(CP.missing_adapter_weights, f"{ADAPTER_WEIGHTS} holds no tensor")
        return
    whole_allowed = bool(config.get("modules_to_save"))
    bias_allowed = config.get("bias") not in (None, "none")
    halves: dict[str, dict[str, tuple[int, ...]]] = {}
    stray: list[str] = []
    for name, info in header.tensors.items():
        pair = _LORA_PAIR.match(name)
        if not name.startswith(PEFT_PREFIX):
            stray.append(name)
        elif pair:
            halves.setdefault(pair["module"], {})[pair["half"]] = info.shape
        elif not (_LORA_EXTRA.search(name) or whole_allowed or (bias_allowed and name.endswith(".bias"))):
            stray.append(name)
    if stray:
        f.add(
            CP.adapter_tensor_mismatch,
            f"{len(stray)} tensors are not PEFT LoRA tensors under {PEFT_PREFIX!r}: {sorted(stray)[:_SHOWN]}",
        )
    if not halves:
        f.add(CP.adapter_tensor_mismatch, f"{ADAPTER_WEIGHTS} holds no lora_A/lora_B tensor")
        return
    unpaired = sorted(m for m, h in halves.items() if len(h) != 2)
    if unpaired:
        f.add(CP.adapter_tensor_mismatch, f"{len(unpaired)} modules lack lora_A or lora_B: {unpaired[:_SHOWN]}")
    if rank is not None and not config.get("rank_pattern"):  # a rank_pattern gives some modules their own r
        off = sorted(m for m, h in halves.items() if not _rank_fits(h, rank))
        if off:
            f.add(CP.adapter_tensor_mismatch, f"{len(off)} modules are not of rank r={rank}: {off[:_SHOWN]}")
    if targets is not None:
        untargeted = sorted(m for m in halves if not any(m == t or m.endswith(f".{t}") for t in targets))
        if untargeted:
            f.add(
                CP.adapter_tensor_mismatch,
                f"{len(untargeted)} modules are not in target_modules {targets}: {untargeted[:_SHOWN]}",
            )


def _rank_fits(halves: dict[str, tuple[int, ...]], rank: int) -> bool:
    a, b = halves.get("A"), halves.get("B")
    return (a is None or (len(a) >= 2 and a[0] == rank)) and (b is None or (len(b) >= 2 and b[1] == rank))


class LoraAdapterExport:
    name = "peft-lora-adapter"
    kind = FormatKind.export
    strategies: tuple[str, ...] = ()

    def detect(self, listing: Listing) -> bool:
        return adapter_prefix(listing) is not None

    def digest_inputs(self, listing: Listing) -> Any:
        return listing.objects.items()  # every object of the export: what a publish copies

    def validate(
        self, storage: Storage, listing: Listing, step: int, f: Findings, options: ReadOptions
    ) -> FormatReport:
        prefix = adapter_prefix(listing) or ""
        objects = listing.objects
        config_name, weights_name = f"{prefix}{ADAPTER_CONFIG}", f"{prefix}{ADAPTER_WEIGHTS}"
        config: dict[str, Any] | None = None
        if config_name not in objects:
            f.add(CP.missing_adapter_config, f"no {config_name} in {listing.uri}")
        else:
            config, why = read_listed_json(storage, f"{listing.uri}/{config_name}", objects[config_name].size)
            if config is None:
                f.add(CP.missing_adapter_config, f"{config_name} is unreadable: {why}")
        rank, targets = _check_config(config, f) if config is not None else (None, None)
        report = FormatReport(candidate_kind=CandidateKind.adapter)
        if config is not None and isinstance(config.get("base_model_name_or_path"), str):
            report.base_model = config["base_model_name_or_path"].strip() or None
        if weights_name not in objects:
            pickle = (
                f" (only {prefix}{ADAPTER_PICKLE}, a pickle: not read)"
                if f"{prefix}{ADAPTER_PICKLE}" in objects
                else ""
            )
            f.add(CP.missing_adapter_weights, f"no {weights_name} in {listing.uri}{pickle}")
            return report
        report.shard_count = 1
        size = objects[weights_name].size
        try:
            header = read_header(storage, f"{listing.uri}/{weights_name}", size, options.first_block)
        except CorruptHeaderError as exc:
            f.add(CP.corrupt_header, f"{weights_name}: {exc.reason}")
            return report
        except FileNotFoundError:
            f.add(CP.missing_adapter_weights, f"{weights_name} was listed but vanished before its header was read")
            return report
        if size != header.expected_size:
            f.add(CP.truncated_shard, f"{weights_name} is {size} bytes; its header describes {header.expected_size}")
        report.parameter_count = header.parameter_count
        _check_tensors(header, config or {}, rank, targets, f)
        return report
