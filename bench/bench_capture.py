"""Capture throughput: steps.capture plan + copy_part (bounded pool) vs a sequential copy loop, same client.

On local files and on fake-gcs-server. Bytes through the process are counted by a wrapper around the Storage
port: every read_* and write_* call adds its payload. On GCS copies are server-side rewrites, so the evidence
bytes through the process are 0; the only writes are capture's own listings and per-part manifests.
The GCS run is the local run uploaded with every local path in its JSON records rewritten to gs://; weights
(listed, never copied) are uploaded as their header only, since the emulator holds objects in memory.
Run: .venv/bin/python bench/bench_capture.py [--full]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import CountingStorage, build_run, fake_gcs, fmt_bytes, gcs_client
from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.capture import copy_part, plan_capture
from rlcleanup.steps.layout import discover
from rlcleanup.uris import join

HEADER_ONLY = 64 * 1024  # bytes kept of a weight file when uploading to the in-memory emulator


def measure(name: str, storage: Storage, run_uri: str, preserve: str) -> None:
    layout = discover(storage, run_uri)
    t0 = time.perf_counter()
    plan = plan_capture(storage, layout, "bench-run", join(preserve, "pool"))
    plan_wall = time.perf_counter() - t0
    items = [item for part in plan.parts for item in part.items]
    counting = CountingStorage(storage)
    t0 = time.perf_counter()
    results = [copy_part(counting, plan.dest_root, part) for part in plan.parts]
    pool_wall = time.perf_counter() - t0
    copied = sum(len(r.objects) for r in results)
    assert copied == len(items), f"{copied} of {len(items)} copied; problems: {[r.conflicts for r in results]}"
    seq = CountingStorage(storage)
    dest = join(preserve, "sequential")
    t0 = time.perf_counter()
    for item in items:
        seq.copy_if_absent(item.source, join(dest, item.dest_rel))
    seq_wall = time.perf_counter() - t0
    total = sum(i.size for i in items)
    print(f"{name}: {len(items):,} evidence objects ({fmt_bytes(total)}) in {len(plan.parts)} parts;", end="")
    print(f" {plan.listed_weights:,} weight files listed, not copied; plan {plan_wall:.2f} s")
    print(f"  capture (copy_part, pool): {pool_wall:.2f} s -> {len(items) / pool_wall:,.0f} objects/s")
    print(f"  sequential copy loop:      {seq_wall:.2f} s -> {len(items) / seq_wall:,.0f} objects/s")
    print(f"  ratio: {seq_wall / pool_wall:.1f}x")
    print(
        f"  bytes through the process during copies: read {fmt_bytes(counting.bytes_in)}, written "
        f"{fmt_bytes(counting.bytes_out)} (the {len(plan.parts)} part manifests); sequential loop: "
        f"read {fmt_bytes(seq.bytes_in)}, written {fmt_bytes(seq.bytes_out)}"
    )


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", action="store_true", help="the 500-rank run (1 GiB of logs to copy)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as tmp:
        base = Path(tmp) / "run"
        run, spec, secs = build_run(base, args.full)
        print(f"generated {spec.ranks} ranks x {spec.attempts} attempts, {spec.exports} exports in {secs:.1f} s")
        measure("local", LocalStorage(), str(run), str(Path(tmp) / "preserved"))
        with fake_gcs() as url:
            client = gcs_client(url)
            client.create_bucket("bench")
            t0 = time.perf_counter()
            upload(client, "bench", base)
            print(f"uploaded to fake-gcs-server in {time.perf_counter() - t0:.1f} s")
            gcs_run = "gs://bench/base/" + str(run.relative_to(base))
            measure("fake-gcs-server", GcsStorage(client), gcs_run, "gs://bench/preserved")


if __name__ == "__main__":
    main()
