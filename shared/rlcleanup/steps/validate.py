"""Validate export candidates (HF safetensors exports) and the resume point, from headers and listings only.

No tensor byte is read: shard headers come through ranged reads (formats.safetensors_header), sizes and
checksums from one listing of the export. Every problem is "<code>: <detail>" with a code from the vocabulary.
"""

from __future__ import annotations

import hashlib
import io
import pickletools
import re
import threading
import zipfile
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rlcleanup.formats.config import as_int, get
from rlcleanup.formats.safetensors_header import (
    DEFAULT_FIRST_BLOCK,
    CorruptHeaderError,
    SafetensorsHeader,
    loads_bounded,
    read_header,
)
from rlcleanup.models.record import Candidate, ResumeSafety
from rlcleanup.models.vocab import CandidateProblem as CP
from rlcleanup.models.vocab import CheckpointProblem as KP
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import basename

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
TRAINER_STATE_NAME = "trainer_state.json"
TOKENIZER_NAMES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
HEADER_WORKERS = 32  # a 70B export: config.json, the index and 30 shard headers in one round
ESTIMATE_TOLERANCE = 0.15
DEFAULT_CKPT_INTERVAL = 10  # SkyRL ppo_base_config default
RANK_KINDS = ("model", "optim", "extra_state")
MAX_PROBLEMS_PER_CODE = 20  # a hostile index naming 10^6 shards must not make a 10^6-line record
_JSON_CAP = 64 * 1024 * 1024
_JSON_DEPTH = 64  # config.json nests (text_config, rope_scaling...), but never this deep
_SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<k>\d+)-of-(?P<total>\d+)\.safetensors$")
_RANK_FILE = re.compile(r"^(?P<kind>model|optim|extra_state)_world_size_(?P<w>\d+)_rank_(?P<r>\d+)\.pt$")
_MAX_WORLD_SIZE = 65536
_PICKLE_STR_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_PICKLE_INT_OPS = {"BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4"}
_PICKLE_MEMO_OPS = {"MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"}
_T = TypeVar("_T")


@dataclass
class _Findings:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict)

    def add(self, code: str, detail: str) -> None:
        n = self._counts[code] = self._counts.get(code, 0) + 1
        if n <= MAX_PROBLEMS_PER_CODE:
            self.problems.append(f"{code}: {detail}")

    def close(self) -> None:
        for code, n in self._counts.items():
            if n > MAX_PROBLEMS_PER_CODE:
                self.problems.append(f"{code}: ... and {n - MAX_PROBLEMS_PER_CODE} more like the above")


# ---------------------------------------------------------------- helpers


def unsafe_name(name: str) -> bool:
    """A weight_map shard name must be a plain file name beside the index: no traversal, no subfolders."""
    return not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name or ".." in name


def size_label(count: int) -> str:
    """9.7e9 -> "10B" (whole billions, half up); 131072 -> "131K"; 7.2e6 -> "7.2M"."""
    if count >= 10**9:
        return f"{(count + 5 * 10**8) // 10**9}B"
    for unit, scale in (("M", 10**6), ("K", 10**3)):
        if count >= scale:
            value = count / scale
            text = f"{value:.0f}" if value >= 100 else f"{value:.1f}".removesuffix(".0")
            return f"{text}{unit}"
    return str(count)


def estimate_parameters(config: dict[str, Any]) -> int | None:
    """12·L·H² + 2·V·H from config.json (text_config for multimodal wrappers); None when a key is missing."""
    for node in (config, config.get("text_config")):
        if not isinstance(node, dict):
            continue
        layers, hidden, vocab = (_as_int(node.get(k)) for k in ("num_hidden_layers", "hidden_size", "vocab_size"))
        if layers and hidden and vocab and min(layers, hidden, vocab) > 0:
            return 12 * layers * hidden * hidden + 2 * vocab * hidden
    return None


def step_ranges(steps: Iterable[int]) -> str:
    """[3, 4, 5, 9] -> "3-5, 9"."""
    out: list[str] = []
    ordered = sorted(set(steps))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out)


def coverage_gaps(metric_steps: Collection[int], lo: int, hi: int) -> list[tuple[int, int]]:
    """Inclusive ranges in [lo, hi] with no metric step; linear in len(metric_steps), not in hi - lo."""
    gaps: list[tuple[int, int]] = []
    cursor = lo
    for s in sorted({s for s in metric_steps if lo <= s <= hi}):
        if s > cursor:
            gaps.append((cursor, s - 1))
        cursor = s + 1
    if cursor <= hi:
        gaps.append((cursor, hi))
    return gaps


def _as_int(value: Any) -> int | None:
    """Steps and counts: as_int, but a negative string is no step (a negative int still reaches the checks)."""
    number = as_int(value)
    return None if isinstance(value, str) and number is not None and number < 0 else number


