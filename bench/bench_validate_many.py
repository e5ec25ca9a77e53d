"""Validate many 70B-shaped exports through the Storage port, on local files and on fake-gcs-server.

40 exports x 30 shards (1,200 shards; llama-70B headers) by default, `--exports N` to change it. Reports
requests per shard, bytes read vs the physical minimum (Σ(8 + header_len) + index + config.json) vs a naive full
read, and wall time of the bounded concurrent pool (validate_candidate's header pool, one candidate after the
other as the runtime's per-candidate messages would run) vs a sequential two-request reader (8-byte length, then
the header) over the same shards.

Substitution on the emulator: fake-gcs-server keeps objects in memory, so it cannot hold 40 x 141 GB. Its shards
carry the real 70B header and no data section; every shard therefore also reports `truncated_shard`, which does
not change the number of requests (the header path is identical); the speculative first read (64 KiB) is capped by
the header-only object's size there, so on full-size GCS objects bytes read match the local figure. Local shards are
full-size sparse files. A third pass adds a fixed delay per request (--latency-ms, default 20) to model real GCS
latency, which the local emulator (about 5 ms per request, CPU-bound on both ends) does not have.
Run: .venv/bin/python bench/bench_validate_many.py [--exports N] [--latency-ms MS] [--repeat K]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import CountingStorage, fake_gcs, fmt_bytes, gcs_client
from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.safetensors_header import SafetensorsHeader, parse_header
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.samples.large import export_template, write_70b_export
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.validate import validate_candidate


def layout(root: str, steps: list[int]) -> RunLayout:
    return RunLayout(
        run_uri=root,
        kind="A",
        config_uri=f"{root}/resolved-skyrl.json",
        config_bytes=b"{}",
        config={},
        skyrl={},
        temp_root=None,
        checkpoints_root=f"{root}/checkpoints",
        exports_root=f"{root}/exports",
        attempts=[],
        marker_step=max(steps),
        export_steps=steps,
    )


def build_local(root: Path, steps: list[int]) -> None:
    template = export_template()
    for step in steps:
        write_70b_export(root / "exports" / f"global_step_{step}" / "policy", template)


def upload(client: Any, bucket: str, local: Path, steps: list[int]) -> None:
    """Every small file as is; each shard as its real header only (see the module docstring)."""
    b = client.bucket(bucket)

    def put(path: Path) -> None:
        key = f"run/{path.relative_to(local)}"
        if path.suffix == ".safetensors":
            with path.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                fh.seek(0)
                data = fh.read(8 + n)
        else:
            data = path.read_bytes()
        b.blob(key).upload_from_string(data)

    files = [p for step in steps for p in (local / "exports" / f"global_step_{step}" / "policy").iterdir()]
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, files))


def sequential_two_request(storage: Storage, shards: list[tuple[str, int]]) -> tuple[float, list[SafetensorsHeader]]:
    """The baseline reader: per shard, request 1 = the 8-byte length, request 2 = the header; one at a time."""
    t0 = time.perf_counter()
    headers = []
    for uri, _ in shards:
        (n,) = struct.unpack("<Q", storage.read_range(uri, 0, 8))
        body = struct.pack("<Q", n) + storage.read_range(uri, 8, n)
        headers.append(parse_header(body, 1 << 62))  # the promised size, not the (emulator-truncated) object's
    return time.perf_counter() - t0, headers


class LatencyStorage(CountingStorage):
    """Adds a fixed delay to every request: a model of real GCS first-byte latency on top of the emulator."""

    def __init__(self, inner: Storage, seconds: float) -> None:
        super().__init__(inner)
        self.delay = seconds

    def stat(self, uri: str) -> ObjectInfo | None:
        time.sleep(self.delay)
        return self.inner.stat(uri)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        time.sleep(self.delay)
        return self.inner.list(prefix_uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        time.sleep(self.delay)
        return self.inner.read_range(uri, start, length)

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        time.sleep(self.delay)
        return self.inner.read_bytes(uri, max_bytes)


def measure(name: str, storage: Storage, root: str, steps: list[int], expect_codes: set[str]) -> dict[str, float]:
    counting = CountingStorage(storage)
    lay = layout(root, steps)
    t0 = time.perf_counter()
    cands = [validate_candidate(counting, lay, s, metric_steps=None, step_budget=None) for s in steps]
    pool_wall = time.perf_counter() - t0
    with ThreadPoolExecutor(len(steps)) as fan:  # one invocation per candidate, all at once (the fan-out)
        t0 = time.perf_counter()
        list(fan.map(lambda s: validate_candidate(storage, lay, s, metric_steps=None, step_budget=None), steps))
        fan_wall = time.perf_counter() - t0
    shards = [(o.uri, o.size) for s in steps for o in storage.list(lay.export_uri(s)) if o.uri.endswith(".safetensors")]
    small = [
        o.size
        for s in steps
        for o in storage.list(lay.export_uri(s))
        if o.uri.endswith(("model.safetensors.index.json", "/config.json"))
    ]
    seq_wall, headers = sequential_two_request(storage, shards)
    minimum = sum(8 + h.header_len for h in headers) + sum(small)
    naive = sum(h.expected_size for h in headers) + sum(small)  # what the full-size objects hold
    per_shard = Counter(counting.requests[u] for u, _ in shards)
    codes = {p.split(":", 1)[0] for c in cands for p in c.problems}
    assert codes <= expect_codes, f"unexpected problems: {codes - expect_codes}"
    print(f"{name}: {len(steps)} exports, {len(shards):,} shards, {cands[0].size_label} parameters each")
    print(f"  problems: {sorted(codes) or 'none'} (expected: {sorted(expect_codes) or 'none'})")
    print(f"  requests per shard: {sum(k * v for k, v in per_shard.items()) / len(shards):.3f}  {dict(per_shard)}")
    print(f"  bytes read {fmt_bytes(counting.bytes_in)} | physical minimum {fmt_bytes(minimum)}", end="")
    print(
        f" ({counting.bytes_in / minimum:.2f}x) | naive full read {fmt_bytes(naive)} ({naive / counting.bytes_in:,.0f}x ours)"
    )
    print(f"  wall: pool {pool_wall:.2f} s (exports one by one), fan-out {fan_wall:.2f} s (exports at once)")
    print(f"        sequential two-request reader {seq_wall:.2f} s (headers only, no listing or index)")
    print(f"  speed-up vs sequential: pool {seq_wall / pool_wall:.1f}x, fan-out {seq_wall / fan_wall:.1f}x")
    return {"pool": pool_wall, "fan": fan_wall, "seq": seq_wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exports", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=1, help="repeat the GCS measurement, report medians")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="also measure with this delay per request (0: skip)")
    args = ap.parse_args()
    steps = [5 * (i + 1) for i in range(args.exports)]
    with tempfile.TemporaryDirectory(prefix="bench-validate-many-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        build_local(root, steps)
        print(f"built {args.exports} sparse 70B exports in {time.perf_counter() - t0:.1f} s")
        measure("local (sparse full-size shards)", LocalStorage(checksums=False), str(root), steps, set())
        with fake_gcs() as url:
            client = gcs_client(url)
            client.create_bucket("bench")
            t0 = time.perf_counter()
            upload(client, "bench", root, steps)
            print(f"uploaded to fake-gcs-server in {time.perf_counter() - t0:.1f} s")
            gcs = GcsStorage(client)
            runs = [
                measure("fake-gcs-server (header-only shards)", gcs, "gs://bench/run", steps, {"truncated_shard"})
                for _ in range(args.repeat)
            ]
            if args.repeat > 1:
                med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                print(
                    f"  median of {args.repeat}: pool {med['seq'] / med['pool']:.1f}x, fan-out {med['seq'] / med['fan']:.1f}x"
                )
            if args.latency_ms > 0:
                name = f"fake-gcs-server + {args.latency_ms:g} ms injected per request (modelled GCS latency)"
                slow = LatencyStorage(gcs, args.latency_ms / 1000)
                measure(name, slow, "gs://bench/run", steps, {"truncated_shard"})


if __name__ == "__main__":
    main()
