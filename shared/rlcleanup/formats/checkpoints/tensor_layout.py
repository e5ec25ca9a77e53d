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

Names alone do not say whether the experts fit: every `mlp.experts.<e>.gate_proj.weight` renames to the one fused
`mlp.experts.gate_up_proj` whatever `<e>` is, so 8 experts named against `num_experts: 4`, a missing expert or an
expert without its `up_proj` would pass a names-only check (and then fail in `from_pretrained` with a size mismatch,
or load the wrong expert into a slot). So the experts are counted against the meta model, whose parameters the config
sized (transformers 5: `Qwen3MoeExperts.gate_up_proj` is `[num_experts, 2 * moe_intermediate_size, hidden]`,
models/qwen3_moe/modeling_qwen3_moe.py; Mixtral's `num_local_experts`, DeepSeek-V3's `n_routed_experts` alike;
per-expert names stack along `MergeModulelist.dim` per conversion_mapping.py `qwen2_moe` / `mixtral`, upstream
huggingface/transformers conversion_mapping.py @44bcb9df, read in the installed 5.25):
- per-expert names stacked by a `MergeModulelist` converter: for each fused target and each source pattern
  (`mlp.experts.*.gate_proj.weight`, `...up_proj...`), the `*` indices must be exactly 0..E-1, E the target's size
  along the stacking dim; indices outside, and indices missing per projection, are reported;
- a tensor named straight onto an experts parameter (an export already in the fused `mlp.experts.gate_up_proj`
  layout, or a router `mlp.gate.weight`): its header shape's leading dim must be the `num_experts` of the module
  that owns the parameter. Shapes come from the safetensors headers; no tensor byte is read.
transformers 4.x models kept `nn.ModuleList` experts (huggingface/transformers
src/transformers/models/qwen3_moe/modeling_qwen3_moe.py @00d4b3d2): there the meta names enumerate the experts, so the
missing / unexpected comparison alone already catches them.

Optional for a deployment: transformers (and torch) are imported lazily here only (the `layout-check` extra; the
dev env installs it with the CPU torch build); without them the check is recorded as skipped. Cost
(bench/bench_tensor_layout.py, torch 2.13 CPU, transformers 5.24, CPU time): the first candidate of a process ~5 s
(the torch + transformers import and the meta model) and ~350 MB peak RSS; every further candidate with the same
config.json reuses the cached meta model: ~0.25 s CPU for 18,867 per-expert names (0.12 s before experts were
counted), and the cached verdict after that; a later process with the same config and names reads the verdict kept
on disk (layout_verdicts.py) and imports neither. Nothing scales with tensor bytes: meta tensors have no storage, and only
header names and shapes are read.
"""

from __future__ import annotations

import json
import re
import threading
import time
import tracemalloc
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from rlcleanup.formats.checkpoints.layout_verdicts import keep_verdict, load_verdict, verdict_key

MAX_NAMES_SHOWN = 5


@dataclass
class LayoutReport:
    checked: bool
    architecture: str | None = None
    missing: list[str] = field(default_factory=list)  # model keys no export tensor fills
    unexpected: list[str] = field(default_factory=list)  # export tensors the model has no place for
    experts: list[str] = field(default_factory=list)  # expert indices / expert dims that disagree with the config
    skipped_reason: str | None = None
    quantization: str | None = None  # the quant_method whose quantizer shaped the meta model
    notes: list[str] = field(default_factory=list)  # what the check could not settle (a package from_pretrained needs)
    seconds: float = 0.0
    peak_bytes: int = 0

    @property
    def mismatch(self) -> bool:
        return self.checked and bool(self.missing or self.unexpected or self.experts)

    def detail(self) -> str:
        def first(names: list[str]) -> str:
            more = f" (+{len(names) - MAX_NAMES_SHOWN} more)" if len(names) > MAX_NAMES_SHOWN else ""
            return ", ".join(names[:MAX_NAMES_SHOWN]) + more

        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} missing, first: {first(self.missing)}")
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} unexpected, first: {first(self.unexpected)}")
        if self.experts:
            parts.append(f"{len(self.experts)} expert count mismatches with config.json, first: {first(self.experts)}")
        return f"{self.architecture} from config.json would load with " + "; ".join(parts)


class _Unavailable(Exception):
    pass


class _Quantized(NamedTuple):
    """The quantizer `from_pretrained` would build from config.json's `quantization_config`, and what it lacks here."""

    quantizer: Any
    method: str
    environment: str | None  # why its validate_environment refused in this process (a package), else None