_JsonRead = tuple[dict[str, Any] | None, str | None]  # (object, None) or (None, why it is unreadable)


def _read_json(storage: Storage, uri: str) -> _JsonRead:
    """(object, None) or (None, why it is unreadable)."""
    try:
        return _decode_json(storage.read_bytes(uri, _JSON_CAP))
    except FileNotFoundError:
        return None, "absent"
    except ValueError as exc:  # too large
        return None, str(exc)[:200]


def _read_listed_json(storage: Storage, uri: str, size: int) -> _JsonRead:
    """A small JSON file the listing gave with its size: one ranged read (no stat, no second request).

    One byte more than listed is asked for, so a file rewritten since the listing shows as such instead of
    being judged on a prefix (the candidate's digest is the listing's).
    """
    if size > _JSON_CAP:
        return None, f"{size} bytes, larger than the {_JSON_CAP}-byte cap"
    try:
        data = storage.read_range(uri, 0, size + 1)
    except FileNotFoundError:
        return None, "absent"
    if len(data) != size:
        return None, f"changed since the listing ({size} bytes listed, {len(data)}{'+' * (len(data) > size)} read)"
    return _decode_json(data)


def _decode_json(data: bytes) -> _JsonRead:
    try:
        value = loads_bounded(data.decode("utf-8"), _JSON_DEPTH)
    except (ValueError, UnicodeDecodeError) as exc:  # not UTF-8, not JSON, too deep
        return None, str(exc)[:200]
    if not isinstance(value, dict):
        return None, f"top level is {type(value).__name__}, not an object"
    return value, None


def export_digest(objects: Iterable[tuple[str, ObjectInfo]]) -> str:
    """sha256 over sorted "name<TAB>size<TAB>crc32c" lines: same names, sizes and checksums -> same digest."""
    lines = sorted(f"{name}\t{info.size}\t{info.crc32c or ''}" for name, info in objects)
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


# ---------------------------------------------------------------- candidate


@dataclass
class _WeightPlan:
    to_read: list[str]  # shard names whose headers we read
    weight_map: dict[str, str] | None = None  # tensor -> shard (safe names only)
    total_size: int | None = None


def _plan_weights(
    uri: str, top: dict[str, ObjectInfo], present: list[str], read: _JsonRead | None, f: _Findings
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
    total_size = _as_int(metadata.get("total_size")) if isinstance(metadata, dict) else None
    if total_size is None:
        f.warnings.append(f"{INDEX_NAME} has no integer metadata.total_size; byte total not cross-checked")
    return _WeightPlan(to_read=sorted(indexed & set(present)), weight_map=weight_map, total_size=total_size)


def _check_shard_naming(names: set[str], f: _Findings) -> None:
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

    def json(self, name: str) -> Future[_JsonRead] | None:
        """The listed top-level JSON file `name`, or None when the listing has no such file."""
        if name not in self.top:
            return None
        return self._submit(_read_listed_json, self.storage, f"{self.uri}/{name}", self.top[name].size)

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
    headers: dict[str, SafetensorsHeader | Exception], top: dict[str, ObjectInfo], step: int, f: _Findings
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
            value = _as_int(result.metadata.get(key))
            if key in result.metadata and value != step:
                f.add(CP.step_mismatch, f"{name} __metadata__ {key}={result.metadata[key]!r} but the dir says {step}")
    return good


def _check_index(plan: _WeightPlan, good: dict[str, SafetensorsHeader], f: _Findings) -> None:
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
    config: dict[str, Any] | None, good: dict[str, SafetensorsHeader], f: _Findings
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


def _check_step(layout: RunLayout, uri: str, step: int, trainer_state: _JsonRead | None, f: _Findings) -> None:
    if trainer_state is not None:
        state, _ = trainer_state
        value = state.get("global_step") if state else None
        if value is not None and _as_int(value) != step:
            f.add(CP.step_mismatch, f"trainer_state.json global_step={value!r} but the dir says {step}")
    model = get(layout.terminal or {}, "response.model")
    if isinstance(model, dict) and str(model.get("policy_export_uri", "")).rstrip("/") == uri.rstrip("/"):
        value = model.get("global_step")
        if value is not None and _as_int(value) != step:
            f.add(CP.step_mismatch, f"terminal.json names this export at global_step={value!r} but the dir says {step}")


def _check_saved_and_metrics(
    layout: RunLayout, step: int, metric_steps: Collection[int] | None, step_budget: int | None, f: _Findings
) -> None:
    marker = layout.marker_step
    if marker is None:
        f.warnings.append("no readable checkpoint marker: cannot tell whether this step was ever saved")
    elif step > marker:
        f.add(CP.beyond_last_saved_step, f"step {step} is past the last saved step {marker} (the marker)")
    if metric_steps is None:
        return
    hi = min(step, step_budget) if step_budget is not None else step
    lo = min(metric_steps) if metric_steps else 1
    gaps = coverage_gaps(metric_steps, lo, hi)
    if gaps:
        shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in gaps[:10])
        more = f" (+{len(gaps) - 10} more ranges)" if len(gaps) > 10 else ""
        f.add(CP.metric_coverage_gap, f"no metric row for steps {shown}{more} within [{lo}, {hi}]")


