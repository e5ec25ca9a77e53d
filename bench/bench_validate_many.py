"""Validate many 70B-shaped exports through the Storage port, on local files and on fake-gcs-server.

8 exports x 30 shards by default (CI size), `--full` for the issue's 40 x 30 (1,200 shards; llama-70B headers),
`--exports N` for any other count. Reports requests per shard, bytes read vs the physical minimum
(Σ(8 + header_len) + index + config.json) vs a naive full read, and wall time of:
  baseline   a sequential two-request reader on the stock google-cloud-storage client: per shard
             `blob.download_as_bytes(start=0, end=7)`, then the header; one shard after the other
  ours, 1    validate_candidate with one header worker (GcsStorage's lean ranged GET, 1 request per shard)
  ours, blob validate_candidate with the bounded header pool, ranged reads through blob.download_as_bytes
  one-by-one validate_candidate with the bounded header pool and the lean ranged GET, one candidate after the
             other (a lone candidate's message: the single-target path)
  ours, pool what production runs: the candidates in batches of CANDIDATES_PER_BATCH (8), each batch as one
             candidate-validation message's invocation validates it (steps/validate.validate_many: the batch's
             listings overlap, then its header rounds, each candidate with its own bounded header pool)
  fan-out    every candidate at once, each with its own GcsStorage (its own connections), as one-candidate
             messages would run in separate invocations
ours-1 vs baseline is the reader's own gain, one-by-one vs ours-1 the header pool's, pool vs one-by-one the
batch's; ours-blob isolates the HTTP path.
validate_candidate also lists the export and reads config.json and the index (3 requests per candidate the
baseline does not make): the listing, then one round in the pool (config.json, index and every shard header at
once; each JSON file one ranged read of its listed size).

Latency is real: bench/latency_proxy.py (a TCP proxy in its own process group) sits in front of fake-gcs-server
and delays every forwarded chunk by --latency-ms one way (default 10 and 25; a new connection also pays one round
trip), so both readers pay real round trips. "direct" talks to fake-gcs-server without the proxy.

Substitution on the emulator: fake-gcs-server keeps objects in memory, so it cannot hold 40 x 141 GB. Its shards
carry the real 70B header and no data section; every shard therefore also reports `truncated_shard`, which does
not change the number of requests (the header path is identical); the speculative first read (64 KiB) is capped by
the header-only object's size there, so on full-size GCS objects bytes read match the local figure. Local shards are
full-size sparse files.
Run: .venv/bin/python bench/bench_validate_many.py [--full | --exports N] [--latency-ms MS ...] [--workers W]
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import struct
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from _common import CountingStorage, fake_gcs, figure, fmt_bytes, gcs_client
from latency_proxy import latency_proxy
from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.checkpoints.base import HEADER_WORKERS
from rlcleanup.formats.safetensors_header import SafetensorsHeader, parse_header
from rlcleanup.models.record import Candidate
from rlcleanup.ports.storage import Storage
from rlcleanup.samples.large_exports import export_template, write_70b_export
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.validate import CANDIDATES_PER_BATCH, validate_candidate, validate_many


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


def stock_two_request(client: Any, shards: list[str]) -> tuple[float, list[SafetensorsHeader]]:
    """The baseline: per shard, blob.download_as_bytes for the 8-byte length, then for the header; one at a time."""
    t0 = time.perf_counter()
    headers = []
    for uri in shards:
        bucket, key = uri.removeprefix("gs://").split("/", 1)
        blob = client.bucket(bucket).blob(key)
        first = blob.download_as_bytes(start=0, end=7)
        (n,) = struct.unpack("<Q", first)
        body = first + blob.download_as_bytes(start=8, end=8 + n - 1)
        headers.append(parse_header(body, 1 << 62))  # the promised size, not the (emulator-truncated) object's
    return time.perf_counter() - t0, headers


def sequential_two_request(storage: Storage, shards: list[str]) -> tuple[float, list[SafetensorsHeader]]:
    """The same two-request reader through the Storage port (the local-files line)."""
    t0 = time.perf_counter()
    headers = []
    for uri in shards:
        (n,) = struct.unpack("<Q", storage.read_range(uri, 0, 8))
        body = struct.pack("<Q", n) + storage.read_range(uri, 8, n)
        headers.append(parse_header(body, 1 << 62))
    return time.perf_counter() - t0, headers


def run_candidates(storage: Storage, lay: RunLayout, steps: list[int], workers: int) -> tuple[float, list[Candidate]]:
    t0 = time.perf_counter()
    cands = [validate_candidate(storage, lay, s, metric_steps=None, step_budget=None, workers=workers) for s in steps]
    return time.perf_counter() - t0, cands


def run_batches(storage: Storage, lay: RunLayout, steps: list[int]) -> tuple[float, list[Candidate]]:
    """The candidates as the capture fan-in batches them, each batch validated together (validate_many)."""
    t0 = time.perf_counter()
    cands: list[Candidate] = []
    for i in range(0, len(steps), CANDIDATES_PER_BATCH):
        got = validate_many(storage, lay, steps[i : i + CANDIDATES_PER_BATCH], metric_steps=None, step_budget=None)
        for outcome in got.values():
            if isinstance(outcome, Exception):
                raise outcome
            cands.append(outcome)
    return time.perf_counter() - t0, cands


@contextmanager
def on_the_wire() -> Iterator[Counter[str]]:
    """What this process sends while inside, counted on the wire rather than at the Storage port: HTTP requests
    for a shard (`shard`: the object name ends in .safetensors) and for anything else (`other`: listings,
    config.json, the index), and TCP connections opened (`connections`: each costs a round trip before its first
    request). Requests go through http.client's putrequest on both paths (the lean reader's bare connections and
    urllib3's, which subclasses it); every connection through socket.connect. fake-gcs-server and the latency
    proxy are other processes, so nothing of theirs is counted."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    putrequest, connect = http.client.HTTPConnection.putrequest, socket.socket.connect

    def counted_putrequest(self: http.client.HTTPConnection, method: str, url: str, *args: Any, **kw: Any) -> None:
        kind = "shard" if unquote(urlsplit(url).path).endswith(".safetensors") else "other"
        with lock:
            counts[kind] += 1
        putrequest(self, method, url, *args, **kw)

    def counted_connect(self: socket.socket, address: Any) -> None:
        with lock:
            counts["connections"] += 1
        connect(self, address)

    http.client.HTTPConnection.putrequest = counted_putrequest  # type: ignore[method-assign]
    socket.socket.connect = counted_connect  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        http.client.HTTPConnection.putrequest = putrequest  # type: ignore[method-assign]
        socket.socket.connect = connect  # type: ignore[method-assign]