def _quantizer(config: dict[str, Any], cfg: Any) -> _Quantized | None:
    """transformers' own quantizer for a pre-quantized export, as `get_hf_quantizer` builds it (huggingface/
    transformers src/transformers/quantizers/auto.py `get_hf_quantizer`, read in the installed 5.25):
    `AutoHfQuantizer.from_config(config.quantization_config, pre_quantized=True)` when `supports_quant_method`, then
    `validate_environment(device_map, weights_only)`. A method transformers does not know is ignored there (the model
    loads unquantized), and so here. `validate_environment` checks packages and hardware: a package missing in this
    process is recorded, not a layout fault; the structure is still built when the quantizer's module replacement
    imports without it (FP8's `replace_with_fp8_linear` needs no `accelerate`), else the check is skipped naming it."""
    raw = getattr(cfg, "quantization_config", None) or config.get("quantization_config")
    if raw is None:
        return None
    from transformers.quantizers.auto import AutoHfQuantizer

    method = str(raw.get("quant_method") if isinstance(raw, dict) else getattr(raw, "quant_method", "?"))
    if not AutoHfQuantizer.supports_quant_method(raw):
        return None
    try:
        quantizer = AutoHfQuantizer.from_config(raw, pre_quantized=True)
    except ImportError as exc:
        raise _Unavailable(f"the {method} quantizer needs a package not installed here: {str(exc)[:200]}") from exc
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _Unavailable(f"transformers cannot read the {method} quantization_config: {str(exc)[:200]}") from exc
    environment = None
    try:
        quantizer.validate_environment(device_map=None, weights_only=True)
    except ImportError as exc:
        environment = f"{str(exc)[:200]}"
    except (RuntimeError, ValueError) as exc:  # hardware (no GPU) or device-map rules: not the export's layout
        environment = f"the {method} quantizer refused this machine ({str(exc)[:200]}); the layout is checked anyway"
    return _Quantized(quantizer, method, environment)


def _build(torch: Any, make: Any, cfg: Any, quantized: _Quantized | None) -> Any:
    """The meta model as `from_pretrained` builds it: the class, then the quantizer's module replacement (its
    `preprocess_model` inside the same init context, modeling_utils.py `from_pretrained`)."""
    with torch.device("meta"):
        model = make(cfg)
        if quantized is not None:
            try:
                quantized.quantizer.preprocess_model(
                    model=model, dtype=torch.bfloat16, device_map=None, checkpoint_files=None
                )
            except Exception as exc:
                # A package validate_environment found missing, used by the module replacement (bitsandbytes'
                # `bnb.nn.Linear4bit` is a NameError without it): say which, never a layout finding.
                if not (isinstance(exc, ImportError) or quantized.environment):
                    raise
                why = quantized.environment or str(exc)[:200]
                raise _Unavailable(
                    f"the {quantized.method} quantizer cannot build the model from_pretrained would load without a "
                    f"package not installed here ({why}): the tensor layout is not checked"
                ) from exc
    return model


# One verdict at a time per process: candidates validated together (steps/validate.validate_many) would otherwise
# each build the same meta model (lru_cache does not wait for a computation in flight), and concurrent first
# imports of transformers' lazy module race: one thread saw no `AutoModelForCausalLM` and skipped the check.
_VERDICT_LOCK = threading.Lock()


class _MetaModel(NamedTuple):
    model: Any
    meta: Any  # its state dict (meta tensors)
    renamings: list[Any]
    converters: list[Any]
    architecture: str
    quantized: _Quantized | None


@lru_cache(maxsize=8)
def _meta_model(config_json: str) -> _MetaModel:
    """The meta model `from_pretrained` would build for one config, quantizer included, with its key conversions;
    cached: configs repeat."""
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
    quantized = _quantizer(config, cfg)
    try:
        model = _build(torch, cls if cls is not None else transformers.AutoModelForCausalLM.from_config, cfg, quantized)
    except (ValueError, KeyError, TypeError, AttributeError) as declared_failed:
        # The declared class does not fit the config's model_type (e.g. `Qwen3MoeForCausalLM` over a dense `qwen3`
        # config, whose meta model declares no experts). AutoModelForCausalLM.from_pretrained picks the class by the
        # config's type, not by `architectures` (transformers models/auto/auto_factory.py), so the names are checked
        # against what it would build; a skip here would have read an export that loads nowhere as valid.
        try:
            fresh = AutoConfig.for_model(**config)  # the failed build set attributes on `cfg` (its experts backend)
            quantized = _quantizer(config, fresh)
            model = _build(torch, transformers.AutoModelForCausalLM.from_config, fresh, quantized)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _Unavailable(
                f"transformers cannot build {arch or model_type} from config.json: {declared_failed}"
            ) from exc
        built_as = f"{arch} (not buildable from model_type {model_type!r}; loaded as {type(model).__name__})"
    # With the quantizer, as from_pretrained asks: its renamings (FP8's `.scale` -> `.weight_scale_inv`) join the model's.
    mapping = get_model_conversion_mapping(model, None, quantized.quantizer if quantized else None)
    renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
    converters = [m for m in mapping if isinstance(m, WeightConverter)]
    arch_name = built_as or type(model).__name__
    return _MetaModel(model, model.state_dict(), renamings, converters, arch_name, quantized)


