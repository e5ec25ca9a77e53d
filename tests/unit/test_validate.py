"""Candidate validation and resume safety on small exports/checkpoints built here (no sample generator)."""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy as stn

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.checkpoints.base import HEADER_WORKERS, size_label
from rlcleanup.formats.checkpoints.hf_safetensors import estimate_parameters
from rlcleanup.formats.torch_pickle import pickled_global_step
from rlcleanup.models.record import Candidate
from rlcleanup.ports.storage import ObjectInfo, StorageError
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.validate import check_resume_safety, coverage_gaps, validate_candidate

# L=1, H=2, V=32: estimate 12*1*4 + 2*32*2 = 176, exactly the parameters of shard_tensors().
CONFIG = {"num_hidden_layers": 1, "hidden_size": 2, "vocab_size": 32, "architectures": ["LlamaForCausalLM"]}


class RecordingStorage(LocalStorage):
    """LocalStorage that remembers which uris were read."""

    def __init__(self) -> None:
        super().__init__(checksums=True)
        self.read: list[str] = []

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        self.read.append(uri)
        return super().read_range(uri, start, length)

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        self.read.append(uri)
        return super().read_bytes(uri, max_bytes)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        return super().list(prefix_uri)


def make_layout(root: Path, marker: int | None = 10, skyrl: dict[str, Any] | None = None) -> RunLayout:
    ckpt = root / "checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    marker_path = ckpt / "latest_ckpt_global_step.txt"
    if marker is not None:
        marker_path.write_text(f"{marker}\n")
    steps = sorted(int(p.name.removeprefix("global_step_")) for p in ckpt.glob("global_step_*"))
    exports = sorted(int(p.name.removeprefix("global_step_")) for p in (root / "exports").glob("global_step_*"))
    return RunLayout(
        run_uri=str(root),
        kind="A",
        config_uri=str(root / "resolved-skyrl.json"),
        config_bytes=b"{}",
        config={},
        skyrl=skyrl if skyrl is not None else {"trainer": {"ckpt_interval": 10, "strategy": "fsdp"}},
        temp_root=None,
        checkpoints_root=str(ckpt),
        exports_root=str(root / "exports"),
        attempts=[],
        marker_step=marker,
        marker_uri=str(marker_path),
        checkpoint_steps=steps,
        export_steps=exports,
    )


def shard_tensors() -> list[dict[str, np.ndarray]]:
    """Two shards; 4*8 + 8 + 16*8 + 8 = 176 params, all F32 (704 bytes)."""
    return [
        {"model.layers.0.w": np.zeros((4, 8), np.float32), "model.norm.weight": np.ones(8, np.float32)},
        {"lm_head.weight": np.zeros((16, 8), np.float32), "model.layers.1.b": np.zeros(8, np.float32)},
    ]


def make_export(
    root: Path,
    step: int = 10,
    shards: list[dict[str, np.ndarray]] | None = None,
    *,
    index: bool = True,
    config: dict[str, Any] | None = CONFIG,
    tokenizer: bool = True,
    metadata: dict[str, str] | None = None,
) -> Path:
    policy = root / "exports" / f"global_step_{step}" / "policy"
    policy.mkdir(parents=True)
    shards = shard_tensors() if shards is None else shards
    weight_map: dict[str, str] = {}
    total = 0
    for k, tensors in enumerate(shards, start=1):
        name = (
            "model.safetensors" if len(shards) == 1 and not index else f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        )
        stn.save_file(tensors, str(policy / name), metadata=metadata or {"format": "pt"})
        for t, arr in tensors.items():
            weight_map[t] = name
            total += arr.nbytes
    if index:
        (policy / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
        )
    if config is not None:
        (policy / "config.json").write_text(json.dumps(config))
    if tokenizer:
        (policy / "tokenizer.json").write_text('{"model": {}}')
        (policy / "tokenizer_config.json").write_text("{}")
    (policy / "generation_config.json").write_text("{}")
    return policy


def validate(root: Path, step: int = 10, **kw: Any) -> Candidate:
    layout = make_layout(root, marker=kw.pop("marker", 10))
    return validate_candidate(
        LocalStorage(),
        layout,
        step,
        metric_steps=kw.pop("metric_steps", None),
        step_budget=kw.pop("budget", None),
        **kw,
    )


