"""Capture throughput: steps.capture plan + copy_part (bounded pool) vs a sequential copy loop, same client.

On local files and on fake-gcs-server, the latter direct and through bench/latency_proxy.py (+10 and +25 ms one
way by default: every request pays a real round trip, a new connection one more). Each setting copies into its own
bucket (a deployment's preserve root is its own bucket; fake-gcs-server's in-memory buckets also slow down as they
fill), so every copy is a new object (stat of the destination + one rewrite), never a replay.
Bytes through the process are counted by a wrapper around the Storage port: every read_* and write_* call adds its
payload. On GCS copies are server-side rewrites, so the evidence bytes through the process are 0; the only writes
are capture's own listings and per-part manifests.
The GCS run is the local run uploaded with every local path in its JSON records rewritten to gs://; weights
(listed, never copied) are uploaded as their header only, since the emulator holds objects in memory.
With latency the sequential loop copies the first --seq-sample objects only (at +25 ms a copy is ~2 round trips,
~0.1 s: the whole medium run would take over a minute); its objects/s is the rate over that sample.
Run: .venv/bin/python bench/bench_capture.py [--full] [--latency-ms 10 25] [--workers W ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import CountingStorage, build_run, fake_gcs, figure, fmt_bytes, gcs_client
from latency_proxy import latency_proxy
from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.capture import COPY_WORKERS, copy_part, plan_capture
from rlcleanup.steps.layout import discover
from rlcleanup.uris import join

HEADER_ONLY = 64 * 1024  # bytes kept of a weight file when uploading to the in-memory emulator


def measure(
    name: str, storage: Storage, run_uri: str, preserve: str, workers: list[int], seq_sample: int | None
) -> dict[str, float]:
    """objects/s of copy_part per worker count and of the sequential loop; returns {label: objects/s}."""
    layout = discover(storage, run_uri)
    t0 = time.perf_counter()
    plan = plan_capture(storage, layout, "bench-run", join(preserve, "plan"))
    plan_wall = time.perf_counter() - t0
    items = [item for part in plan.parts for item in part.items]
    total = sum(i.size for i in items)
    print(f"{name}: {len(items):,} evidence objects ({fmt_bytes(total)}) in {len(plan.parts)} parts;", end="")
    print(f" {plan.listed_weights:,} weight files listed, not copied; plan {plan_wall:.2f} s")
    rates: dict[str, float] = {}
    counting = CountingStorage(storage)
    for w in workers:
        dest = join(preserve, f"pool-{w}", "bench-run")
        t0 = time.perf_counter()
        results = [copy_part(counting, dest, part, workers=w) for part in plan.parts]
        wall = time.perf_counter() - t0
        copied = sum(len(r.objects) for r in results)
        assert copied == len(items), f"{copied} of {len(items)} copied; problems: {[r.conflicts for r in results]}"
        rates[f"pool-{w}"] = len(items) / wall
        mark = " (production)" if w == COPY_WORKERS else ""
        print(f"  capture (copy_part, {w:3d} workers){mark}: {wall:6.2f} s -> {rates[f'pool-{w}']:8,.1f} objects/s")
    sample = items if seq_sample is None else items[:seq_sample]
    seq = CountingStorage(storage)
    dest = join(preserve, "sequential")
    t0 = time.perf_counter()
    for item in sample:
        seq.copy_if_absent(item.source, join(dest, item.dest_rel))
    seq_wall = time.perf_counter() - t0
    rates["sequential"] = len(sample) / seq_wall
    print(
        f"  sequential copy loop ({len(sample):,} objects): {seq_wall:6.2f} s -> {rates['sequential']:8,.1f} objects/s"
    )
    for w in workers:
        print(f"  ratio, {w} workers: {rates[f'pool-{w}'] / rates['sequential']:.1f}x")
    print(
        f"  bytes through the process during copies: read {fmt_bytes(counting.bytes_in)}, written "
        f"{fmt_bytes(counting.bytes_out)} (part manifests, {len(workers)} x {len(plan.parts)}); sequential loop: "
        f"read {fmt_bytes(seq.bytes_in)}, written {fmt_bytes(seq.bytes_out)}"
    )
    # Weights and checkpoint shards are listed, never copied; evidence is copied server-side: nothing is read.
    figure(
        f"bytes read through the capture process, checkpoints included ({name})", fmt_bytes(counting.bytes_in), "0 B"
    )
    return rates


def upload(client: Any, bucket: str, base: Path) -> None:
    local_prefix, gcs_prefix = str(base), f"gs://{bucket}/base"
    b = client.bucket(bucket)

    def put(path: Path) -> None:
        if path.suffix in (".safetensors", ".pt") and path.stat().st_size > HEADER_ONLY:
            with path.open("rb") as fh:
                data = fh.read(HEADER_ONLY)
        else:
            data = path.read_bytes()
            if path.suffix == ".json":
                data = data.replace(local_prefix.encode(), gcs_prefix.encode())
        b.blob(f"base/{path.relative_to(base)}").upload_from_string(data)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, [p for p in base.rglob("*") if p.is_file()]))


@contextlib.contextmanager
def endpoint(url: str, ms: float) -> Iterator[str]:
    if ms <= 0:
        yield url
    else:
        with latency_proxy(url, ms) as proxied:
            yield proxied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="the 500-rank run (1 GiB of logs to copy)")
    ap.add_argument("--latency-ms", type=float, nargs="*", default=[10.0, 25.0], help="one-way delays besides direct")
    ap.add_argument("--workers", type=int, nargs="*", default=[COPY_WORKERS], help="copy_part pool sizes to measure")
    ap.add_argument("--seq-sample", type=int, default=150, help="objects the sequential loop copies with latency")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as tmp:
        base = Path(tmp) / "run"
        run, spec, secs = build_run(base, args.full)
        print(f"generated {spec.ranks} ranks x {spec.attempts} attempts, {spec.exports} exports in {secs:.1f} s")
        measure("local", LocalStorage(), str(run), str(Path(tmp) / "preserved"), args.workers, None)
        summary = []
        with fake_gcs() as url:
            client = gcs_client(url)
            client.create_bucket("bench")
            t0 = time.perf_counter()
            upload(client, "bench", base)
            print(f"uploaded to fake-gcs-server in {time.perf_counter() - t0:.1f} s")
            gcs_run = "gs://bench/base/" + str(run.relative_to(base))
            for ms in [0.0, *[m for m in args.latency_ms if m > 0]]:
                label = "direct" if ms <= 0 else f"+{ms:g} ms each way (latency_proxy)"
                preserve = f"bench-preserved-{ms:g}ms"  # its own bucket, as a deployment's preserve root is
                client.create_bucket(preserve)
                with endpoint(url, ms) as where:
                    storage = GcsStorage(gcs_client(where))
                    sample = None if ms <= 0 else args.seq_sample
                    rates = measure(
                        f"fake-gcs-server, {label}", storage, gcs_run, f"gs://{preserve}", args.workers, sample
                    )
                summary.append((label, rates))
        print(f"\nsummary (objects/s; load now {os.getloadavg()[0]:.2f}):")
        for label, rates in summary:
            seq = rates["sequential"]
            cells = ", ".join(f"{k} {v:,.1f} ({v / seq:.1f}x)" for k, v in rates.items() if k != "sequential")
            print(f"  {label}: sequential {seq:,.1f}; {cells}")
            pool = rates[f"pool-{COPY_WORKERS}"]
            goal = ">= 10x" if label.startswith("+25 ms") else ""
            figure(
                f"capture objects/s, fake-gcs-server {label.split(' (')[0]}",
                f"{pool:,.1f} vs {seq:,.1f} sequential ({pool / seq:.1f}x)",
                goal,
            )


if __name__ == "__main__":
    main()