def fan_out(make: Callable[[], Storage], lay: RunLayout, steps: list[int], workers: int) -> float:
    """All candidates at once, each with its own storage (its own connection pool), like separate invocations."""
    stores = [make() for _ in steps]
    with ThreadPoolExecutor(len(steps)) as fan:
        t0 = time.perf_counter()
        list(
            fan.map(
                lambda i: validate_candidate(
                    stores[i], lay, steps[i], metric_steps=None, step_budget=None, workers=workers
                ),
                range(len(steps)),
            )
        )
        return time.perf_counter() - t0


def shard_uris(storage: Storage, lay: RunLayout, steps: list[int]) -> tuple[list[str], int]:
    """Every shard's uri, and the bytes of the small files validation must also read (index + config.json)."""
    objects = [o for s in steps for o in storage.list(lay.export_uri(s))]
    small = sum(o.size for o in objects if o.uri.endswith(("model.safetensors.index.json", "/config.json")))
    return [o.uri for o in objects if o.uri.endswith(".safetensors")], small


def report_io(
    name: str,
    counting: CountingStorage,
    cands: list[Candidate],
    shards: list[str],
    small: int,
    headers: list[SafetensorsHeader],
    expect: set[str],
) -> None:
    minimum = sum(8 + h.header_len for h in headers) + small
    naive = sum(h.expected_size for h in headers) + small  # what the full-size objects hold
    per_shard = Counter(counting.requests[u] for u in shards)
    shard_set = set(shards)
    others = sum(n for u, n in counting.requests.items() if u not in shard_set)
    codes = {p.split(":", 1)[0] for c in cands for p in c.problems}
    assert codes <= expect, f"unexpected problems: {codes - expect}"
    print(f"{name}: {len(cands)} exports, {len(shards):,} shards, {cands[0].size_label} parameters each")
    print(f"  problems: {sorted(codes) or 'none'} (expected: {sorted(expect) or 'none'})")
    print(
        f"  requests per shard: {sum(k * v for k, v in per_shard.items()) / len(shards):.3f}  {dict(per_shard)}", end=""
    )
    print(f"; other reads per export {others / len(cands):.2f} (config.json + index) + 1 listing")
    figure(
        f"ranged requests per shard ({name})", f"{sum(k * v for k, v in per_shard.items()) / len(shards):.3f}", "1.000"
    )
    print(f"  bytes read {fmt_bytes(counting.bytes_in)} | physical minimum {fmt_bytes(minimum)}", end="")
    print(
        f" ({counting.bytes_in / minimum:.2f}x) | naive full read {fmt_bytes(naive)} ({naive / counting.bytes_in:,.0f}x ours)"
    )


def measure_local(root: str, steps: list[int], workers: int) -> None:
    storage = LocalStorage(checksums=False)
    lay = layout(root, steps)
    counting = CountingStorage(storage)
    pool_wall, cands = run_batches(counting, lay, steps)
    shards, small = shard_uris(storage, lay, steps)
    seq_wall, headers = sequential_two_request(storage, shards)
    report_io("local (sparse full-size shards)", counting, cands, shards, small, headers, set())
    print(
        f"  wall: pool {pool_wall:.2f} s vs sequential two-request reader {seq_wall:.2f} s ({seq_wall / pool_wall:.1f}x)"
    )