def validate_candidate(
    storage: Storage,
    layout: RunLayout,
    step: int,
    *,
    metric_steps: Collection[int] | None,
    step_budget: int | None,
    workers: int = HEADER_WORKERS,
    first_block: int = DEFAULT_FIRST_BLOCK,
) -> Candidate:
    """Validate `exports/global_step_<step>/policy/`; `valid` means no problem was found.

    After the listing every read runs at once in one pool of at most `workers`: config.json, the index,
    trainer_state.json and the header of every listed `*.safetensors` (ahead of the index, which then decides
    which of them count). One round of requests after the listing, instead of a chain of four.
    """
    uri = layout.export_uri(step).rstrip("/")
    objects = {o.uri[len(uri) + 1 :]: o for o in storage.list(uri)}
    top = {name: info for name, info in objects.items() if "/" not in name}
    present = sorted(n for n in top if n.endswith(".safetensors"))
    f = _Findings()

    with _borrowed_pool(workers) as pool, _Reads(storage, uri, top, pool, first_block) as reads:
        config_job, index_job, state_job = (reads.json(n) for n in (CONFIG_NAME, INDEX_NAME, TRAINER_STATE_NAME))
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
        if not any(name in top for name in TOKENIZER_NAMES):
            f.add(CP.missing_tokenizer, f"none of {', '.join(TOKENIZER_NAMES)} in {uri}")

        plan = _plan_weights(uri, top, present, index_job.result() if index_job else None, f)
        headers = reads.headers(plan.to_read)  # the index's weight_map is cross-checked on what was read
        trainer_state = state_job.result() if state_job else None

    good = _check_shards(headers, top, step, f)
    _check_index(plan, good, f)
    counted, estimated = _check_parameters(config, good, f)
    expected = len(set(plan.weight_map.values())) if plan.weight_map is not None else len(plan.to_read)
    if good and len(good) < expected:
        f.warnings.append(f"parameter count covers only {len(good)} of {expected} shards (the rest are unreadable)")
    _check_step(layout, uri, step, trainer_state, f)
    _check_saved_and_metrics(layout, step, metric_steps, step_budget, f)
    f.close()

    return Candidate(
        step=step,
        uri=uri,
        valid=not f.problems,
        problems=f.problems,
        warnings=f.warnings,
        parameter_count=counted,
        estimated_parameter_count=estimated,
        size_label=size_label(counted) if counted is not None else None,
        total_bytes=sum(o.size for o in objects.values()),
        shard_count=sum(1 for name in top if name.endswith(".safetensors")),
        digest=export_digest(objects.items()),
    )


# ---------------------------------------------------------------- resume safety


