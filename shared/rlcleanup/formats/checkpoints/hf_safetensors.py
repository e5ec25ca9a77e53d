"""The Hugging Face safetensors export (`save_pretrained`): shards vs index, headers, config, tokenizer.

No tensor byte is read: shard headers come through ranged reads (formats.safetensors_header), sizes and
checksums from the one listing of the export. After the listing every read runs at once in one bounded pool:
config.json, the index, trainer_state.json and the header of every listed `*.safetensors` (ahead of the index,
which then decides which of them count) — one round of requests instead of a chain of four.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from rlcleanup.formats.checkpoints.base import (
    Findings,
    FormatKind,
    FormatReport,
    JsonRead,
    Listing,
    ReadOptions,
    as_step,
    read_listed_json,
)
from rlcleanup.formats.checkpoints.tensor_layout import check_tensor_layout
from rlcleanup.formats.safetensors_header import CorruptHeaderError, SafetensorsHeader, read_header
from rlcleanup.models.vocab import CandidateProblem as CP
from rlcleanup.ports.storage import ObjectInfo, Storage

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
TRAINER_STATE_NAME = "trainer_state.json"
TOKENIZER_NAMES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
# A VLM's processor (transformers: IMAGE_PROCESSOR_NAME, and the unified PROCESSOR_NAME of transformers 5).
PROCESSOR_NAMES = ("preprocessor_config.json", "processor_config.json")
ESTIMATE_TOLERANCE = 0.15
_SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<k>\d+)-of-(?P<total>\d+)\.safetensors$")
_T = TypeVar("_T")


def unsafe_name(name: str) -> bool:
    """A weight_map shard name must be a plain file name beside the index: no traversal, no subfolders."""
    return not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name or ".." in name


def estimate_parameters(config: dict[str, Any]) -> int | None:
    """12·L·H² + 2·V·H from config.json (text_config for multimodal wrappers); None when a key is missing."""
    for node in (config, config.get("text_config")):
        if not isinstance(node, dict):
            continue
        layers, hidden, vocab = (as_step(node.get(k)) for k in ("num_hidden_layers", "hidden_size", "vocab_size"))
        if layers and hidden and vocab and min(layers, hidden, vocab) > 0:
            return 12 * layers * hidden * hidden + 2 * vocab * hidden
    return None


@dataclass
class _WeightPlan:
    to_read: list[str]  # shard names whose headers we read
    weight_map: dict[str, str] | None = None  # tensor -> shard (safe names only)
    total_size: int | None = None


def _plan_weights(
    uri: str, top: dict[str, ObjectInfo], present: list[str], read: JsonRead | None, f: Findings
) -> _WeightPlan:
    """Which shards count, from the listing and the index as read (`read` is None when there is no index)."""
    if read is None:
        if not present:
            f.add(CP.no_weights, f"no .safetensors file and no {INDEX_NAME} in {uri}")
        elif present != [SINGLE_NAME]:
            f.add(CP.missing_index, f"{len(present)} shard files ({', '.join(present[:3])}...) but no {INDEX_NAME}")
        return _WeightPlan(to_read=present)

    index, why = read
    raw_map = index.get("weight_map") if index else None
    if index is None or not isinstance(raw_map, dict) or not all(isinstance(v, str) for v in raw_map.values()):
        why = why or "weight_map is missing or not a {tensor: shard-file} object"
        f.add(CP.corrupt_header, f"{INDEX_NAME} is unreadable: {why}")
        return _WeightPlan(to_read=present)

    weight_map: dict[str, str] = {}
    for shard in sorted(set(raw_map.values())):
        if unsafe_name(shard):
            f.add(CP.unsafe_path, f"{INDEX_NAME} names shard {shard[:200]!r}, which escapes the export; not read")
    for tensor, shard in raw_map.items():
        if not unsafe_name(shard):
            weight_map[tensor] = shard
    indexed = set(weight_map.values())
    for shard in sorted(indexed - set(present)):
        f.add(CP.missing_shard, f"{shard} is named by {INDEX_NAME} but absent from {uri}")
    for shard in sorted(set(present) - indexed):
        f.add(CP.unindexed_shard, f"{shard} is present but {INDEX_NAME} maps no tensor to it")
    _check_shard_naming(indexed | set(present), f)
    if not indexed:
        f.add(CP.no_weights, f"{INDEX_NAME} maps no tensor to any shard")

    metadata = index.get("metadata")
    total_size = as_step(metadata.get("total_size")) if isinstance(metadata, dict) else None
    if total_size is None:
        f.warnings.append(f"{INDEX_NAME} has no integer metadata.total_size; byte total not cross-checked")
    return _WeightPlan(to_read=sorted(indexed & set(present)), weight_map=weight_map, total_size=total_size)


def _check_shard_naming(names: set[str], f: Findings) -> None:
    """`model-0000k-of-0000K`: every k in 1..K must exist or be indexed, and K must agree across names."""
    groups: dict[tuple[str, int, int], set[int]] = {}
    for name in names:
        m = _SHARD_NAME.match(name)
        if m:
            key = (m["prefix"], int(m["total"]), len(m["k"]))
            groups.setdefault(key, set()).add(int(m["k"]))
    if len({(p, t) for p, t, _ in groups}) > 1:
        f.warnings.append(f"shard names disagree on the shard count: {sorted(f'{p}-of-{t}' for p, t, _ in groups)}")
    for (prefix, total, width), seen in groups.items():
        if total > 100_000:
            continue  # an absurd K is the name's problem, not 10^9 missing shards
        for k in range(1, total + 1):
            if k not in seen:
                name = f"{prefix}-{k:0{width}d}-of-{total:0{width}d}.safetensors"
                f.add(
                    CP.missing_shard, f"{name} is implied by the {total}-shard naming but neither present nor indexed"
                )


_IDLE_POOLS: dict[int, list[ThreadPoolExecutor]] = {}  # by size: threads outlive a candidate, not its bound
_IDLE_POOLS_LOCK = threading.Lock()
_MAX_IDLE_POOLS = 2  # per size: one candidate after another reuses threads; a burst does not pin all of its own


@contextmanager
def _borrowed_pool(workers: int) -> Iterator[ThreadPoolExecutor]:
    """A pool of at most `workers` threads, this caller's alone until it gives it back.

    Starting and joining 30 threads per candidate cost more CPU than parsing its 30 headers (~13 ms per
    candidate, measured under load); a returned pool keeps its idle threads for the next candidate. The
    caller gives it back only once its work has finished or been cancelled (`_Reads` waits on the way out).
    """
    size = max(1, workers)
    with _IDLE_POOLS_LOCK:
        idle = _IDLE_POOLS.get(size)
        pool = idle.pop() if idle else ThreadPoolExecutor(max_workers=size, thread_name_prefix="validate")
    try:
        yield pool
    finally:
        with _IDLE_POOLS_LOCK:
            idle = _IDLE_POOLS.setdefault(size, [])
            keep = len(idle) < _MAX_IDLE_POOLS
            if keep:
                idle.append(pool)
        if not keep:
            pool.shutdown(wait=False)


class _Reads:
    """Every read of one candidate in one bounded pool, submitted as soon as the listing names the object.

    A corrupt or vanished shard is a finding (its result is the exception); a storage outage propagates from
    `result()`. Used as a context manager: on the way out every read has finished, and on an error those not
    started are cancelled first (no queue of doomed requests behind an outage).
    """

    def __init__(self, storage: Storage, uri: str, top: dict[str, ObjectInfo], pool: Executor, first_block: int):
        self.storage, self.uri, self.top, self.pool, self.first_block = storage, uri, top, pool, first_block
        self._headers: dict[str, Future[SafetensorsHeader | Exception]] = {}
        self._all: list[Future[Any]] = []

    def __enter__(self) -> _Reads:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            for job in self._all:
                job.cancel()
        wait(self._all)  # reads ahead that the plan did not need (an unindexed shard) finish here too

    def _submit(self, fn: Callable[..., _T], *args: Any) -> Future[_T]:
        job = self.pool.submit(fn, *args)
        self._all.append(job)
        return job

    def json(self, name: str) -> Future[JsonRead] | None:
        """The listed top-level JSON file `name`, or None when the listing has no such file."""
        if name not in self.top:
            return None
        return self._submit(read_listed_json, self.storage, f"{self.uri}/{name}", self.top[name].size)

    def header(self, name: str) -> None:
        if name not in self._headers:
            self._headers[name] = self._submit(self._header, name)

    def _header(self, name: str) -> SafetensorsHeader | Exception:
        try:
            return read_header(self.storage, f"{self.uri}/{name}", self.top[name].size, self.first_block)
        except (CorruptHeaderError, FileNotFoundError) as exc:
            return exc

    def headers(self, names: list[str]) -> dict[str, SafetensorsHeader | Exception]:
        """The headers of `names` (read now if they were not read ahead), in that order."""
        for name in names:
            self.header(name)
        return {name: self._headers[name].result() for name in names}


def _check_shards(
    headers: dict[str, SafetensorsHeader | Exception], top: dict[str, ObjectInfo], step: int, f: Findings
) -> dict[str, SafetensorsHeader]:
    good: dict[str, SafetensorsHeader] = {}
    for name, result in headers.items():
        if isinstance(result, CorruptHeaderError):
            f.add(CP.corrupt_header, f"{name}: {result.reason}")
            continue
        if isinstance(result, Exception):
            f.add(CP.missing_shard, f"{name} was listed but vanished before its header was read")
            continue
        good[name] = result
        size, want = top[name].size, result.expected_size
        if size < want:
            f.add(CP.truncated_shard, f"{name} is {size} bytes; its header promises {want} (short by {want - size})")
        elif size > want:
            f.add(
                CP.truncated_shard,
                f"{name} is {size} bytes, {size - want} more than its header describes ({want}): not a whole write",
            )
        for key in ("global_step", "step"):
            value = as_step(result.metadata.get(key))
            if key in result.metadata and value != step:
                f.add(CP.step_mismatch, f"{name} __metadata__ {key}={result.metadata[key]!r} but the dir says {step}")
    return good


def _check_tensor_layout(config: dict[str, Any], good: dict[str, SafetensorsHeader], f: Findings) -> None:
    """Issue 14 item 9: the names `from_pretrained` would report missing / unexpected (formats.checkpoints.
    tensor_layout, transformers' own rules on the meta device; skipped, and said so, without transformers), and
    experts counted against the config: per-expert indices by name, fused experts by their header shapes."""
    shapes = {name: info.shape for header in good.values() for name, info in header.tensors.items()}
    layout = check_tensor_layout(config, shapes)
    if layout.mismatch:
        f.add(CP.tensor_layout_mismatch, layout.detail())
    elif not layout.checked:
        f.warnings.append(f"tensor layout check skipped: {layout.skipped_reason}")
    # Checked with the export's quantizer, whose environment wants more than this process has (FP8: accelerate).
    f.warnings.extend(
        f"tensor layout checked with the {layout.quantization} quantizer; {note}" for note in layout.notes
    )


def _check_index(plan: _WeightPlan, good: dict[str, SafetensorsHeader], f: Findings) -> None:
    if plan.weight_map is None:
        return
    missing = [(t, s) for t, s in plan.weight_map.items() if s in good and t not in good[s].tensors]
    for tensor, shard in sorted(missing):
        f.add(CP.tensor_not_in_shard, f"{tensor} is mapped to {shard} but its header has no such tensor")
    unmapped = sorted(t for s, h in good.items() for t in h.tensors if plan.weight_map.get(t) != s)
    if unmapped:
        f.warnings.append(f"{len(unmapped)} tensors in shard headers are not mapped there by the index: {unmapped[:5]}")
    complete = all(s in good for s in set(plan.weight_map.values()))
    if plan.total_size is not None and complete and good:
        actual = sum(h.tensor_bytes for h in good.values())
        if actual != plan.total_size:
            f.add(
                CP.index_total_size_mismatch,
                f"metadata.total_size is {plan.total_size} bytes but the shard headers hold {actual}",
            )


def _check_parameters(
    config: dict[str, Any] | None, good: dict[str, SafetensorsHeader], f: Findings
) -> tuple[int | None, int | None]:
    counted = sum(h.parameter_count for h in good.values()) if good else None
    estimated = estimate_parameters(config) if config else None
    if counted is not None and estimated is not None and counted > 0:
        diff = abs(counted - estimated) / counted
        if diff > ESTIMATE_TOLERANCE:
            f.warnings.append(
                f"parameter count from shard headers ({counted:,}) differs from the config estimate "
                f"12·L·H²+2·V·H ({estimated:,}) by {diff:.0%}; using the header sum"
            )
    return counted, estimated


def _check_trainer_state(step: int, trainer_state: JsonRead | None, f: Findings) -> None:
    if trainer_state is not None:
        state, _ = trainer_state
        value = state.get("global_step") if state else None
        if value is not None and as_step(value) != step:
            f.add(CP.step_mismatch, f"trainer_state.json global_step={value!r} but the dir says {step}")


def has_tokenizer_files(names: Iterable[str]) -> bool:
    """MarinSkyRL `marinskyrl/hf_model.py` @264af08353f2 `validate_portable_hf_model_files`: a name starting with
    `tokenizer` (tokenizer.json, tokenizer_config.json, a `tokenizer/` folder) or ending in `.model` (sentencepiece)."""
    return any(name.startswith("tokenizer") or name.endswith(".model") for name in names)


def is_vlm(config: dict[str, Any] | None) -> bool:
    """NovaSky SkyRL `skyrl/utils/tok.py` @a9564572e `check_is_vlm`: the config declares a non-null vision_config."""
    return isinstance(config, dict) and config.get("vision_config") is not None


def _check_tokenizer_and_processor(
    uri: str,
    listing: Listing,
    config: dict[str, Any] | None,
    processor_jobs: dict[str, Future[JsonRead] | None],
    f: Findings,
) -> None:
    """Tokenizer files, and for a VLM its processor config (run-layout-v3.md §5).

    NovaSky SkyRL @a9564572e `skyrl/backends/skyrl_train/distributed/{strategy,fsdp_strategy}.py` save the base
    model's processor beside a VLM export (`processor.save_pretrained`: `preprocessor_config.json`, or transformers
    5's unified `processor_config.json`) because AutoProcessor and vLLM cannot reload a VLM without it; the save is
    guarded, so an export can lack it. A VLM carrying its processor is loaded through it, so a tokenizer file
    missing beside it is a warning, not `missing_tokenizer`.
    """
    processors: list[str] = []
    for name, job in processor_jobs.items():
        if job is None:
            continue
        value, why = job.result()
        if value is None:
            f.add(CP.invalid_processor_config, f"{name} is unreadable: {why}")
        else:
            processors.append(name)
    vlm = is_vlm(config)
    if vlm and all(job is None for job in processor_jobs.values()):
        f.add(CP.missing_processor, f"config.json declares vision_config but none of {', '.join(PROCESSOR_NAMES)}")
    if has_tokenizer_files(listing.objects):
        return
    if vlm and processors:
        f.warnings.append(f"no tokenizer files beside the VLM processor ({', '.join(processors)}); loaded through it")
        return
    f.add(CP.missing_tokenizer, f"none of {', '.join(TOKENIZER_NAMES)} (nor another tokenizer* / *.model) in {uri}")


class HfSafetensorsExport:
    name = "hf-safetensors"
    kind = FormatKind.export
    strategies: tuple[str, ...] = ()

    def detect(self, listing: Listing) -> bool:
        return any(n.endswith(".safetensors") or n == INDEX_NAME for n in listing.top)

    def digest_inputs(self, listing: Listing) -> Iterable[tuple[str, ObjectInfo]]:
        return listing.objects.items()  # every object of the export: what a publish copies

    def validate(
        self, storage: Storage, listing: Listing, step: int, f: Findings, options: ReadOptions
    ) -> FormatReport:
        uri, top = listing.uri, listing.top
        present = sorted(n for n in top if n.endswith(".safetensors"))
        with _borrowed_pool(options.workers) as pool, _Reads(storage, uri, top, pool, options.first_block) as reads:
            config_job, index_job, state_job = (reads.json(n) for n in (CONFIG_NAME, INDEX_NAME, TRAINER_STATE_NAME))
            processor_jobs = {name: reads.json(name) for name in PROCESSOR_NAMES}
            for name in present:
                if not unsafe_name(name):  # a listed name is inside the export, but only the plan reads odd ones
                    reads.header(name)

            config: dict[str, Any] | None = None
            if config_job is None:
                f.add(CP.missing_config, f"no {CONFIG_NAME} in {uri}")
            else:
                config, why = config_job.result()
                if config is None:
                    f.add(CP.missing_config, f"{CONFIG_NAME} is unreadable: {why}")
            _check_tokenizer_and_processor(uri, listing, config, processor_jobs, f)

            plan = _plan_weights(uri, top, present, index_job.result() if index_job else None, f)
            headers = reads.headers(plan.to_read)  # the index's weight_map is cross-checked on what was read
            trainer_state = state_job.result() if state_job else None

        good = _check_shards(headers, top, step, f)
        _check_index(plan, good, f)
        counted, estimated = _check_parameters(config, good, f)
        expected = len(set(plan.weight_map.values())) if plan.weight_map is not None else len(plan.to_read)
        if good and len(good) < expected:
            f.warnings.append(f"parameter count covers only {len(good)} of {expected} shards (the rest are unreadable)")
        if config is not None and good and len(good) >= expected:
            _check_tensor_layout(config, good, f)
        _check_trainer_state(step, trainer_state, f)
        return FormatReport(
            parameter_count=counted,
            estimated_parameter_count=estimated,
            shard_count=sum(1 for name in top if name.endswith(".safetensors")),
        )
