"""Event → completed record latency on the real emulator stack (Pub/Sub + Firestore emulators, fake-gcs-server,
one functions-framework process per function), for the sample run.

1. sequential: one run at a time, `--runs` times (after one cold run that is reported separately);
2. burst: `--burst` runs terminate at once (all events published together); all must complete, none lost.

Latency = the record's final `updated_at` (written by the select function) minus the wall time just before the
publish; uploads happen before the clock starts. Prints figures; asserts nothing about time.
Run: .venv/bin/python bench/bench_latency.py [--runs 10] [--burst 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from _common import sample_uploader
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.stack import down, up
from rlcleanup.stack.emit import job_event, publish_event

FINAL = {"awaiting_authority", "complete", "routed", "needs_person", "failed"}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--burst", type=int, default=20)
    ap.add_argument("--scenario", default="completed-resumed")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args(argv)

    state_dir = Path(tempfile.mkdtemp(prefix="rlcleanup-bench-stack-"))
    t = time.monotonic()
    stack = up(state_dir, project="rlcleanup-bench", timeout=120)
    print(f"stack up in {time.monotonic() - t:.1f} s ({len(stack.functions)} functions); load {os.getloadavg()[0]:.2f}")
    try:
        os.environ.update(stack.env)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        from rlcleanup.adapters.firestore_records import FirestoreRunRecords

        gcs = storage.Client(project=stack.project, credentials=AnonymousCredentials())
        records = FirestoreRunRecords(project=stack.project)
        local = Path(tempfile.mkdtemp(prefix="rlcleanup-bench-sample-"))
        write_sample_run(local, args.scenario)
        upload = sample_uploader(gcs, local, stack.buckets["runs"], "lat")

        def wait(run_ids: list[str], started: dict[str, datetime]) -> dict[str, tuple[float, str]]:
            out: dict[str, tuple[float, str]] = {}
            deadline = time.monotonic() + args.timeout
            while len(out) < len(run_ids) and time.monotonic() < deadline:
                for run_id in run_ids:
                    if run_id in out:
                        continue
                    rec = records.get(run_id)
                    if rec is not None and rec.status.value in FINAL:
                        out[run_id] = ((rec.updated_at - started[run_id]).total_seconds(), rec.status.value)
                time.sleep(0.05)
            return out

        # ---------------------------------------------------------------- sequential
        seq: list[float] = []
        cold = None
        for i in range(args.runs + 1):
            uri, run_id = upload(i)
            started = {run_id: datetime.now(UTC)}
            publish_event(job_event(uri, "SUCCEEDED"), stack.project)
            done = wait([run_id], started)
            if run_id not in done:
                print(f"run {run_id}: NOT completed within {args.timeout:.0f} s")
                return 1
            latency, status = done[run_id]
            if i == 0:
                cold = latency
                print(f"cold run (first event after stack up): {latency:.2f} s ({status})")
            else:
                seq.append(latency)
        print(
            f"sequential, {len(seq)} runs: p50 {statistics.median(seq):.2f} s, p95 {pct(seq, 95):.2f} s, "
            f"min {min(seq):.2f} s, max {max(seq):.2f} s"
        )

        # ---------------------------------------------------------------- burst
        with ThreadPoolExecutor(8) as pool:
            runs = list(pool.map(upload, range(1000, 1000 + args.burst)))
        started = {}
        t0 = time.monotonic()
        events = [(job_event(uri, "SUCCEEDED"), run_id) for uri, run_id in runs]
        for _, run_id in runs:
            started[run_id] = datetime.now(UTC)
        with ThreadPoolExecutor(args.burst) as pool:
            list(pool.map(lambda ev: publish_event(ev[0], stack.project), events))
        done = wait([r for _, r in runs], started)
        wall = time.monotonic() - t0
        lat = [v[0] for v in done.values()]
        lost = [r for _, r in runs if r not in done]
        print(
            f"burst, {args.burst} runs at once: {len(done)}/{args.burst} complete, {len(lost)} lost; "
            f"all done in {wall:.1f} s; per-run p50 {statistics.median(lat):.2f} s, p95 {pct(lat, 95):.2f} s, "
            f"max {max(lat):.2f} s"
            if lat
            else "burst: nothing completed"
        )
        statuses = sorted({v[1] for v in done.values()})
        print(f"burst statuses: {statuses}; cold {cold:.2f} s; load after {os.getloadavg()[0]:.2f}")
        return 0 if not lost else 1
    finally:
        down(state_dir)


if __name__ == "__main__":
    sys.exit(main())