def measure_gcs(label: str, url: str, steps: list[int], workers: int) -> dict[str, float]:
    """Every reader against `url` (fake-gcs-server, or the latency proxy in front of it), fresh clients each."""
    lay = layout("gs://bench/run", steps)
    expect = {"truncated_shard"}
    shards, small = shard_uris(GcsStorage(gcs_client(url)), lay, steps)
    base_wall, headers = stock_two_request(gcs_client(url), shards)
    one_wall, _ = run_candidates(GcsStorage(gcs_client(url)), lay, steps, 1)
    blob_wall, _ = run_candidates(GcsStorage(gcs_client(url), lean_reads=False), lay, steps, workers)
    seq_wall, _ = run_candidates(GcsStorage(gcs_client(url)), lay, steps, workers)
    counting = CountingStorage(GcsStorage(gcs_client(url)))
    with on_the_wire() as wire:
        pool_wall, cands = run_batches(counting, lay, steps)
    client = gcs_client(url)  # one client (stat/list/config) shared, a lean range pool per candidate
    fan_wall = fan_out(lambda: GcsStorage(client), lay, steps, workers)
    report_io(f"fake-gcs-server, {label}", counting, cands, shards, small, headers, expect)
    every = wire["shard"] + wire["other"]
    print(
        f"  on the wire (pool): {wire['shard'] / len(shards):.3f} HTTP requests per shard header, "
        f"{every / len(shards):.3f} per shard with the listings, config.json and indexes ({every} requests), "
        f"{wire['connections']} connections opened"
    )
    figure(f"HTTP requests per shard header, on the wire (pool, {label})", f"{wire['shard'] / len(shards):.3f}", "<= 1")
    figure(
        f"round trips per shard, every request and connection (pool, {label})",
        f"{(every + wire['connections']) / len(shards):.3f}",
    )
    walls = {
        "baseline": base_wall,
        "ours-1": one_wall,
        "ours-blob": blob_wall,
        "one-by-one": seq_wall,
        "pool": pool_wall,
        "fan-out": fan_wall,
    }
    print(f"  wall ({len(shards):,} shards, {workers} header workers):")
    for name, wall in walls.items():
        print(
            f"    {name:10s} {wall:8.2f} s  {base_wall / wall:6.1f}x vs baseline  {wall / len(shards) * 1e3:7.2f} ms/shard"
        )
    print(
        f"  reader's own gain (ours-1 vs baseline) {base_wall / one_wall:.1f}x; header pool's (one-by-one vs ours-1)"
        f" {one_wall / seq_wall:.1f}x; batch's (pool vs one-by-one) {seq_wall / pool_wall:.1f}x"
    )
    return walls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="the issue's size: 40 exports (1,200 shards)")
    ap.add_argument("--exports", type=int, default=None, help="number of exports (default 8, 40 with --full)")
    ap.add_argument("--latency-ms", type=float, nargs="*", default=[10.0, 25.0], help="one-way delays (0: direct only)")
    ap.add_argument("--workers", type=int, default=HEADER_WORKERS, help="header pool size")
    ap.add_argument("--repeat", type=int, default=1, help="repeat each GCS measurement, report medians")
    args = ap.parse_args()
    n = args.exports if args.exports is not None else (40 if args.full else 8)
    steps = [5 * (i + 1) for i in range(n)]
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-validate-many-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        build_local(root, steps)
        print(f"built {n} sparse 70B exports in {time.perf_counter() - t0:.1f} s")
        measure_local(str(root), steps, args.workers)
        with fake_gcs() as url:
            client = gcs_client(url)
            client.create_bucket("bench")
            t0 = time.perf_counter()
            upload(client, "bench", root, steps)
            print(f"uploaded to fake-gcs-server in {time.perf_counter() - t0:.1f} s")
            settings: list[tuple[str, float]] = [("direct (no added latency)", 0.0)]
            settings += [(f"+{ms:g} ms each way (real, latency_proxy)", ms) for ms in args.latency_ms if ms > 0]
            summary = []
            for label, ms in settings:
                runs = []
                for _ in range(args.repeat):
                    if ms == 0:
                        runs.append(measure_gcs(label, url, steps, args.workers))
                    else:
                        with latency_proxy(url, ms) as proxied:
                            runs.append(measure_gcs(label, proxied, steps, args.workers))
                summary.append((label, {k: statistics.median(r[k] for r in runs) for k in runs[0]}))
            print(
                f"\nsummary ({n} exports, {30 * n:,} shards; median of {args.repeat}; load now {os.getloadavg()[0]:.2f}):"
            )
            for label, med in summary:
                cells = ", ".join(
                    f"{k} {v:.2f} s ({med['baseline'] / v:.1f}x)" for k, v in med.items() if k != "baseline"
                )
                print(f"  {label}: baseline {med['baseline']:.2f} s; {cells}")
                ms = label.split(" ms")[0].lstrip("+") if label.startswith("+") else "0"
                goal = {"25": ">= 30x", "10": ">= 20x"}.get(ms, "")
                figure(
                    f"validation pool vs sequential header reader ({n * 30} shards, {label.split(' (')[0]})",
                    f"{med['baseline'] / med['pool']:.1f}x ({med['pool']:.2f} s vs {med['baseline']:.2f} s)",
                    goal,
                )


if __name__ == "__main__":
    main()