class _ExpertDim(NamedTuple):
    """An export tensor named straight onto an experts parameter (fused experts, a router): the leading dim of its
    header shape must be the `experts` the config gave the module that owns `target`."""

    tensor: str
    target: str
    experts: int


class _Verdict(NamedTuple):
    architecture: str
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    expert_indices: tuple[str, ...]  # per-expert names outside 0..E-1 or absent, decided from names alone
    expert_dims: tuple[_ExpertDim, ...]  # checked against header shapes outside the cache (shapes are not its key)


@lru_cache(maxsize=4)
def _verdict(config_json: str, tensor_names: frozenset[str]) -> _Verdict:
    """Missing, unexpected and expert-index findings for one config and one set of header names. Cached: a run's
    candidates share their architecture, so every export after the first costs one set comparison instead of renaming
    each name again and walking the meta model (~10 ms per 70B candidate, bench/bench_validate_many.py). A few entries
    only: a set of 18,867 names is ~2 MB. Keyed by names only: what depends on shapes is returned as `expert_dims`
    and compared by the caller, a few tensors per layer."""
    model, meta, renamings, converters, arch, _ = _meta_model(config_json)
    from transformers.core_model_loading import rename_source_key

    stackers = _expert_stackers(converters)
    prefix = model.base_model_prefix
    found: set[str] = set()
    unexpected: list[str] = []
    stacked: dict[str, dict[str, list[str]]] = {}  # fused target -> source pattern -> expert ids named
    direct: list[_ExpertDim] = []
    for key in sorted(tensor_names):
        renamed, pattern = rename_source_key(key, renamings, converters, prefix, meta)
        if renamed not in meta and key in meta:  # as the loader: maybe only the prefix was needed
            renamed, pattern = rename_source_key(key, [], [], prefix, meta)
        if renamed not in meta:
            unexpected.append(key)
            continue
        found.add(renamed)
        if pattern in stackers:
            expert_id = _expert_id(key, pattern, renamings)
            if expert_id is not None:
                stacked.setdefault(renamed, {}).setdefault(pattern, []).append(expert_id)
        elif (experts := _experts_of(model, renamed, meta[renamed])) is not None:
            direct.append(_ExpertDim(key, renamed, experts))
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
    indices: list[str] = []
    for target, by_pattern in sorted(stacked.items()):
        dim, patterns = stackers[next(iter(by_pattern))]
        count = meta[target].shape[dim] if meta[target].dim() > dim else 0
        for pattern in patterns:  # every projection the converter stacks, also one named for no expert at all
            indices.extend(_index_findings(target, pattern, by_pattern.get(pattern, []), count))
    return _Verdict(arch, tuple(sorted(missing)), tuple(unexpected), tuple(indices), tuple(direct))


def _expert_stackers(converters: list[Any]) -> dict[str, tuple[int, tuple[str, ...]]]:
    """Source pattern -> (stacking dim, every source pattern of its converter), for the converters that stack
    per-expert tensors (`MergeModulelist`, conversion_mapping.py `qwen2_moe` / `mixtral` / ...)."""
    from transformers.core_model_loading import MergeModulelist

    stackers: dict[str, tuple[int, tuple[str, ...]]] = {}
    for converter in converters:
        merge = next((op for op in converter.operations if isinstance(op, MergeModulelist)), None)
        if merge is None:
            continue
        patterns = tuple(converter.source_patterns)
        for pattern in patterns:
            stackers.setdefault(pattern, (merge.dim, patterns))  # the first converter matching wins, as the loader's
    return stackers


@lru_cache(maxsize=64)
def _star_rx(pattern: str) -> re.Pattern[str] | None:
    """The pattern as transformers matches it (a regex whose `*` is any text), with the `*` captured: the expert id."""
    head, star, tail = pattern.partition("*")
    return re.compile(f"{head}(.*){tail}") if star and "*" not in tail else None


def _expert_id(key: str, pattern: str, renamings: list[Any]) -> str | None:
    from transformers.core_model_loading import apply_renamings

    rx = _star_rx(pattern)
    if rx is None:
        return None
    match = rx.search(apply_renamings(key, renamings)) or rx.search(key)
    return match.group(1) if match else None


def _experts_of(model: Any, target: str, parameter: Any) -> int | None:
    """The expert count of the module owning `target`, when the parameter's leading dim is that count (the transformers
    5 experts modules and routers all keep `num_experts`); else None: not an experts tensor."""
    try:
        owner = model.get_submodule(target.rpartition(".")[0])
    except AttributeError:
        return None
    count = getattr(owner, "num_experts", None)
    if isinstance(count, int) and parameter.dim() >= 1 and parameter.shape[0] == count:
        return count
    return None