def pickled_global_step(data: bytes) -> int | None:
    """The int stored under "global_step" in a torch.save'd dict, found by walking pickle opcodes.

    pickletools.genops only decodes opcodes, it never executes them: safe on untrusted trainer_state.pt.
    Handles the zip container (torch >= 1.6: `<name>/data.pkl`) and the legacy stream of pickles.
    """
    try:
        payload = data
        if data[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                member = next((i for i in zf.infolist() if i.filename.endswith("data.pkl")), None)
                if member is None or member.file_size > _JSON_CAP:
                    return None
                payload = zf.read(member)
        stream = io.BytesIO(payload)
        for _ in range(4):  # legacy format: magic, protocol, sys info, then the object
            previous: Any = None
            for op, arg, _pos in pickletools.genops(stream):
                if op.name in _PICKLE_MEMO_OPS:
                    continue
                if previous == "global_step" and op.name in _PICKLE_INT_OPS and isinstance(arg, int):
                    return arg
                previous = arg if op.name in _PICKLE_STR_OPS else None
            if stream.tell() >= len(payload):
                break
    except Exception:  # any decoding failure just means "not detectable"
        return None
    return None


def _check_role(
    storage: Storage, root: str, role: str, objects: dict[str, ObjectInfo], strategy: str, f: _Findings
) -> None:
    prefix = f"{role}/"
    names = {rel[len(prefix) :] for rel in objects if rel.startswith(prefix)}
    if strategy == "megatron":
        if "metadata.json" not in names or not any(n.endswith(".distcp") for n in names):
            f.add(KP.missing_rank_shard, f"{role}/ lacks metadata.json or any .distcp shard (Megatron checkpoint)")
        return
    present: dict[str, set[tuple[int, int]]] = {kind: set() for kind in RANK_KINDS}
    for name in names:
        m = _RANK_FILE.match(name)
        if m:
            present[m["kind"]].add((int(m["w"]), int(m["r"])))
    world: int | None = None
    if "fsdp_config.json" in names:
        cfg, why = _read_json(storage, f"{root}/{role}/fsdp_config.json")
        world = _as_int(cfg.get("world_size")) if cfg else None
        if world is None:
            f.add(KP.missing_rank_shard, f"{role}/fsdp_config.json has no integer world_size ({why or 'key absent'})")
            return
    else:
        sizes = {w for kind in present.values() for w, _ in kind}
        if len(sizes) != 1:
            f.add(KP.missing_rank_shard, f"{role}/fsdp_config.json is absent and the shard names give no world size")
            return
        world = sizes.pop()
        f.warnings.append(f"{role}/fsdp_config.json is absent; world size {world} taken from the shard names")
    if not 0 < world <= _MAX_WORLD_SIZE:
        f.add(KP.missing_rank_shard, f"{role}/fsdp_config.json world_size={world} is implausible")
        return
    for kind in RANK_KINDS:
        missing = [r for r in range(world) if (world, r) not in present[kind]]
        if missing:
            f.add(
                KP.missing_rank_shard,
                f"{role}/{kind}_world_size_{world}_rank_<r>.pt absent for ranks {step_ranges(missing)} of 0-{world - 1}",
            )


def check_resume_safety(storage: Storage, layout: RunLayout) -> ResumeSafety:
    """Is the checkpoint the marker names complete enough for SkyRL to resume from it?"""
    f = _Findings()
    marker = layout.marker_step
    dirs = layout.checkpoint_steps
    if marker is None:
        exists = layout.marker_uri is not None and storage.stat(layout.marker_uri) is not None
        why = "is not an integer" if exists else "is absent"
        seen = f"; checkpoint dirs present: {step_ranges(dirs)}" if dirs else ""
        f.add(KP.marker_missing, f"{layout.marker_uri or 'latest_ckpt_global_step.txt'} {why}{seen}")
        f.close()
        return ResumeSafety(safe=False, reasons=f.problems)

    root = layout.checkpoint_uri(marker).rstrip("/")
    objects = {o.uri[len(root) + 1 :]: o for o in storage.list(root)}
    if not objects:
        seen = f" (checkpoint dirs present: {step_ranges(dirs)})" if dirs else " (no checkpoint dir at all)"
        f.add(KP.missing_checkpoint_dir, f"the marker names step {marker} but {basename(root)} holds nothing{seen}")
    else:
        if "trainer_state.pt" not in objects:
            f.add(KP.missing_trainer_state, f"{basename(root)}/trainer_state.pt is absent")
        else:
            saved = pickled_global_step(storage.read_bytes(f"{root}/trainer_state.pt", _JSON_CAP))
            if saved is not None and saved != marker:
                f.add(KP.marker_step_mismatch, f"the marker says {marker} but trainer_state.pt has global_step={saved}")
        if "data.pt" not in objects:
            f.add(KP.missing_trainer_state, f"{basename(root)}/data.pt (dataloader state) is absent")
        strategy = str(get(layout.skyrl, "trainer.strategy") or "fsdp")
        for role in ("policy", "critic"):
            if role == "policy" or any(rel.startswith(f"{role}/") for rel in objects):
                _check_role(storage, root, role, objects, strategy, f)

    interval = _as_int(get(layout.skyrl, "trainer.ckpt_interval"))
    if interval is None or interval <= 0:
        interval = DEFAULT_CKPT_INTERVAL
        f.warnings.append(f"trainer.ckpt_interval unknown; assumed the SkyRL default {interval}")
    ahead = [s for s in dirs if s - marker > interval]
    if ahead:
        f.add(
            KP.inconsistent_checkpoint_folder,
            f"global_step_{max(ahead)} is more than ckpt_interval={interval} past the marker {marker}: "
            "SkyRL refuses to resume (Inconsistent checkpoint folder)",
        )
    f.close()
    if f.problems:
        return ResumeSafety(safe=False, reasons=f.problems + f.warnings)
    partial = [s for s in dirs if s > marker]
    note = (
        f"; step dirs {step_ranges(partial)} above it are within ckpt_interval (an unfinished save)" if partial else ""
    )
    return ResumeSafety(
        safe=True,
        from_step=marker,
        reasons=[f"global_step_{marker} is complete and matches the marker{note}", *f.warnings],
    )
