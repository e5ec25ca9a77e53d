"""One trillion-parameter run's end: a measured slice on fake-gcs-server at real latency, plus the arithmetic for
what the emulator cannot hold. Nothing is asserted; it prints the model, its inputs and its figures.

The run (the issue's sizes; the derivation of each count is printed):
  resume state  ~18 TB = 1e12 parameters x 18 B (bf16 weights 2 + fp32 master 4 + Adam m and v 8 + fp32 grads 4),
                in rank files of the last FSDP checkpoint: --ranks (1,024 = 128 nodes x 8) x (model, optim, extra);
  export        ~2 TB = 1e12 x 2 B (bf16), HF shards of <= 5 GB (transformers' default max_shard_size): 400 shards;
  logs          >= 128 GiB over --attempts attempts: every rank's .out/.err and 6 node logs per node per attempt.
Measured (the slice): the large generator's run at --slice-ranks ranks x the same attempts (llama-tiny exports,
weights uploaded as their header only: the emulator keeps objects in memory), on fake-gcs-server behind
bench/latency_proxy.py at --latency-ms one way. The pipeline's own steps run on it, through a counting Storage:
discover, plan_capture (every evidence object listed, weights listed only), copy_part of every part (server-side
rewrites). Their requests per object and wall per request at that latency are the model's inputs; the counts are
scaled from the slice's ranks to the real ranks (every per-rank object count is linear in ranks).
Modelled (the arithmetic): event -> complete record on Cloud Run at the topology's limits (max instances per
function, the vCPU a function's memory gets), log scan at the measured MB/s per core (bench/RESULTS.md), and the
grant-time copies of >5 GB objects the emulator cannot hold (S3 UploadPartCopy parts, GCS rewrite calls), at
stated throughputs; the cost per run at list prices (bench/prices.json).
Run: .venv/bin/python bench/bench_trillion.py [--slice-ranks 64] [--latency-ms 25]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from _common import CountingStorage, fake_gcs, figure, fmt_bytes, gcs_client
from bench_capture import upload
from cost import PRICES, vcpu_for
from latency_proxy import latency_proxy
from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.formats.weight_files import is_bulk_weight
from rlcleanup.runtime.topology import load_topology
from rlcleanup.samples.large import SCALES, planned_objects, write_spec
from rlcleanup.steps.capture import COPY_WORKERS, MAX_PART_ITEMS, copy_part, plan_capture
from rlcleanup.steps.layout import discover
from rlcleanup.steps.logscan import MAX_PART_BYTES, MAX_PART_FILES

GB, GiB = 10**9, 2**30
PARAMS = 10**12
RESUME_BYTES_PER_PARAM = 18  # bf16 weights 2 + fp32 master 4 + Adam m, v 8 + fp32 grads 4
EXPORT_BYTES_PER_PARAM = 2  # bf16
HF_SHARD_BYTES = 5 * GB  # transformers save_pretrained max_shard_size default "5GB"
S3_COPY_LIMIT = 5 * GiB  # CopyObject's limit: above it, UploadPartCopy (S3 docs, "Copy an object")
NODE_LOGS = 6  # raylet.out/.err, log_monitor.log/.err, dashboard_agent.log, runtime_env_agent.log (samples.large)
LOG_SCAN_MB_S_PER_CORE = 220.0  # bench/bench_logs.py, make bench of 7 Dec 2026 (bench/RESULTS.md)
COLD_START_S = 5.0  # per hop: import 0.72 s measured + instance start; an assumption, not measured here
HOPS = 7  # classify -> terminal plan -> log-scan parts -> capture plan -> capture parts -> validate -> select


class BytesByObject(CountingStorage):
    """CountingStorage that also keeps the bytes read per object: checkpoint bytes are those of weight files."""

    def __init__(self, inner: GcsStorage) -> None:
        super().__init__(inner)
        self.read_by_uri: Counter[str] = Counter()

    def _count(self, uri: str, read: int = 0, written: int = 0) -> None:
        super()._count(uri, read, written)
        with self._lock:
            self.read_by_uri[uri] += read

    def checkpoint_bytes(self) -> int:
        return sum(n for uri, n in self.read_by_uri.items() if is_bulk_weight(uri))


def measure_slice(args: argparse.Namespace) -> dict[str, float]:
    """The pipeline's storage steps on the slice, at real latency: requests per object and wall per request."""
    spec = replace(
        SCALES["ci"],
        name="trillion-slice",
        ranks=args.slice_ranks,
        attempts=args.attempts,
        exports=2,
        log_bytes_total=args.slice_log_mb * 2**20,
    )
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-trillion-") as tmp:
        base = Path(tmp) / "run"
        t0 = time.perf_counter()
        run = write_spec(base, spec)
        print(
            f"slice: {spec.ranks} ranks x {spec.attempts} attempts, {planned_objects(spec):,} objects, generated in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        with fake_gcs() as url:
            client = gcs_client(url)
            client.create_bucket("bench")
            client.create_bucket("bench-preserved")
            t0 = time.perf_counter()
            upload(client, "bench", base)
            print(f"uploaded in {time.perf_counter() - t0:.1f} s; load {os.getloadavg()[0]:.2f}", flush=True)
            gcs_run = "gs://bench/base/" + str(run.relative_to(base))
            with latency_proxy(url, args.latency_ms) as proxied:
                storage = BytesByObject(GcsStorage(gcs_client(proxied)))
                t0 = time.perf_counter()
                layout = discover(storage, gcs_run)
                out["discover_s"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                plan = plan_capture(storage, layout, "trillion-slice", "gs://bench-preserved/plan")
                out["plan_s"] = time.perf_counter() - t0
                items = [i for p in plan.parts for i in p.items]
                before = sum(storage.requests.values())
                t0 = time.perf_counter()
                results = [copy_part(storage, "gs://bench-preserved/run", part) for part in plan.parts]
                out["copy_s"] = time.perf_counter() - t0
                copied = sum(len(r.objects) for r in results)
                out["objects"], out["parts"], out["weights"] = len(items), len(plan.parts), plan.listed_weights
                out["copied"] = copied
                out["copy_requests"] = sum(storage.requests.values()) - before + storage.copies
                out["bytes_in"] = storage.bytes_in
                out["checkpoint_bytes"] = storage.checkpoint_bytes()
                out["log_bytes"] = sum(i.size for i in items)
    print(
        f"slice at +{args.latency_ms:g} ms one way: discover {out['discover_s']:.2f} s, plan_capture {out['plan_s']:.2f} s "
        f"({out['objects']:,.0f} evidence objects in {out['parts']:.0f} parts, {out['weights']:,.0f} weight files listed, "
        f"not copied); copy_part of every part {out['copy_s']:.2f} s ({out['copied'] / out['copy_s']:,.1f} objects/s "
        f"with {COPY_WORKERS} copies in flight, {out['copied']:,.0f} copied); bytes read through the process "
        f"{fmt_bytes(out['bytes_in'])} (configs, status, metrics), of them from checkpoint and weight files "
        f"{fmt_bytes(out['checkpoint_bytes'])}",
        flush=True,
    )
    return out


def model(args: argparse.Namespace, slice_: dict[str, float]) -> None:
    fns = {fn.name: fn for fn in load_topology().functions}
    ranks, nodes, attempts = args.ranks, args.ranks // 8, args.attempts
    resume = PARAMS * RESUME_BYTES_PER_PARAM
    export = PARAMS * EXPORT_BYTES_PER_PARAM
    logs = args.log_gib * GiB
    rank_files = ranks * 3
    optim_file = PARAMS * (RESUME_BYTES_PER_PARAM - EXPORT_BYTES_PER_PARAM) / ranks  # master + Adam + grads
    model_file = export / ranks
    shards = math.ceil(export / HF_SHARD_BYTES)
    log_files = attempts * (ranks * 2 + nodes * NODE_LOGS)
    scale = ranks / args.slice_ranks
    evidence = slice_["objects"] * scale
    print(f"\n== the run ({PARAMS:.0e} parameters, {ranks:,} ranks on {nodes} nodes, {attempts} attempts) ==")
    print(
        f"resume state {resume / 1e12:.0f} TB in {rank_files:,} rank files (model {model_file / GB:.2f} GB, "
        f"optim {optim_file / GB:.2f} GB, extra ~0 per rank); export {export / 1e12:.0f} TB in {shards} shards of "
        f"<= 5 GB; logs {args.log_gib} GiB in {log_files:,} files ({logs / log_files / 2**20:.0f} MiB mean)"
    )
    print(
        f"evidence objects (the slice's {slice_['objects']:,.0f} x {scale:g}): {evidence:,.0f}; "
        f"weights and rank files listed, never copied"
    )

    # ---- event -> complete record, critical path with each fan-out spread over its function's max instances
    lat = 2 * args.latency_ms / 1000  # one request = one round trip at the modelled latency
    scan = fns["scan-log-part"]
    scan_rate = LOG_SCAN_MB_S_PER_CORE * 1e6 * vcpu_for(_mib(scan.memory))
    scan_parts = max(math.ceil(logs / MAX_PART_BYTES), math.ceil(log_files / MAX_PART_FILES))
    scan_part_s = min(logs / scan_parts, MAX_PART_BYTES) / scan_rate + 4 * lat  # + list, read ranges, write part
    scan_waves = math.ceil(scan_parts / scan.max_instances)
    cap = fns["capture-part"]
    cap_parts = math.ceil(evidence / MAX_PART_ITEMS)
    per_copy_s = slice_["copy_s"] / slice_["copied"] * COPY_WORKERS  # one object's stat + rewrite at that latency
    cap_part_s = math.ceil(MAX_PART_ITEMS / COPY_WORKERS) * per_copy_s
    cap_waves = math.ceil(cap_parts / cap.max_instances)
    val_s = math.ceil((shards + 2) / 32) * lat + rank_files / 1000 * lat  # header reads in a pool of 32; listings
    plan_s = (slice_["discover_s"] + slice_["plan_s"]) * scale  # listings grow with the objects
    phases = {
        f"cold starts, {HOPS} hops x {COLD_START_S:g} s (assumed)": HOPS * COLD_START_S,
        f"discover + capture plan (slice x {scale:g})": plan_s,
        f"log scan: {scan_parts} parts / {scan.max_instances} instances = {scan_waves} waves x {scan_part_s:.1f} s "
        f"({scan_rate / 1e6:.0f} MB/s at {vcpu_for(_mib(scan.memory))} vCPU)": scan_waves * scan_part_s,
        f"capture: {cap_parts} parts / {cap.max_instances} instances = {cap_waves} waves x {cap_part_s:.1f} s "
        f"({MAX_PART_ITEMS} objects, {COPY_WORKERS} in flight, {per_copy_s * 1000:.0f} ms per copy measured)": cap_waves
        * cap_part_s,
        f"validate: {shards} shard headers + 2 reads (one 64 KiB header read per shard: "
        f"{fmt_bytes(shards * 64 * 1024)} of headers, 0 tensor bytes), {rank_files:,} rank files listed": val_s,
    }
    total = sum(phases.values())
    print(
        f"\n== event -> complete record, modelled at +{args.latency_ms:g} ms one way (round trip {lat * 1000:.0f} ms) =="
    )
    for name, secs in phases.items():
        print(f"  {secs:8.1f} s  {name}")
    print(f"  {total:8.1f} s  total ({total / 60:.1f} min; goal <= 60 min)")
    figure("trillion run: event -> complete record (modelled)", f"{total / 60:.1f} min", "<= 60 min")
    figure(
        "trillion run: checkpoint bytes through a function (slice, measured)",
        fmt_bytes(slice_["checkpoint_bytes"]),
        "0 B",
    )

    # ---- grant-time copies of the >5 GB objects (preserve the resume state, publish / hand off the export)
    print(
        f"\n== grant-time server-side copies, {args.in_flight} part copies in flight at {args.copy_mb_s:g} MB/s each "
        "(assumed: neither S3 nor GCS publishes a server-side copy rate) =="
    )
    copy_rows = []
    for part_gib in args.part_gib:
        part = part_gib * GiB
        parts = ranks * math.ceil(optim_file / part)  # the optim file per rank is the one over 5 GiB
        singles = ranks * 2 + shards  # model and extra rank files, export shards: one CopyObject each (< 5 GiB)
        requests = parts + 2 * ranks  # + CreateMultipartUpload and CompleteMultipartUpload per multipart object
        secs = (resume + export) / (args.in_flight * args.copy_mb_s * 1e6)
        copy_rows.append((part_gib, parts, singles, requests + singles, secs))
        print(
            f"  S3, parts of {part_gib:g} GiB: {parts:,} UploadPartCopy + {singles:,} CopyObject + {2 * ranks:,} "
            f"create/complete = {requests + singles:,} requests; {(resume + export) / 1e12:.0f} TB in {secs / 60:.0f} min"
        )
    rewrite_calls = math.ceil(optim_file / (args.rewrite_gib_per_call * GiB)) * ranks + ranks * 2 + shards
    print(
        f"  GCS, same location and class: {rank_files + shards:,} rewrite calls, one each (no bytes move: "
        f"metadata only); across class/location: ~{rewrite_calls:,} calls with rewriteToken at "
        f"{args.rewrite_gib_per_call:g} GiB per call (assumed), the same bytes/s as above"
    )
    s3_5 = next((row for row in copy_rows if row[0] == 5), copy_rows[0])
    figure(
        "trillion run: S3 part copies (5 GiB parts) / time at the assumed rate",
        f"{s3_5[1]:,} / {s3_5[4] / 60:.0f} min",
        "<= 60 min",
    )

    # ---- cost per run at list prices
    run, gcs, ps, fs = (PRICES[k] for k in ("cloud_run_functions", "cloud_storage", "pubsub", "firestore"))
    invocations = scan_parts + cap_parts + 1 + 1 + 8  # parts, one validation batch (1 export), resume safety, hops
    fn_s = {  # billed seconds per function kind: parts at their modelled wall, the hops at 2 s each
        "scan-log-part": scan_parts * scan_part_s,
        "capture-part": cap_parts * cap_part_s,
        "other": 10 * 2.0,
    }
    vcpu_s = sum(s * vcpu_for(_mib(fns.get(n, fns["on-job-event"]).memory)) for n, s in fn_s.items())
    gib_s = sum(s * _mib(fns.get(n, fns["on-job-event"]).memory) / 1024 for n, s in fn_s.items())
    class_a = evidence * 1 + scan_parts + cap_parts * 2 + (rank_files + evidence) / 1000 + 50  # rewrites, writes, lists
    class_b = evidence * 1 + log_files * 2 + shards + 4 + 50  # stats, log reads (ranged), headers
    fs_writes = 80 + 6 * (scan_parts + cap_parts)  # the sample run's 80 (bench_load) + claim, done, fan-in per part
    bill = {
        "functions": vcpu_s * run["vcpu_second"]
        + gib_s * run["gib_second"]
        + invocations * run["per_million_requests"] / 1e6,
        "storage ops": class_a * gcs["class_a_per_1000"] / 1000 + class_b * gcs["class_b_per_1000"] / 1000,
        "pubsub": invocations * 2 * ps["minimum_bytes_per_request"] / 2**40 * ps["per_tib"],
        "firestore": fs_writes * fs["writes_per_100k"] / 1e5 + 3 * fs_writes * fs["reads_per_100k"] / 1e5,
    }
    print(f"\n== cost per run at list prices (bench/prices.json, {PRICES['as_of']}) ==")
    print(
        f"  {invocations:,} invocations, {vcpu_s:,.0f} vCPU-s, {gib_s:,.0f} GiB-s; GCS class A {class_a:,.0f}, "
        f"class B {class_b:,.0f}; Firestore ~{fs_writes:,} writes"
    )
    print("  " + ", ".join(f"{k} ${v:.4f}" for k, v in bill.items()) + f"; total ${sum(bill.values()):.4f}")
    s3_requests = s3_5[3]
    print(
        f"  grant-time copies: GCS same class {rank_files + shards:,} rewrites = "
        f"${(rank_files + shards) * gcs['class_a_per_1000'] / 1000:.4f}; S3 multipart copy (5 GiB parts) "
        f"{s3_requests:,} requests at $0.005/1,000 (S3 Standard PUT/COPY list price) = ${s3_requests * 0.005 / 1000:.4f}"
    )
    figure("trillion run: cost of the cleanup at list prices (modelled)", f"${sum(bill.values()):.2f}", "printed")


def _mib(memory: str) -> float:
    return float(memory[:-2]) * (1024 if memory.endswith("Gi") else 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--log-gib", type=float, default=128.0)
    ap.add_argument("--slice-ranks", type=int, default=64, help="ranks in the measured slice")
    ap.add_argument("--slice-log-mb", type=int, default=16, help="physical log bytes in the slice")
    ap.add_argument("--latency-ms", type=float, default=25.0, help="one-way delay: 50 ms per request round trip")
    ap.add_argument("--copy-mb-s", type=float, default=100.0, help="assumed server-side copy rate per part in flight")
    ap.add_argument("--in-flight", type=int, default=256, help="part copies in flight (job tasks x workers)")
    ap.add_argument("--part-gib", type=float, nargs="*", default=[0.5, 5.0])
    ap.add_argument("--rewrite-gib-per-call", type=float, default=1.0)
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
    slice_ = measure_slice(args)
    model(args, slice_)
    print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