def _index_findings(target: str, pattern: str, named: list[str], count: int) -> list[str]:
    in_range = {int(i) for i in named if i.isdigit() and i == str(int(i)) and int(i) < count}
    outside = [i for i in named if not (i.isdigit() and i == str(int(i)) and int(i) < count)]
    absent = [e for e in range(count) if e not in in_range]
    findings = []
    if outside:
        numeric = sorted(int(i) for i in outside if i.isdigit())
        ids = ", ".join(filter(None, [_spans(numeric), ", ".join(sorted(i for i in outside if not i.isdigit()))]))
        findings.append(
            f"{target} from {pattern}: {_experts(len(outside))} {ids} outside the {count} config.json declares"
        )
    if absent:
        findings.append(f"{target} from {pattern}: {_experts(len(absent))} {_spans(absent)} of {count} missing")
    return findings


def _experts(n: int) -> str:
    return "expert" if n == 1 else "experts"


def _spans(numbers: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8": a missing half of 128 experts stays one line."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _decide(config: dict[str, Any], config_json: str, names: frozenset[str]) -> tuple[_Verdict, _Quantized | None]:
    """The verdict kept on disk by an earlier process (layout_verdicts.py: no torch + transformers import), else
    decided here and kept; a quantized config is always decided here."""
    key = None if "quantization_config" in config else verdict_key(config_json, names)
    kept = _kept(key) if key else None
    if kept is not None:
        return kept, None
    with _VERDICT_LOCK:
        verdict = _verdict(config_json, names)
        quantized = _meta_model(config_json).quantized  # cached by the verdict just taken
    if key and quantized is None:
        keep_verdict(key, verdict._asdict())
    return verdict, quantized


def _kept(key: str) -> _Verdict | None:
    fields = load_verdict(key)
    try:
        kept = _Verdict(**fields) if fields is not None else None
        if kept is None or not isinstance(kept.architecture, str):
            return None
        lists = (kept.missing, kept.unexpected, kept.expert_indices)
        if not all(isinstance(names, list) and all(isinstance(n, str) for n in names) for names in lists):
            return None
        dims = tuple(_ExpertDim(str(tensor), str(target), int(experts)) for tensor, target, experts in kept.expert_dims)
    except (TypeError, ValueError):
        return None
    return kept._replace(
        missing=tuple(kept.missing),
        unexpected=tuple(kept.unexpected),
        expert_indices=tuple(kept.expert_indices),
        expert_dims=dims,
    )


def check_tensor_layout(
    config: dict[str, Any], tensors: Mapping[str, Sequence[int]] | Set[str], *, trace_memory: bool = False
) -> LayoutReport:
    """`tensors`: header names with their shapes (what the validator passes), or bare names, and then the expert
    dims of fused tensors go unchecked. `trace_memory` measures peak Python allocations (tracemalloc slows the import
    a lot: measurement only)."""
    started = time.perf_counter()
    tracing = trace_memory and not tracemalloc.is_tracing()
    if tracing:
        tracemalloc.start()
    try:
        try:
            verdict, quantized = _decide(config, json.dumps(config, sort_keys=True), frozenset(tensors))
        except _Unavailable as exc:
            return LayoutReport(checked=False, skipped_reason=str(exc), quantization=_quant_method(config))
        experts = list(verdict.expert_indices)
        if isinstance(tensors, Mapping):
            experts += _expert_dim_findings(verdict.expert_dims, tensors)
        report = LayoutReport(
            checked=True,
            architecture=verdict.architecture,
            missing=list(verdict.missing),
            unexpected=list(verdict.unexpected),
            experts=experts,
            quantization=quantized.method if quantized else None,
            notes=[quantized.environment] if quantized and quantized.environment else [],
        )
    finally:
        peak = tracemalloc.get_traced_memory()[1] if tracing else 0
        if tracing:
            tracemalloc.stop()
    report.seconds = round(time.perf_counter() - started, 3)
    report.peak_bytes = peak
    return report


def _quant_method(config: dict[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    return str(method) if method is not None else None


def _expert_dim_findings(expert_dims: tuple[_ExpertDim, ...], shapes: Mapping[str, Sequence[int]]) -> list[str]:
    findings = []
    for tensor, target, experts in expert_dims:
        shape = list(shapes[tensor])
        if not shape or shape[0] != experts:
            onto = "" if tensor == target else f" (loaded as {target})"
            findings.append(
                f"{tensor}{onto} has header shape {shape}, its leading dim is not the {experts} experts config.json "
                "declares"
            )
    return findings
