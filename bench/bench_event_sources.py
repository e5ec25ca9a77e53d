"""Event sources on the real emulator stack (issue 16's closing figures):

1. storage-notification latency: a run uploaded to the watched runs bucket in Marin's order (status RUNNING,
   every file, the final token last), `--runs` times; latency = the record's final `updated_at` minus the wall
   time just before the final status token is written (the upload of the other files happens before the clock);
2. the sweep's cost per `--sweep-runs` run roots: that many minimal Layout A roots (`.executor_status` SUCCESS +
   `terminal.json`) under one prefix in fake-gcs-server, walked page by page by the sweep's own code (the `sweep`
   message flow without Pub/Sub: tick → level pages → run pages), counting GCS requests (listings, reads) and
   record-store reads (Firestore emulator), and the wall time. Emitted events are counted, not published.

Prints figures; asserts nothing about time. Run: .venv/bin/python bench/bench_event_sources.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import figure
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.samples.upload import upload_sample_run_to
from rlcleanup.stack import down, up

FINAL = {"awaiting_authority", "complete", "routed", "needs_person", "failed"}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))]


class Counting:
    """Wraps a storage and a record store, counting the calls the sweep makes."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)

        return counted


def latency(stack: Any, gcs: Any, records: Any, runs: int, timeout: float) -> list[float]:
    local = Path(tempfile.mkdtemp(prefix="rlcleanup-bench-sample-"))
    write_sample_run(local, "completed-resumed")
    status_path = next((local / "durable").glob("*/*")) / ".executor_status"
    status = status_path.read_bytes()
    bucket = stack.env["RLCLEANUP_RUNS_BUCKET"]
    from rlcleanup.adapters.gcs_storage import GcsStorage
    from rlcleanup.adapters.storage_router import RoutingStorage

    storage = RoutingStorage({"gs": GcsStorage(gcs)})
    out: list[float] = []
    for i in range(runs + 1):  # the first is the cold run, reported apart
        name = f"notif-{uuid.uuid4().hex[:6]}"
        base = f"gs://{bucket}/bench/{name}"
        rewrite_status = f"{base}/{status_path.relative_to(local).as_posix()}".replace(status_path.parts[-3], name)
        blob = gcs.bucket(bucket).blob(rewrite_status.removeprefix(f"gs://{bucket}/"))
        blob.upload_from_string(b"RUNNING\n")  # Marin's order: RUNNING first, every file, then the final token
        upload_sample_run_to(storage, local, base, rename=name, skip=(status_path,))
        t0 = datetime.now(UTC)
        blob.upload_from_string(status)
        run_id = f"{name}-{VERSION}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = records.get(run_id)
            if record is not None and record.status.value in FINAL:
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"{run_id} did not finish within {timeout} s")
        time.sleep(1.0)  # select writes the report after the status: take the final updated_at
        seconds = (records.get(run_id).updated_at - t0).total_seconds()
        print(f"  {'cold' if i == 0 else f'run {i}'}: {seconds:.2f} s")
        if i:
            out.append(seconds)
    return out


def sweep_cost(stack: Any, gcs: Any, n: int) -> dict[str, Any]:
    from rlcleanup.adapters.firestore_records import FirestoreRunRecords
    from rlcleanup.adapters.gcs_storage import GcsStorage
    from rlcleanup.settings import DeploymentSettings
    from rlcleanup.sources.sweep import SweepConfig, SweepPage, sweep_page, tick

    bucket, prefix = stack.buckets["runs"], f"sweep-bench/{uuid.uuid4().hex[:6]}"

    def put(i: int) -> None:
        root = f"{prefix}/exp-{i:04d}/v1"
        gcs.bucket(bucket).blob(f"{root}/terminal.json").upload_from_string(b"{}")
        gcs.bucket(bucket).blob(f"{root}/.executor_status").upload_from_string(b"SUCCESS\n")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(n)))
    storage = Counting(GcsStorage(gcs))
    records = Counting(FirestoreRunRecords(project=stack.project))
    settings = DeploymentSettings(sweep_roots=f"gs://{bucket}/{prefix}")
    config = SweepConfig.from_settings(settings, slowest_timeout_seconds=540)
    queue: list[SweepPage] = [m for m in tick(config) if isinstance(m, SweepPage)]
    events = messages = 0
    t0 = time.monotonic()
    while queue:
        msg = queue.pop()
        messages += 1
        out = sweep_page(storage, records, msg, datetime.now(UTC), config)  # type: ignore[arg-type]
        queue += out.continuations
        events += len(out.events)
    seconds = time.monotonic() - t0
    return {
        "runs": n,
        "events": events,
        "messages": messages,
        "seconds": seconds,
        "gcs": storage.calls,
        "records": records.calls,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--sweep-runs", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args(argv)
    state_dir = Path(tempfile.mkdtemp(prefix="rlcleanup-bench-stack-"))
    stack = up(state_dir, project="rlcleanup-bench", timeout=120)
    try:
        os.environ.update(stack.env)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        from rlcleanup.adapters.firestore_records import FirestoreRunRecords

        gcs = storage.Client(project=stack.project, credentials=AnonymousCredentials())
        records = FirestoreRunRecords(project=stack.project)
        print(f"storage notification → finished record ({args.runs} runs, load {os.getloadavg()[0]:.2f}):")
        values = latency(stack, gcs, records, args.runs, args.timeout)
        print(f"  p50 {statistics.median(values):.2f} s, p95 {pct(values, 95):.2f} s, min {min(values):.2f} s")
        figure(f"status upload -> finished record, p50 of {len(values)}", f"{statistics.median(values):.2f} s")
        cost = sweep_cost(stack, gcs, args.sweep_runs)
        print(
            f"sweep over {cost['runs']} run roots: {cost['events']} events from {cost['messages']} sweep messages in "
            f"{cost['seconds']:.1f} s; GCS calls {cost['gcs']}; record-store calls {cost['records']}"
        )
        per = 1000 / max(1, cost["runs"])
        requests = sum(cost["gcs"].values()) + sum(cost["records"].values())
        figure("sweep per 1,000 run roots: requests", f"{requests * per:,.0f} (GCS + record store)")
        figure("sweep per 1,000 run roots: seconds", f"{cost['seconds'] * per:.1f} s")
    finally:
        down(state_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