def codes(c: Candidate) -> list[str]:
    return sorted(p.split(":", 1)[0] for p in c.problems)


def edit_index(policy: Path, fn: Any) -> None:
    path = policy / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    fn(index)
    path.write_text(json.dumps(index))


# ---------------------------------------------------------------- valid exports


def test_valid_sharded_export(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    c = validate(tmp_path, workers=2)
    assert c.valid and c.problems == [] and _findings(c.warnings) == []
    assert (c.parameter_count, c.estimated_parameter_count) == (176, 176)
    assert c.shard_count == 2 and c.size_label == "176"
    assert c.total_bytes == sum(p.stat().st_size for p in policy.iterdir())
    assert c.uri == str(policy) and c.step == 10
    assert len(c.digest or "") == 64


def test_valid_single_file_without_index(tmp_path: Path) -> None:
    make_export(tmp_path, shards=[{"w": np.zeros((3, 3), np.float16)}], index=False)
    c = validate(tmp_path)
    assert c.valid, c.problems
    assert (c.parameter_count, c.shard_count) == (9, 1)


def test_digest_pins_object_versions_not_just_content(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    pa = make_export(a)
    make_export(b)
    first = validate(a).digest
    assert validate(a).digest == first  # stable while nothing changes
    assert validate(b).digest != first  # the same bytes in other files are another artifact (other versions)
    shard = next(pa.glob("*.safetensors"))
    stat = shard.stat()
    data = shard.read_bytes()
    shard.write_bytes(data)  # rewritten with identical bytes, mtime set back: ctime still moves
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert validate(a).digest != first


# ---------------------------------------------------------------- each problem code


def test_missing_shard(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    (policy / "model-00002-of-00002.safetensors").unlink()
    c = validate(tmp_path)
    assert codes(c) == ["missing_shard"]
    assert "model-00002-of-00002.safetensors is named by" in c.problems[0]
    assert c.parameter_count == 40  # shard 1 only, and said so
    assert "parameter count covers only 1 of 2 shards (the rest are unreadable)" in c.warnings


def test_unindexed_shard(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    stn.save_file({"stray": np.zeros(2, np.float32)}, str(policy / "extra.safetensors"))
    c = validate(tmp_path)
    assert codes(c) == ["unindexed_shard"]
    assert c.parameter_count == 176  # the stray file is not counted


def test_tensor_not_in_shard(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    edit_index(policy, lambda ix: ix["weight_map"].update({"model.ghost": "model-00001-of-00002.safetensors"}))
    c = validate(tmp_path)
    assert codes(c) == ["tensor_not_in_shard"]
    assert "model.ghost" in c.problems[0]


def test_truncated_and_overlong_shard(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    shard = policy / "model-00002-of-00002.safetensors"
    size = shard.stat().st_size
    with shard.open("r+b") as fh:
        fh.truncate(size - 10)
    c = validate(tmp_path)
    assert codes(c) == ["truncated_shard"] and "short by 10" in c.problems[0]
    with shard.open("r+b") as fh:
        fh.truncate(size + 3)
    c = validate(tmp_path)
    assert codes(c) == ["truncated_shard"] and "3 more than its header describes" in c.problems[0]


def test_corrupt_header(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    shard = policy / "model-00001-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[8:12] = b"\xff\xfe[["
    shard.write_bytes(bytes(data))
    c = validate(tmp_path)
    assert codes(c) == ["corrupt_header"]
    assert "model-00001-of-00002.safetensors: header is not UTF-8" in c.problems[0]


def test_corrupt_index_is_reported(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    (policy / "model.safetensors.index.json").write_text("[" * 10_000)
    c = validate(tmp_path)
    assert codes(c) == ["corrupt_header"] and "model.safetensors.index.json is unreadable" in c.problems[0]


def test_index_total_size_mismatch(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    edit_index(policy, lambda ix: ix["metadata"].update({"total_size": 705}))
    c = validate(tmp_path)
    assert codes(c) == ["index_total_size_mismatch"]
    assert "705" in c.problems[0] and "704" in c.problems[0]


def test_missing_config_and_tokenizer(tmp_path: Path) -> None:
    make_export(tmp_path, config=None, tokenizer=False)
    c = validate(tmp_path)
    assert codes(c) == ["missing_config", "missing_tokenizer"]
    assert c.estimated_parameter_count is None


def test_tokenizer_model_alone_is_enough(tmp_path: Path) -> None:
    policy = make_export(tmp_path, tokenizer=False)
    (policy / "tokenizer.model").write_bytes(b"\x00sentencepiece")
    assert validate(tmp_path).valid


def test_step_mismatch_from_trainer_state_and_shard_metadata(tmp_path: Path) -> None:
    policy = make_export(tmp_path, metadata={"format": "pt", "global_step": "9"})
    (policy / "trainer_state.json").write_text(json.dumps({"global_step": 8}))
    c = validate(tmp_path)
    assert codes(c) == ["step_mismatch"] * 3
    assert any("trainer_state.json global_step=8" in p for p in c.problems)


def test_matching_step_metadata_is_fine(tmp_path: Path) -> None:
    policy = make_export(tmp_path, metadata={"format": "pt", "step": "10"})
    (policy / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    assert validate(tmp_path).valid


def test_beyond_last_saved_step(tmp_path: Path) -> None:
    make_export(tmp_path, step=12)
    assert codes(validate(tmp_path, step=12, marker=10)) == ["beyond_last_saved_step"]
    # marker == budget + 1 (SkyRL's final save) with the export at the marker: fine.
    assert validate(tmp_path, step=12, marker=12, metric_steps=range(1, 12), budget=11).valid


def test_unknown_marker_warns(tmp_path: Path) -> None:
    make_export(tmp_path)
    c = validate(tmp_path, marker=None)
    assert c.valid and any("no readable checkpoint marker" in w for w in c.warnings)


def test_metric_coverage_gap(tmp_path: Path) -> None:
    make_export(tmp_path)
    c = validate(tmp_path, metric_steps=[1, 2, 3, 6, 8, 9], budget=20)
    assert codes(c) == ["metric_coverage_gap"]
    assert "steps 4-5, 7, 10 within [1, 10]" in c.problems[0]
    # Steps above the budget have no metric row by design.
    make_export(tmp_path / "b", step=11)
    assert validate(tmp_path / "b", step=11, marker=11, metric_steps=range(1, 11), budget=10).valid


def test_missing_index(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    (policy / "model.safetensors.index.json").unlink()
    c = validate(tmp_path)
    assert codes(c) == ["missing_index"]
    assert c.parameter_count == 176  # headers are still read


def test_no_weights(tmp_path: Path) -> None:
    make_export(tmp_path, shards=[], index=False)
    c = validate(tmp_path)
    assert codes(c) == ["no_weights"] and c.parameter_count is None and c.size_label is None


def test_unsafe_paths_are_never_read(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    secret = tmp_path / "secret.safetensors"
    stn.save_file({"x": np.zeros(1, np.float32)}, str(secret))
    names = ["../../../secret.safetensors", str(secret), "sub/model.safetensors", "a\\..\\b.safetensors"]
    edit_index(policy, lambda ix: ix["weight_map"].update({f"t{i}": n for i, n in enumerate(names)}))
    storage = RecordingStorage()
    c = validate_candidate(storage, make_layout(tmp_path), 10, metric_steps=None, step_budget=None)
    assert codes(c) == ["unsafe_path"] * 4
    assert all(uri.startswith(str(policy) + "/") for uri in storage.read)
    assert str(secret) not in storage.read


def test_shard_naming_implies_missing_shard(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    for k in (1, 2):
        (policy / f"model-0000{k}-of-00002.safetensors").rename(policy / f"model-0000{k}-of-00003.safetensors")
    edit_index(
        policy,
        lambda ix: ix.update({"weight_map": {t: s.replace("00002.", "00003.") for t, s in ix["weight_map"].items()}}),
    )
    c = validate(tmp_path)
    assert codes(c) == ["missing_shard"]
    assert "model-00003-of-00003.safetensors is implied by the 3-shard naming" in c.problems[0]


def test_parameter_estimate_warning_names_both_numbers(tmp_path: Path) -> None:
    make_export(tmp_path, config={**CONFIG, "hidden_size": 4096})
    c = validate(tmp_path)
    assert c.valid  # a warning, not a problem
    assert c.parameter_count == 176
    [warning] = _findings(c.warnings)
    assert "176" in warning and f"{12 * 4096**2 + 2 * 32 * 4096:,}" in warning and "header sum" in warning


def test_estimate_close_enough_no_warning(tmp_path: Path) -> None:
    # 176 counted vs 12*1*3*3 + 2*12*3 = 180: 2.3% off.
    make_export(tmp_path, config={"num_hidden_layers": 1, "hidden_size": 3, "vocab_size": 12})
    c = validate(tmp_path)
    assert c.valid and _findings(c.warnings) == [] and c.estimated_parameter_count == 180


def test_many_shards_concurrently(tmp_path: Path) -> None:
    shards = [{f"layer.{k}.w": np.zeros((k + 1, 4), np.float32)} for k in range(24)]
    make_export(tmp_path, shards=shards)
    c = validate(tmp_path, workers=16)
    assert c.valid, c.problems
    assert (c.shard_count, c.parameter_count) == (24, sum(4 * (k + 1) for k in range(24)))


class ConcurrencyStorage(LocalStorage):
    """LocalStorage whose ranged reads are held until `target` are in flight at once (or 5 s pass): records the peak."""

    def __init__(self, target: int) -> None:
        super().__init__(checksums=True)
        self.cond = threading.Condition()
        self.target = target
        self.active = self.peak = 0
        self.reads: list[str] = []

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        with self.cond:
            self.reads.append(uri)
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.peak >= self.target, timeout=5)
        try:
            return super().read_range(uri, start, length)
        finally:
            with self.cond:
                self.active -= 1


@pytest.mark.parametrize(("shards", "workers", "peak"), [(30, HEADER_WORKERS, 32), (40, 8, 8), (3, 1, 1)])
def test_header_pool_is_bounded(tmp_path: Path, shards: int, workers: int, peak: int) -> None:
    # A 70B export has 30 shards: after the listing the default pool reads config.json, the index and all 30
    # headers in one round (no chain config -> index -> headers), never more than `workers` at once.
    assert 32 <= HEADER_WORKERS <= 64
    policy = make_export(tmp_path, shards=[{f"layer.{k}.w": np.zeros((1, 4), np.float32)} for k in range(shards)])
    storage = ConcurrencyStorage(target=peak)
    c = validate_candidate(storage, make_layout(tmp_path), 10, metric_steps=None, step_budget=None, workers=workers)
    assert c.valid, c.problems
    assert storage.peak == peak
    assert sorted(storage.reads) == sorted(
        str(policy / n)
        for n in ["config.json", "model.safetensors.index.json", *(p.name for p in policy.glob("*.safetensors"))]
    )  # each once


class CountingLocal(LocalStorage):
    """LocalStorage counting every call that reaches the store, per kind."""

    def __init__(self, fail: type[Exception] | None = None, sizes: dict[str, int] | None = None) -> None:
        super().__init__(checksums=True)
        self.calls: list[tuple[str, str]] = []
        self.fail, self.sizes = fail, sizes or {}
        self.lock = threading.Lock()

    def _note(self, kind: str, uri: str) -> None:
        with self.lock:
            self.calls.append((kind, Path(uri).name))

    def stat(self, uri: str) -> ObjectInfo | None:
        self._note("stat", uri)
        return super().stat(uri)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        self._note("list", prefix_uri)
        for info in super().list(prefix_uri):  # a listing that reports other sizes: files rewritten since
            yield ObjectInfo(info.uri, self.sizes.get(Path(info.uri).name, info.size), info.crc32c)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        self._note("read_range", uri)
        if self.fail is not None:
            time.sleep(0.05)
            raise self.fail(f"outage reading {uri}")
        return super().read_range(uri, start, length)

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        self._note("read_bytes", uri)
        return super().read_bytes(uri, max_bytes)


def test_candidates_one_after_the_other_reuse_the_pool_threads(tmp_path: Path) -> None:
    make_export(tmp_path, shards=[{f"layer.{k}.w": np.zeros((1, 4), np.float32)} for k in range(12)])
    threads: list[set[int]] = []
    for _ in range(3):
        storage = ConcurrencyStorage(target=14)  # config.json, the index and 12 headers at once
        idents: set[int] = set()
        real = storage.read_range

        def read(uri: str, start: int, length: int, idents: set[int] = idents, real: Any = real) -> bytes:
            idents.add(threading.get_ident())
            return real(uri, start, length)

        storage.read_range = read  # type: ignore[method-assign]
        c = validate_candidate(storage, make_layout(tmp_path), 10, metric_steps=None, step_budget=None, workers=14)
        assert c.valid and storage.peak == 14
        threads.append(idents)
    assert len(threads[0]) == 14 and threads[0] == threads[1] == threads[2]  # no thread started or joined per candidate


def test_one_request_per_object_after_one_listing(tmp_path: Path) -> None:
    policy = make_export(tmp_path, shards=[{f"layer.{k}.w": np.zeros((1, 4), np.float32)} for k in range(5)])
    (policy / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    storage = CountingLocal()
    c = validate_candidate(storage, make_layout(tmp_path), 10, metric_steps=None, step_budget=None)
    assert c.valid, c.problems
    shards = sorted(p.name for p in policy.glob("*.safetensors"))
    assert storage.calls[0] == ("list", "policy")
    assert sorted(storage.calls[1:]) == sorted(
        ("read_range", n) for n in ["config.json", "model.safetensors.index.json", "trainer_state.json", *shards]
    )  # no stat, no whole-object read, nothing read twice; tokenizer and generation_config are never read


def test_storage_outage_propagates_and_cancels_queued_reads(tmp_path: Path) -> None:
    make_export(tmp_path, shards=[{f"layer.{k}.w": np.zeros((1, 4), np.float32)} for k in range(30)])
    storage = CountingLocal(fail=StorageError)
    with pytest.raises(StorageError, match=r"config\.json"):
        validate_candidate(storage, make_layout(tmp_path), 10, metric_steps=None, step_budget=None, workers=1)
    reads = [name for kind, name in storage.calls if kind == "read_range"]
    assert reads[0] == "config.json" and len(reads) <= 2  # not 32 doomed requests


def test_json_file_rewritten_since_the_listing_is_unreadable(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    size = (policy / "config.json").stat().st_size
    for listed, said in [
        (size - 1, f"changed since the listing ({size - 1} bytes listed, {size}+ read)"),
        (size + 5, f"changed since the listing ({size + 5} bytes listed, {size} read)"),
    ]:
        storage = CountingLocal(sizes={"config.json": listed})
        c = validate_candidate(storage, make_layout(tmp_path), 10, metric_steps=None, step_budget=None)
        assert codes(c) == ["missing_config"] and said in c.problems[0], c.problems


def test_oversized_json_is_refused_without_reading_it(tmp_path: Path) -> None:
    make_export(tmp_path)
    storage = CountingLocal(sizes={"model.safetensors.index.json": 2**40})
    c = validate_candidate(storage, make_layout(tmp_path), 10, metric_steps=None, step_budget=None)
    assert codes(c) == ["corrupt_header"] and "larger than the" in c.problems[0]
    assert ("read_range", "model.safetensors.index.json") not in storage.calls


def test_odd_listed_shard_names_are_read_only_when_the_plan_needs_them(tmp_path: Path) -> None:
    # Without an index every listed shard counts: one whose name looks like traversal is still a listed object
    # inside the export (read after the plan, not ahead of it).
    policy = make_export(tmp_path, index=False)
    stn.save_file({"odd": np.zeros(3, np.float32)}, str(policy / "x..y.safetensors"))
    storage = CountingLocal()
    c = validate_candidate(storage, make_layout(tmp_path), 10, metric_steps=None, step_budget=None)
    assert codes(c) == ["missing_index"] and c.parameter_count == 179
    assert storage.calls.count(("read_range", "x..y.safetensors")) == 1


def test_problems_are_capped(tmp_path: Path) -> None:
    policy = make_export(tmp_path)
    edit_index(policy, lambda ix: ix["weight_map"].update({f"g{i}": f"gone-{i}.safetensors" for i in range(100)}))
    c = validate(tmp_path)
    assert len(c.problems) == 21 and c.problems[-1] == "missing_shard: ... and 80 more like the above"


@pytest.mark.parametrize(
    ("count", "label"),
    [(9_700_000_000, "10B"), (70_553_706_496, "71B"), (1_000_000_000, "1B"), (131_072, "131K"), (7_200_000, "7.2M")],
)
def test_size_label(count: int, label: str) -> None:
    assert size_label(count) == label


def test_estimate_and_gaps_helpers() -> None:
    llama70 = {"num_hidden_layers": 80, "hidden_size": 8192, "vocab_size": 128256}
    assert estimate_parameters({"text_config": llama70}) == 12 * 80 * 8192**2 + 2 * 128256 * 8192
    assert estimate_parameters({"hidden_size": 8}) is None
    assert coverage_gaps([5, 7], 5, 10**12) == [(6, 6), (8, 10**12)]  # linear in rows, not steps


# ---------------------------------------------------------------- resume safety


def torch_like_save(obj: Any) -> bytes:
    """torch.save's zip container: `<name>/data.pkl` (we only need the pickle inside)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("trainer_state/data.pkl", pickle.dumps(obj, protocol=2))
        zf.writestr("trainer_state/version", "3\n")
    return buf.getvalue()


def make_checkpoint(
    root: Path, step: int, world: int = 2, global_step: int | None = None, roles: tuple[str, ...] = ("policy",)
) -> Path:
    d = root / "checkpoints" / f"global_step_{step}"
    for role in roles:
        (d / role / "huggingface").mkdir(parents=True)
        (d / role / "fsdp_config.json").write_text(json.dumps({"fsdp_strategy": "fsdp2", "world_size": world}))
        (d / role / "huggingface" / "config.json").write_text("{}")
        for r in range(world):
            for kind in ("model", "optim", "extra_state"):
                (d / role / f"{kind}_world_size_{world}_rank_{r}.pt").write_bytes(b"x")
    state = {"global_step": step if global_step is None else global_step, "config": {"trainer": {"epochs": 1}}}
    (d / "trainer_state.pt").write_bytes(torch_like_save(state))
    (d / "data.pt").write_bytes(b"data")
    return d


def resume(root: Path, marker: int | None = 10, **kw: Any) -> Any:
    return check_resume_safety(LocalStorage(checksums=False), make_layout(root, marker=marker, **kw))


def rcodes(r: Any) -> list[str]:
    return sorted(p.split(":", 1)[0] for p in r.reasons if not p.startswith("global_step_"))


def test_resume_safe(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10, roles=("policy", "critic"))
    r = resume(tmp_path)
    assert r.safe and r.from_step == 10
    assert r.reasons == ["global_step_10 is complete and matches the marker"]


def test_resume_marker_missing_and_unreadable(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10)
    r = resume(tmp_path, marker=None)
    assert not r.safe and r.from_step is None and rcodes(r) == ["marker_missing"]
    assert "is absent; checkpoint dirs present: 10" in r.reasons[0]
    (tmp_path / "checkpoints" / "latest_ckpt_global_step.txt").write_text("ten")
    assert "is not an integer" in resume(tmp_path, marker=None).reasons[0]


def test_resume_missing_checkpoint_dir(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 5)
    r = resume(tmp_path, marker=10)
    assert rcodes(r) == ["missing_checkpoint_dir"] and "present: 5" in r.reasons[0]


def test_resume_missing_trainer_state_and_data(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, 10)
    (d / "trainer_state.pt").unlink()
    (d / "data.pt").unlink()
    r = resume(tmp_path)
    assert not r.safe and rcodes(r) == ["missing_trainer_state"] * 2
    assert any("data.pt" in p for p in r.reasons)


def test_resume_missing_rank_shard(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, 10, world=4)
    (d / "policy" / "optim_world_size_4_rank_1.pt").unlink()
    (d / "policy" / "optim_world_size_4_rank_2.pt").unlink()
    r = resume(tmp_path)
    assert rcodes(r) == ["missing_rank_shard"]
    assert "policy/optim_world_size_4_rank_<r>.pt absent for ranks 1-2 of 0-3" in r.reasons[0]


def test_resume_world_size_mismatch_between_config_and_files(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, 10, world=2)
    (d / "policy" / "fsdp_config.json").write_text(json.dumps({"world_size": 4}))
    assert rcodes(resume(tmp_path)) == ["missing_rank_shard"] * 3


def test_resume_marker_step_mismatch(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10, global_step=9)
    r = resume(tmp_path)
    assert rcodes(r) == ["marker_step_mismatch"] and "global_step=9" in r.reasons[0]


def test_resume_inconsistent_checkpoint_folder(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10)
    make_checkpoint(tmp_path, 20)  # within ckpt_interval: an unfinished save SkyRL tolerates
    r = resume(tmp_path)
    assert r.safe and "step dirs 20 above it" in r.reasons[0]
    make_checkpoint(tmp_path, 31)
    r = resume(tmp_path)
    assert rcodes(r) == ["inconsistent_checkpoint_folder"] and "global_step_31" in r.reasons[0]


def test_resume_default_interval_is_stated(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10)
    r = resume(tmp_path, skyrl={})
    assert r.safe and any("assumed the SkyRL default 10" in x for x in r.reasons)


def test_resume_megatron(tmp_path: Path) -> None:
    """run-layout-v2.md §5: common.pt, every __<rank>_<i>.distcp, .metadata, and metadata.json written LAST."""
    d = tmp_path / "checkpoints" / "global_step_10"
    (d / "policy").mkdir(parents=True)
    (d / "trainer_state.pt").write_bytes(torch_like_save({"global_step": 10}))
    (d / "data.pt").write_bytes(b"d")
    (d / "policy" / "common.pt").write_bytes(b"c")  # the SIGBUS remnant: 421 KB of common.pt and nothing else
    megatron = {"trainer": {"strategy": "megatron", "ckpt_interval": 5}}
    assert rcodes(resume(tmp_path, skyrl=megatron)) == [
        "missing_dist_checkpoint_config",
        "missing_distcp_metadata",
        "missing_distcp_shard",
    ]
    # An async save: the marker and the shards of ranks 0 and 2 landed, rank 1's did not, no metadata.json yet.
    for name in ("__0_0.distcp", "__0_1.distcp", "__2_0.distcp", ".metadata"):
        (d / "policy" / name).write_bytes(b"x")
    safety = resume(tmp_path, skyrl=megatron)
    assert rcodes(safety) == ["missing_dist_checkpoint_config", "missing_distcp_shard"]
    assert any("absent for ranks 1 of 0-2" in r for r in safety.reasons)
    (d / "policy" / "__1_0.distcp").write_bytes(b"x")
    assert rcodes(resume(tmp_path, skyrl=megatron)) == ["missing_dist_checkpoint_config"]
    (d / "policy" / "metadata.json").write_text('{"sharded_backend": "torch_dist", "sharded_backend_version": 1}')
    assert resume(tmp_path, skyrl=megatron).safe
    (d / "policy" / "common.pt").write_bytes(b"")
    assert rcodes(resume(tmp_path, skyrl=megatron)) == ["missing_common_state"]


def test_resume_fsdp_doc_only_naming_is_accepted_and_flagged(tmp_path: Path) -> None:
    d = tmp_path / "checkpoints" / "global_step_10"
    (d / "policy").mkdir(parents=True)
    (d / "trainer_state.pt").write_bytes(torch_like_save({"global_step": 10}))
    (d / "data.pt").write_bytes(b"d")
    (d / "policy" / "model_state.pt").write_bytes(b"m")
    (d / "policy" / "optimizer_state.pt").write_bytes(b"o")
    safety = resume(tmp_path, skyrl={"trainer": {"strategy": "fsdp2", "ckpt_interval": 5}})
    assert safety.safe
    assert any("documentation-only naming" in r for r in safety.reasons)


def test_pickled_global_step_formats() -> None:
    assert pickled_global_step(torch_like_save({"global_step": 123456, "config": {}})) == 123456
    legacy = b"".join(pickle.dumps(x, protocol=2) for x in (0x1950A86A20F9469CFC6C, 1001, {}, {"global_step": 7}))
    assert pickled_global_step(legacy) == 7
    assert pickled_global_step(pickle.dumps({"global_step": 3}, protocol=4)) == 3
    assert pickled_global_step(b"garbage\x00" * 10) is None
    assert pickled_global_step(struct.pack("<Q", 1)) is None


def _findings(warnings: list[str]) -> list[str]:
    """Warnings minus the optional tensor-layout check's skip note (recorded when transformers is absent)."""
    return [w for w in warnings if not w.startswith("tensor layout check skipped: ")]
