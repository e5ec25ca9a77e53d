"""Will an export's tensors load into the architecture its config.json declares? Decided by transformers' own
loading rules, never a hand-written table, and without reading a tensor byte (issue 14 item 9).

The model class named by `config.json` `architectures` is instantiated on the meta device from the config; each
header tensor name goes through the key conversions transformers' loader applies itself
(`conversion_mapping.get_model_conversion_mapping` + `core_model_loading.rename_source_key`, as
`convert_and_load_state_dict_in_model` does), then tied weights and the class's ignore patterns are applied as
`_finalize_model_loading` does. What remains are the missing / unexpected keys `from_pretrained` would report.
transformers 5 fuses per-expert MoE weights at load (`mlp.experts.<e>.gate_proj.weight` -> `mlp.experts.gate_up_proj`),
so per-expert Qwen3-MoE exports load with no missing or unexpected keys, while fused `mlp.moe.experts.w1/w2/w3`
tensors load in neither transformers nor vLLM.

Optional for a deployment: transformers (and torch) are imported lazily here only (the `layout-check` extra; the
dev env installs it with the CPU torch build); without them the check is recorded as skipped. Cost
(bench/bench_tensor_layout.py, torch 2.13 CPU, transformers 5.24, CPU time): the first candidate of a process ~5 s
(the torch + transformers import and the meta model) and ~350 MB peak RSS; every further candidate with the same
config.json reuses the cached meta model, <= 0.2 s even for 18,867 per-expert names. Nothing scales with tensor bytes:
meta tensors have no storage, and only header names are read.
"""

from __future__ import annotations

import json
import re
import threading
import time
import tracemalloc
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

MAX_NAMES_SHOWN = 5


@dataclass
class LayoutReport:
    checked: bool
    architecture: str | None = None
    missing: list[str] = field(default_factory=list)  # model keys no export tensor fills
    unexpected: list[str] = field(default_factory=list)  # export tensors the model has no place for
    skipped_reason: str | None = None
    seconds: float = 0.0
    peak_bytes: int = 0

    @property
    def mismatch(self) -> bool:
        return self.checked and bool(self.missing or self.unexpected)

    def detail(self) -> str:
        def first(names: list[str]) -> str:
            more = f" (+{len(names) - MAX_NAMES_SHOWN} more)" if len(names) > MAX_NAMES_SHOWN else ""
            return ", ".join(names[:MAX_NAMES_SHOWN]) + more

        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} missing, first: {first(self.missing)}")
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} unexpected, first: {first(self.unexpected)}")
        return f"{self.architecture} from config.json would load with " + "; ".join(parts)


class _Unavailable(Exception):
    pass


# One verdict at a time per process: candidates validated together (steps/validate.validate_many) would otherwise
# each build the same meta model (lru_cache does not wait for a computation in flight), and concurrent first
# imports of transformers' lazy module race: one thread saw no `AutoModelForCausalLM` and skipped the check.
_VERDICT_LOCK = threading.Lock()


@lru_cache(maxsize=8)
def _meta_model(config_json: str) -> tuple[Any, Any, list[Any], list[Any], str]:
    """(model, meta state dict, renamings, converters, architecture) for one config; cached: configs repeat."""
    try:
        import torch
        import transformers
        from transformers import AutoConfig
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming
    except ImportError as exc:  # the optional extra is not installed (or does not import beside our pins)
        raise _Unavailable(f"transformers/torch not installed or not importable ({str(exc)[:160]})") from exc
    config = json.loads(config_json)
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise _Unavailable("config.json has no model_type")
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    cls = getattr(transformers, arch, None) if arch else None
    try:
        cfg = AutoConfig.for_model(**config)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _Unavailable(f"transformers cannot read a {model_type} config from config.json: {exc}") from exc
    built_as = arch
    try:
        with torch.device("meta"):
            model = cls(cfg) if cls is not None else transformers.AutoModelForCausalLM.from_config(cfg)
    except (ValueError, KeyError, TypeError, AttributeError) as declared_failed:
        # The declared class does not fit the config's model_type (e.g. `Qwen3MoeForCausalLM` over a dense `qwen3`
        # config, whose meta model declares no experts). AutoModelForCausalLM.from_pretrained picks the class by the
        # config's type, not by `architectures` (transformers models/auto/auto_factory.py), so the names are checked
        # against what it would build; a skip here would have read an export that loads nowhere as valid.
        try:
            fresh = AutoConfig.for_model(**config)  # the failed build set attributes on `cfg` (its experts backend)
            with torch.device("meta"):
                model = transformers.AutoModelForCausalLM.from_config(fresh)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _Unavailable(
                f"transformers cannot build {arch or model_type} from config.json: {declared_failed}"
            ) from exc
        built_as = f"{arch} (not buildable from model_type {model_type!r}; loaded as {type(model).__name__})"
    mapping = get_model_conversion_mapping(model)
    renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
    converters = [m for m in mapping if isinstance(m, WeightConverter)]
    return model, model.state_dict(), renamings, converters, built_as or type(model).__name__


