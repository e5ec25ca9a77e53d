"""Validate a 70B-shaped export and show what it costs: bytes read, requests per shard, wall time.

The export is llama-70B shaped (L=80, H=8192, V=128256, intermediate 28672, GQA 8 KV heads, bf16) in 30 shards
with real safetensors headers. Tensor data is a sparse hole (truncate), so ~141 GB of "weights" cost no disk.
Run: .venv/bin/python bench/bench_validate.py
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import figure
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.ports.storage import ObjectInfo
from rlcleanup.samples.large_exports import bf16_shard_head
from rlcleanup.samples.large_exports import llama70b_tensors as llama_tensors
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.validate import validate_candidate

LAYERS, HIDDEN, VOCAB, INTERMEDIATE, KV_HEADS, HEAD_DIM = 80, 8192, 128256, 28672, 8, 128
SHARDS = 30
STEP = 100
BF16 = 2


class CountingStorage:
    """LocalStorage (checksums off: on GCS they are free metadata, locally they would read every byte)."""

    def __init__(self) -> None:
        self.inner = LocalStorage(checksums=False)
        self.bytes = 0
        self.requests: Counter[str] = Counter()

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        data = self.inner.read_range(uri, start, length)
        self.bytes += len(data)
        self.requests[uri] += 1
        return data

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        data = self.inner.read_bytes(uri, max_bytes)
        self.bytes += len(data)
        self.requests[uri] += 1
        return data

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix_uri)

    def stat(self, uri: str) -> ObjectInfo | None:
        return self.inner.stat(uri)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def nbytes(shape: list[int]) -> int:
    n = BF16
    for d in shape:
        n *= d
    return n


def write_shard(path: Path, tensors: list[tuple[str, list[int]]]) -> int:
    """Real header (8-byte aligned like the library's), then a sparse data section of the right length."""
    head, data_len = bf16_shard_head(tensors)
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + data_len)
    return len(head)


def build_export(root: Path) -> tuple[Path, int]:
    """Returns (policy dir, Σ(8 + header_len))."""
    policy = root / "exports" / f"global_step_{STEP}" / "policy"
    policy.mkdir(parents=True)
    tensors = llama_tensors()
    total_bytes = sum(nbytes(s) for _, s in tensors)
    groups: list[list[tuple[str, list[int]]]] = [[] for _ in range(SHARDS)]
    cursor = 0
    for name, shape in tensors:  # shard by where the tensor's middle byte falls: 30 even-ish shards, in order
        groups[min(SHARDS - 1, (cursor + nbytes(shape) // 2) * SHARDS // total_bytes)].append((name, shape))
        cursor += nbytes(shape)
    weight_map, total, header_bytes = {}, 0, 0
    for k, group in enumerate(groups, start=1):
        name = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
        header_bytes += write_shard(policy / name, group)
        for tensor, shape in group:
            weight_map[tensor] = name
            total += nbytes(shape)
    (policy / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    config = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": LAYERS,
        "hidden_size": HIDDEN,
        "vocab_size": VOCAB,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": 64,
        "num_key_value_heads": KV_HEADS,
        "torch_dtype": "bfloat16",
    }
    (policy / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        (policy / name).write_text("{}")
    return policy, header_bytes


def layout_for(root: Path) -> RunLayout:
    return RunLayout(
        run_uri=str(root),
        kind="A",
        config_uri=str(root / "resolved-skyrl.json"),
        config_bytes=b"{}",
        config={},
        skyrl={},
        temp_root=None,
        checkpoints_root=str(root / "checkpoints"),
        exports_root=str(root / "exports"),
        attempts=[],
        marker_step=STEP,
        export_steps=[STEP],
    )


def run(root: Path, header_bytes: int, policy: Path, first_block: int) -> None:
    storage = CountingStorage()
    start = time.perf_counter()
    cand = validate_candidate(
        storage, layout_for(root), STEP, metric_steps=range(1, STEP + 1), step_budget=STEP, first_block=first_block
    )
    wall = time.perf_counter() - start
    shards = sorted(p for p in policy.glob("*.safetensors"))
    small = (policy / "model.safetensors.index.json").stat().st_size + (policy / "config.json").stat().st_size
    minimum = header_bytes + small
    naive = sum(p.stat().st_size for p in shards)
    per_shard = Counter(storage.requests[str(p)] for p in shards)
    print(f"first_block={first_block:,} B")
    print(f"  valid={cand.valid} problems={cand.problems} warnings={cand.warnings}")
    print(
        f"  parameters: {cand.parameter_count:,} ({cand.size_label}); config estimate {cand.estimated_parameter_count:,}"
    )
    print(f"  shards={cand.shard_count}  export bytes={cand.total_bytes:,}")
    print(f"  bytes read:        {storage.bytes:>16,}")
    print(f"  physical minimum:  {minimum:>16,}  (Σ(8+header_len) {header_bytes:,} + index + config {small:,})")
    print(f"  naive full read:   {naive:>16,}  ({naive / max(storage.bytes, 1):,.0f}x what we read)")
    print(f"  requests per shard: {dict(sorted(per_shard.items()))}  (requests -> shards)")
    if first_block == 64 * 1024:  # the default (the 1 KiB run shows a header past the first block: 2 reads)
        mean = sum(k * v for k, v in per_shard.items()) / max(len(shards), 1)
        figure("ranged requests per shard (70B export, local)", f"{mean:.3f}", "1.000")
    print(f"  wall time: {wall * 1000:.1f} ms")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        policy, header_bytes = build_export(root)
        print(f"built a 70B-shaped export in {time.perf_counter() - start:.2f} s (sparse: no tensor bytes on disk)")
        for first_block in (64 * 1024, 1024):  # the default, and one smaller than a header
            run(root, header_bytes, policy, first_block)


if __name__ == "__main__":
    main()
