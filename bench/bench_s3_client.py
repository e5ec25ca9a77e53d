"""S3 client choice: boto3 vs obstore (Rust object_store) for many small ranged reads, on SeaweedFS.

Measures what validation does per shard (one speculative ranged GET of the first block), for a 30-shard export
and for N x 30 shards, sequentially and on a 32-thread pool (validation's header pool), plus one client's
construction cost (a function cold start pays it) and list of 1,000 objects. Then the real thing: one 70B
export (30 shards, real headers; shards uploaded header-only as in bench_validate_many) validated through
S3Storage with a counting wrapper: requests per shard and wall time. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_s3_client.py [--exports 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "shared"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rlcleanup.stack import s3_server

FIRST_BLOCK = 64 * 1024  # validation's DEFAULT_FIRST_BLOCK order of magnitude: one speculative read per shard


def boto3_client(endpoint: str):  # type: ignore[no-untyped-def]
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=s3_server.ADMIN_KEY,
        aws_secret_access_key=s3_server.ADMIN_SECRET,
        region_name=s3_server.REGION,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=64),
    )


def obstore_store(endpoint: str, bucket: str):  # type: ignore[no-untyped-def]
    from obstore.store import S3Store

    return S3Store(
        bucket,
        config={
            "endpoint": endpoint,
            "access_key_id": s3_server.ADMIN_KEY,
            "secret_access_key": s3_server.ADMIN_SECRET,
            "region": s3_server.REGION,
            "virtual_hosted_style_request": False,
        },
        client_options={"allow_http": True, "pool_max_idle_per_host": "64"},
    )


def timed(fn: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exports", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import obstore

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp, s3_server.running(Path(os.environ.get("BENCH_S3_DIR", tmp))) as srv:
        print(f"SeaweedFS up in {srv.startup_seconds:.2f} s at {srv.endpoint}")
        t0 = time.perf_counter()
        b3 = boto3_client(srv.endpoint)
        boto_ctor = time.perf_counter() - t0
        b3.create_bucket(Bucket="bench")
        t0 = time.perf_counter()
        store = obstore_store(srv.endpoint, "bench")
        obs_ctor = time.perf_counter() - t0
        body = os.urandom(FIRST_BLOCK) + b"\0" * (256 * 1024)  # the header block, then some "tensor" bytes
        keys = [f"e{e:02d}/model-{s:05d}-of-00030.safetensors" for e in range(args.exports) for s in range(1, 31)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: b3.put_object(Bucket="bench", Key=k, Body=body), keys))
        for i in range(1000 - len(keys)):
            b3.put_object(Bucket="bench", Key=f"many/{i:04d}.json", Body=b"{}")
        one = keys[:30]

        def boto_read(key: str) -> int:
            r = b3.get_object(Bucket="bench", Key=key, Range=f"bytes=0-{FIRST_BLOCK - 1}")
            return len(r["Body"].read())

        def obs_read(key: str) -> int:
            return len(obstore.get_range(store, key, start=0, length=FIRST_BLOCK))

        for fn in (boto_read, obs_read):  # warm both pools
            assert all(fn(k) == FIRST_BLOCK for k in one)
        rows = []
        for label, fn in (("boto3", boto_read), ("obstore", obs_read)):
            seq30 = timed(lambda fn=fn: [fn(k) for k in one], args.repeat)
            with ThreadPoolExecutor(32) as pool:
                par30 = timed(lambda fn=fn, pool=pool: list(pool.map(fn, one)), args.repeat)
                parall = timed(lambda fn=fn, pool=pool: list(pool.map(fn, keys)), args.repeat)
            rows.append((label, seq30, par30, parall))
        t_list_b = timed(
            lambda: [o for p in b3.get_paginator("list_objects_v2").paginate(Bucket="bench") for o in p["Contents"]],
            args.repeat,
        )
        t_list_o = timed(lambda: [o for batch in obstore.list(store) for o in batch], args.repeat)
        print(f"\nclient construction: boto3 {boto_ctor * 1000:.0f} ms, obstore {obs_ctor * 1000:.1f} ms")
        print(f"list 1,000 objects: boto3 {t_list_b * 1000:.0f} ms, obstore {t_list_o * 1000:.0f} ms")
        print(
            f"\n{'client':8} | 30 shards seq | 30 shards, 32 threads | {len(keys)} shards, 32 threads | per read (pool)"
        )
        for label, seq30, par30, parall in rows:
            print(
                f"{label:8} | {seq30 * 1000:9.0f} ms  | {par30 * 1000:15.0f} ms    | {parall * 1000:13.0f} ms      |"
                f" {parall / len(keys) * 1000:.2f} ms"
            )
        validate_export(srv.endpoint, b3, args.repeat)
        b3.close()
    validate_export_gcs(args.repeat)


def validate_export(endpoint: str, b3: object, repeat: int) -> None:
    from _common import CountingStorage
    from bench_validate_many import layout
    from rlcleanup.adapters.s3_client import S3Endpoint
    from rlcleanup.adapters.s3_storage import S3Storage
    from rlcleanup.steps.validate import HEADER_WORKERS, validate_candidate

    for name, data in header_only_export():
        b3.put_object(Bucket="bench", Key=f"run/exports/global_step_20/policy/{name}", Body=data)  # type: ignore[attr-defined]
    ep = S3Endpoint("bench", endpoint, access_key_id=s3_server.ADMIN_KEY, secret_access_key=s3_server.ADMIN_SECRET)
    lay = layout("s3://bench/run", [20])
    walls = []
    for _ in range(repeat):
        counting = CountingStorage(S3Storage([], ep))  # a fresh client each time, as one invocation would have
        t0 = time.perf_counter()
        cand = validate_candidate(counting, lay, 20, metric_steps=None, step_budget=None, workers=HEADER_WORKERS)
        walls.append(time.perf_counter() - t0)
    report("S3 (SeaweedFS) through S3Storage", counting, cand, walls)


def header_only_export() -> list[tuple[str, bytes]]:
    """A 30-shard 70B export's files, each shard cut after its real header (as in bench_validate_many)."""
    import struct

    from rlcleanup.samples.large_exports import export_template, write_70b_export

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "policy"
        write_70b_export(local, export_template())
        for path in sorted(local.iterdir()):
            data = path.read_bytes() if path.suffix != ".safetensors" else b""
            if path.suffix == ".safetensors":
                with path.open("rb") as fh:
                    (n,) = struct.unpack("<Q", fh.read(8))
                    fh.seek(0)
                    data = fh.read(8 + n)
            out.append((path.name, data))
    return out