@lru_cache(maxsize=4)
def _verdict(config_json: str, tensor_names: frozenset[str]) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(architecture, missing, unexpected) for one config and one set of header names. Cached: a run's candidates
    share their architecture, so every export after the first costs one set comparison instead of renaming each
    name again and walking the meta model (~10 ms per 70B candidate, bench/bench_validate_many.py). A few entries
    only: a set of 18,867 names is ~2 MB."""
    model, meta, renamings, converters, arch = _meta_model(config_json)
    from transformers.core_model_loading import rename_source_key

    prefix = model.base_model_prefix
    found: set[str] = set()
    unexpected: list[str] = []
    for key in sorted(tensor_names):
        renamed, _ = rename_source_key(key, renamings, converters, prefix, meta)
        if renamed not in meta and key in meta:  # as the loader: maybe only the prefix was needed
            renamed, _ = rename_source_key(key, [], [], prefix, meta)
        if renamed in meta:
            found.add(renamed)
        else:
            unexpected.append(key)
    missing = set(meta) - found
    # Tied weights: either side present ties the other (PreTrainedModel.tie_weights during from_pretrained).
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if target in missing and source not in missing:
            missing.discard(target)
        elif source in missing and target not in missing:
            missing.discard(source)
    # The class's own ignore rules (_adjust_missing_and_unexpected_keys).
    ignore_missing = getattr(model, "_keys_to_ignore_on_load_missing", None) or []
    ignore_unexpected = list(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])
    if any(name.endswith("rotary_emb.inv_freq") for name, _ in model.named_buffers()):
        ignore_unexpected.append(r"rotary_emb\.inv_freq")
    if ignore_missing:
        rx = re.compile("|".join(f"({p})" for p in ignore_missing))
        missing = {k for k in missing if rx.search(k) is None}
    if ignore_unexpected:
        rx = re.compile("|".join(f"({p})" for p in ignore_unexpected))
        unexpected = [k for k in unexpected if rx.search(k) is None]
    return arch, tuple(sorted(missing)), tuple(unexpected)


def check_tensor_layout(config: dict[str, Any], tensor_names: set[str], *, trace_memory: bool = False) -> LayoutReport:
    """`trace_memory` measures peak Python allocations (tracemalloc slows the import a lot: measurement only)."""
    started = time.perf_counter()
    tracing = trace_memory and not tracemalloc.is_tracing()
    if tracing:
        tracemalloc.start()
    try:
        try:
            config_json, names = json.dumps(config, sort_keys=True), frozenset(tensor_names)
            with _VERDICT_LOCK:
                arch, missing, unexpected = _verdict(config_json, names)
        except _Unavailable as exc:
            return LayoutReport(checked=False, skipped_reason=str(exc))
        report = LayoutReport(checked=True, architecture=arch, missing=list(missing), unexpected=list(unexpected))
    finally:
        peak = tracemalloc.get_traced_memory()[1] if tracing else 0
        if tracing:
            tracemalloc.stop()
    report.seconds = round(time.perf_counter() - started, 3)
    report.peak_bytes = peak
    return report
