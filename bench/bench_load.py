"""Run ends arriving together on the emulator stack: none lost, none processed twice, latency, Firestore hot spots.

Brings up the local stack (Pub/Sub + Firestore emulators, fake-gcs-server, one functions-framework per function,
the supervisor), uploads one small sample run `--runs` times under distinct names (before the clock starts), then
publishes every terminal job event at once and waits for every record to settle. Measured:
  lost              runs with no settled record within --timeout;
  processed twice   (run, step) pairs whose outcome was written twice (a second `done` write in the claim store:
                    IdempotencyStore.complete of a step that already completed, i.e. the step ran twice to its end);
                    also shown: pairs with a second claim winner (a lease taken over, or a retry after a release);
  event -> record   p50/p99 of the record's final updated_at minus the publish time;
  document sizes    the largest run document and the largest claim (steps/*) document, Firestore's size rules
                    (adapters.firestore_client.approx_size), against the 1 MiB limit;
  hottest document  writes per document path and the most writes one document took in any one second.
Writes and claims are traced inside the function servers by bench/fs_trace_site.py, put on their PYTHONPATH as
`sitecustomize` (the bench reads the trace lines after the burst; the pipeline code is unchanged).
Per run: invocations (the servers' accounting lines), CPU-s of every function server from /proc, Firestore writes:
the inputs of the 1,000-run-ends-an-hour arithmetic in docs/runtime.md.
Most of the wall time is the upload before the clock starts (fake-gcs-server took ~20 min for 200 x 84 objects at
load 19); then the burst. Not in bench/run_all.py for that reason.
Run: .venv/bin/python bench/bench_load.py [--runs 200] [--scenario completed-resumed] [--timeout 3600]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import figure, sample_uploader
from cpu_sidecar import group_cpu
from rlcleanup.runtime.functions import parse_accounting
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.stack import down, up
from rlcleanup.stack.emit import job_event, publish_event

HERE = Path(__file__).resolve().parent
FINAL = {"awaiting_authority", "complete", "routed", "needs_person", "failed"}
FIRESTORE_DOC_LIMIT = 1_048_576


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def read_trace(trace_dir: Path) -> list[dict[str, Any]]:
    entries = []
    for path in trace_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
    return sorted(entries, key=lambda e: e["t"])


def hottest(writes: list[dict[str, Any]]) -> tuple[str, int, int]:
    """(path, its writes, its most writes within any one second) of the document written most often."""
    per_path: dict[str, list[float]] = defaultdict(list)
    for w in writes:
        per_path[w["path"]].append(w["t"])
    best = ("", 0, 0)
    for path, times in per_path.items():
        times.sort()
        window, lo = 0, 0
        for hi, t in enumerate(times):
            while t - times[lo] >= 1.0:
                lo += 1
            window = max(window, hi - lo + 1)
        best = max(best, (path, len(times), window), key=lambda b: (b[2], b[1]))
    return best


def doc_sizes(project: str, run_ids: list[str]) -> tuple[tuple[int, str], tuple[int, str]]:
    """(largest run document, its id), (largest claim document, its path), by Firestore's size rules."""
    from rlcleanup.adapters.firestore_client import approx_size
    from rlcleanup.adapters.firestore_records import FirestoreRunRecords

    db = FirestoreRunRecords(project=project).db
    run_best, step_best = (0, ""), (0, "")
    for run_id in run_ids:
        ref = db.collection("runs").document(run_id)
        snap = ref.get()
        if snap.exists:
            run_best = max(run_best, (approx_size(snap.to_dict()) + len(run_id) + 16, run_id))
        for step in ref.collection("steps").stream():
            step_best = max(
                step_best, (approx_size(step.to_dict()) + len(step.reference.path) + 16, step.reference.path)
            )
    return run_best, step_best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--scenario", default="completed-resumed", help="the sample run each run end is a copy of")
    ap.add_argument("--timeout", type=float, default=3600.0)
    args = ap.parse_args(argv)
    print(f"load average before: {load()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-load-"))
    trace_dir = tmp / "trace"
    site_dir = tmp / "site"
    trace_dir.mkdir()
    site_dir.mkdir()
    shutil.copy(HERE / "fs_trace_site.py", site_dir / "sitecustomize.py")
    extra = {
        "BENCH_FS_TRACE": str(trace_dir),
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(site_dir)) if p),
    }
    t = time.monotonic()
    os.environ["PYTHONPATH"] = extra["PYTHONPATH"]  # up() builds the servers' path from ours
    os.environ["BENCH_FS_TRACE"] = str(trace_dir)
    state = up(tmp / "stack", project="rlcleanup-bench", timeout=300, extra_env={"BENCH_FS_TRACE": str(trace_dir)})
    del os.environ["BENCH_FS_TRACE"]  # this process traces nothing
    print(f"stack up in {time.monotonic() - t:.1f} s ({len(state.functions)} functions); load {load()}", flush=True)
    try:
        os.environ.update(state.env)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        from rlcleanup.adapters.firestore_records import FirestoreRunRecords

        gcs = storage.Client(project=state.project, credentials=AnonymousCredentials())
        records = FirestoreRunRecords(project=state.project)
        local = tmp / "sample"
        write_sample_run(local, args.scenario)
        upload = sample_uploader(gcs, local, state.buckets["runs"], "load")

        t = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            runs = list(pool.map(upload, range(args.runs)))
        print(f"uploaded {args.runs} copies of {args.scenario!r} in {time.monotonic() - t:.1f} s", flush=True)
        for path in trace_dir.glob("*.jsonl"):
            path.unlink()  # only the burst is measured
        cpu_before = group_cpu(state.pgids)
        events = [job_event(uri, "SUCCEEDED") for uri, _ in runs]
        started = datetime.now(UTC)
        t0 = time.monotonic()
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda ev: publish_event(ev, state.project), events))
        print(f"{args.runs} events published in {time.monotonic() - t0:.1f} s; load {load()}", flush=True)
        done: dict[str, tuple[float, str]] = {}
        deadline, report = t0 + args.timeout, t0 + 60
        while len(done) < len(runs) and time.monotonic() < deadline:
            for _, run_id in runs:
                if run_id not in done:
                    rec = records.get(run_id)
                    if rec is not None and rec.status.value in FINAL:
                        done[run_id] = ((rec.updated_at - started).total_seconds(), rec.status.value)
            if time.monotonic() >= report:
                print(f"  {time.monotonic() - t0:6.0f} s: {len(done)}/{len(runs)} settled; load {load()}", flush=True)
                report += 60
            time.sleep(1.0)
        wall = time.monotonic() - t0
        time.sleep(5)  # late writes (the last accounting lines, a straggling redelivery) land in the trace
        cpu_after = group_cpu(state.pgids)
        lost = [run_id for _, run_id in runs if run_id not in done]
        run_ids = [run_id for _, run_id in runs]
        largest_run, largest_step = doc_sizes(state.project, run_ids)
        invocations = 0
        for name in state.functions:
            for line in (tmp / "stack" / f"fn-{name}.log").read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        message = str(json.loads(line).get("message", ""))
                    except ValueError:
                        continue
                    invocations += parse_accounting(message) is not None
    finally:
        down(tmp / "stack")

    trace = read_trace(trace_dir)
    writes = [e for e in trace if "op" in e]
    claims = [e for e in trace if "claim" in e]
    won: Counter[tuple[str, str]] = Counter((c["run"], c["key"]) for c in claims if c["claim"] == "running")
    outcomes: Counter[tuple[str, str]] = Counter((c["run"], c["key"]) for c in claims if c["claim"] == "done")
    twice = {k: n for k, n in outcomes.items() if n > 1}
    rewon = {k: n for k, n in won.items() if n > 1}
    hot_path, hot_writes, hot_per_s = hottest(writes)
    lat = [v[0] for v in done.values()]
    fn_cpu = sum(cpu_after[n] - cpu_before.get(n, 0.0) for n in cpu_after if n.startswith("fn-"))
    n = len(runs)
    print(f"\n== {n} run ends at once ({args.scenario}); load after {load()} ==")
    print(
        f"settled {len(done)}/{n}, lost {len(lost)}; all settled in {wall:.1f} s; statuses {Counter(v[1] for v in done.values())}"
    )
    if lat:
        print(f"event -> record: p50 {pct(lat, 50):.1f} s, p99 {pct(lat, 99):.1f} s, max {max(lat):.1f} s")
    print(f"outcomes written twice: {len(twice)} (run, step) pairs {sorted(twice.items())[:5]}")
    print(f"claims won more than once (takeover or retry after release): {len(rewon)} {sorted(rewon.items())[:5]}")
    print(
        f"per run: {invocations / n:.1f} invocations, {fn_cpu / n:.2f} CPU-s (function servers, /proc), "
        f"{len(writes) / n:.1f} Firestore document writes, {len(outcomes) / n:.1f} step outcomes"
    )
    print(
        f"largest run document: ~{largest_run[0]:,} bytes ({largest_run[1]}); largest claim document: "
        f"~{largest_step[0]:,} bytes ({largest_step[1]}); Firestore limit {FIRESTORE_DOC_LIMIT:,}"
    )
    top = Counter(
        w["path"].split("/")[0]
        + "/"
        + (
            "<run>/" + "/".join(w["path"].split("/")[2:])
            if w["path"].startswith("runs/")
            else "/".join(w["path"].split("/")[1:])
        )
        for w in writes
    )
    print(f"hottest document: {hot_path}: {hot_writes} writes, at most {hot_per_s} in one second")
    print("writes by document kind (run id replaced by <run>): " + ", ".join(f"{p} {c}" for p, c in top.most_common(8)))
    figure(f"load: {n} run ends at once, lost / processed twice", f"{len(lost)} / {len(twice)}", "0 / 0")
    if lat:
        figure(f"load: {n} run ends at once, event -> record p50 / p99", f"{pct(lat, 50):.1f} s / {pct(lat, 99):.1f} s")
    figure("load: largest run / claim document", f"{largest_run[0]:,} / {largest_step[0]:,} bytes", "< 1,048,576")
    figure("load: hottest document, most writes in one second", f"{hot_per_s} ({hot_path})", "<= 1/s sustained")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if lost or twice else 0


if __name__ == "__main__":
    sys.exit(main())