def report(where: str, counting: object, cand: object, walls: list[float]) -> None:
    from collections import Counter

    from rlcleanup.steps.validate import HEADER_WORKERS

    requests = counting.requests  # type: ignore[attr-defined]
    shards = [u for u in requests if u.endswith(".safetensors")]
    per_shard = Counter(requests[u] for u in shards)
    codes = sorted({p.split(":", 1)[0] for p in cand.problems})  # type: ignore[attr-defined]
    print(f"\nvalidate one 70B export on {where} ({len(shards)} shards, {HEADER_WORKERS} header workers):")
    print(f"  requests per shard {dict(per_shard)}; problems {codes} (truncated_shard expected: header-only upload)")
    median = statistics.median(walls) * 1000
    print(f"  wall median {median:.0f} ms (runs: {', '.join(f'{w * 1000:.0f}' for w in walls)} ms)")
    print(f"FIGURE header reads, 30-shard export, {where}: {dict(per_shard)} requests/shard, {median:.0f} ms")


def validate_export_gcs(repeat: int) -> None:
    """The same export and validation on the GCS emulator (fake-gcs-server) through GcsStorage."""
    from _common import CountingStorage, fake_gcs, gcs_client
    from bench_validate_many import layout
    from rlcleanup.adapters.gcs_storage import GcsStorage
    from rlcleanup.steps.validate import HEADER_WORKERS, validate_candidate

    with fake_gcs() as url:
        client = gcs_client(url)
        bucket = client.create_bucket("bench")
        for name, data in header_only_export():
            bucket.blob(f"run/exports/global_step_20/policy/{name}").upload_from_string(data)
        lay = layout("gs://bench/run", [20])
        walls = []
        for _ in range(repeat):
            counting = CountingStorage(GcsStorage(gcs_client(url)))  # a fresh client, as one invocation would have
            t0 = time.perf_counter()
            cand = validate_candidate(counting, lay, 20, metric_steps=None, step_budget=None, workers=HEADER_WORKERS)
            walls.append(time.perf_counter() - t0)
        report("GCS (fake-gcs-server) through GcsStorage", counting, cand, walls)


if __name__ == "__main__":
    main()
