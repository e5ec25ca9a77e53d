"""A big run end to end on the local emulator stack: per-function invocation figures against the topology caps.

Brings up its own stack (Pub/Sub + Firestore emulators, fake-gcs-server, one functions-framework per function;
stopped by process group at the end), writes a run with the large generator, uploads it to fake-gcs-server, emits
the terminal job event and waits for the completed record. Then reads every function's log: each invocation's
accounting line (runtime.functions: wall seconds, process peak RSS) gives calls, max seconds and peak MiB per
function, next to its timeout_seconds and memory cap. Nothing is asserted (tests/e2e/test_big_run.py asserts the
CI size); an invocation over a cap, or a run not finished in --timeout, prints as such and exits 1.

Sizes: default the `ci` scale (3 x 64 ranks, 16 MiB of logs, 20 exports x 30 shards); `--full` is the issue's run
(500 ranks x 3 attempts, 1 GiB of logs, 40 exports x 30 shards, >= 10,000 objects). Both use the tiny-dimension
llama (same 80-layer tensor list and headers): fake-gcs-server keeps objects in memory and cannot hold 70B shards.
--full needs a few GiB of memory for the emulator and several minutes (upload is ~100 objects/s).
Run: .venv/bin/python bench/bench_big_run.py [--full] [--ranks N] [--attempts N] [--exports N] [--log-mb N]

CPU from /proc, for an A/B against an older tree (`PYTHONPATH=<git archive of it>/shared`, with its `functions/`
beside `shared/`: the stack then serves that tree's code): `--cpu-from-proc` reads each server's process group
(state.json's pgids) from /proc when the stack is ready and again just before it goes down, and prints each
function's CPU-seconds in between (utime + stime, every thread, reaped children too). It needs nothing from the tree
under test (no accounting CPU fields), so both sides are measured the same way; `--cpu-json PATH` also writes them.
`--hide-torch` puts a `torch` package that raises ImportError ahead of site-packages on the function processes'
path, as in the deployed bundle (no torch): the tensor-layout check is then skipped instead of importing torch +
transformers (~5 CPU-s in the first validate-candidate). The cost report needs rlcleanup.ports.usage; a tree
without it gets the /proc table only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from _common import figure
from cpu_sidecar import group_cpu, hide_torch
from rlcleanup.cli.upload import upload_sample_run
from rlcleanup.runtime.functions import parse_accounting
from rlcleanup.runtime.topology import load_topology
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.samples.large import SCALES, planned_objects, write_spec
from rlcleanup.stack import down, up

FINAL = {"awaiting_authority", "complete", "routed", "needs_person", "failed"}


def _entries(path: Path, run_id: str) -> list[dict[str, Any]]:
    """JSON log records of one run: its run_id, or a delivery (event_id) whose records name it."""
    entries = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
    deliveries = {e.get("event_id") for e in entries if e.get("run_id") == run_id or run_id in str(e.get("message"))}
    deliveries.discard(None)
    return [e for e in entries if e.get("run_id") == run_id or e.get("event_id") in deliveries]


def _accounting(state_dir: Path, served: list[str], run_id: str) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name in served:
        lines = [parse_accounting(str(e.get("message", ""))) for e in _entries(state_dir / f"fn-{name}.log", run_id)]
        out[name] = [f for f in lines if f is not None]
    return out


def _progress(store: Any, claims: Any, run_id: str) -> dict[str, Any]:
    """Where the run is: record status, log-scan / capture parts and validations done of planned."""
    record = store.get(run_id)
    scan_plan = claims.result(run_id, "terminal-plan") or {}
    capture_plan = claims.result(run_id, "capture-plan") or {}
    fanout = claims.result(run_id, "fanout:validate") or {}
    return {
        "status": record.status.value if record is not None else None,
        "errors": len(record.errors) if record is not None else 0,
        "log_scan": (len(claims.results(run_id, "log-scan:")), len(scan_plan.get("parts", []))),
        "capture": (len(claims.results(run_id, "capture-part:")), len(capture_plan.get("parts", []))),
        "validate": (len(claims.results(run_id, "validate:")), len(fanout.get("targets", []))),
    }


def _fmt(progress: dict[str, Any]) -> str:
    def frac(key: str) -> str:
        done, planned = progress[key]
        return f"{done}/{planned or '?'}"

    return (
        f"record {progress['status']} ({progress['errors']} errors), log-scan parts {frac('log_scan')}, "
        f"capture parts {frac('capture')}, validations {frac('validate')}"
    )


def _wait_record(store: Any, claims: Any, run_id: str, timeout: float, every: float = 30.0) -> Any:
    start = time.monotonic()
    deadline, report = start + timeout, start + every
    while time.monotonic() < deadline:
        record = store.get(run_id)
        done = record is not None and record.status.value in FINAL
        if done and (record.status.value in ("routed", "needs_person") or claims.result(run_id, "select") is not None):
            return record
        if time.monotonic() >= report:
            print(f"  {time.monotonic() - start:6.0f} s: {_fmt(_progress(store, claims, run_id))}", flush=True)
            report += every
        time.sleep(0.5)
    return None


def _document_bytes(store: Any, run_id: str) -> int | None:
    """The run document's approximate Firestore size (the adapter's own estimate, rounded up)."""
    from rlcleanup.adapters.firestore_client import approx_size

    snap = store.db.collection("runs").document(run_id).get()
    return approx_size(snap.to_dict()) if snap.exists else None


def _cpu_table(ready: dict[str, float], end: dict[str, float], calls: dict[str, int]) -> dict[str, Any]:
    rows = {
        name: {
            "calls": calls.get(name.removeprefix("fn-"), 0),
            "ready_s": ready[name],
            "run_s": end[name] - ready[name],
        }
        for name in end
    }
    print("\nCPU-s from /proc (process groups; 'at ready' = startup imports, 'run' = ready -> just before down)")
    print(f"{'server':<30}{'calls':>6}{'at ready':>10}{'run':>9}")
    for name, row in rows.items():
        print(f"{name:<30}{row['calls']:>6}{row['ready_s']:>10.2f}{row['run_s']:>9.2f}")
    fns = [r for n, r in rows.items() if n.startswith("fn-")]
    total = sum(r["run_s"] for r in fns)
    print(
        f"{'functions total':<30}{sum(r['calls'] for r in fns):>6}{sum(r['ready_s'] for r in fns):>10.2f}{total:>9.2f}"
    )
    figure("big run: functions' CPU-s (from /proc)", f"{total:.1f} CPU-s", "")
    return rows


def _keep_logs(state_dir: Path) -> Path:
    """Copy the stack's server logs out of the temporary dir (it is removed on exit)."""
    kept = Path(tempfile.mkdtemp(prefix="bench-big-run-logs-"))
    for log in state_dir.glob("*.log"):
        shutil.copy2(log, kept / log.name)
    return kept


def main() -> int:  # noqa: C901 -- a benchmark script: argument parsing, then one linear run and its report
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="500 ranks x 3 attempts, 1 GiB of logs, 40 exports")
    ap.add_argument("--ranks", type=int)
    ap.add_argument("--attempts", type=int)
    ap.add_argument("--exports", type=int)
    ap.add_argument("--log-mb", type=int)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the completed record")
    ap.add_argument("--keep-logs", action="store_true", help="keep the stack's logs even when the run completes")
    ap.add_argument("--sample", metavar="SCENARIO", help="a sample run instead (rlcleanup sample-run SCENARIO)")
    ap.add_argument("--cpu-from-proc", action="store_true", help="each server's CPU-s from /proc (see above)")
    ap.add_argument("--cpu-json", type=Path, help="with --cpu-from-proc: write the per-server CPU-s here")
    ap.add_argument("--hide-torch", action="store_true", help="no torch for the functions, as deployed")
    args = ap.parse_args()
    hidden = hide_torch() if args.hide_torch else None
    base = replace(SCALES["large"], model="llama-tiny") if args.full else SCALES["ci"]
    overrides = {"ranks": args.ranks, "attempts": args.attempts, "exports": args.exports}
    if args.log_mb is not None:
        overrides["log_bytes_total"] = args.log_mb * 2**20
    spec = replace(base, name="bench-big-run", **{k: v for k, v in overrides.items() if v is not None})
    run_id = f"math-rl-{args.sample}-{VERSION}" if args.sample else f"{spec.name}-{VERSION}"
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.sample:
        print(f"run: the sample run {args.sample!r} (rlcleanup sample-run)")
    else:
        print(
            f"run: {spec.ranks} ranks x {spec.attempts} attempts, {spec.log_bytes_total / 2**20:.0f} MiB of logs, "
            f"{spec.exports} exports x {spec.shards} shards ({spec.model}), {planned_objects(spec)} objects"
        )

    with tempfile.TemporaryDirectory(prefix="bench-big-run-") as tmp:
        work, state_dir = Path(tmp) / "run", Path(tmp) / "stack"
        t0 = time.monotonic()
        if args.sample:
            write_sample_run(work, args.sample)
        else:
            write_spec(work, spec)
        print(f"generate: {time.monotonic() - t0:.1f} s", flush=True)
        t0 = time.monotonic()
        state = up(state_dir, project="rlcleanup-bench", timeout=180)
        print(f"stack up: {time.monotonic() - t0:.1f} s (state dir {state_dir})", flush=True)
        cpu_ready = group_cpu(state.pgids) if args.cpu_from_proc else {}
        cpu_end: dict[str, float] = {}
        try:
            os.environ.update(state.env)
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage

            from rlcleanup.adapters.firestore_records import firestore_stores
            from rlcleanup.stack.emit import job_event, publish_event

            gcs = storage.Client(project=state.project, credentials=AnonymousCredentials())
            t0 = time.monotonic()
            run_uri = upload_sample_run(gcs, work, state.buckets["runs"], "bench")
            print(f"upload: {time.monotonic() - t0:.1f} s", flush=True)
            t0 = time.monotonic()
            publish_event(job_event(run_uri, "SUCCEEDED"), state.project)
            store, claims = firestore_stores(project=state.project)
            record = _wait_record(store, claims, run_id, args.timeout)
            if record is None:  # still report what ran: the figures say where it stopped
                print(f"pipeline: NOT FINISHED within {args.timeout:.0f} s", flush=True)
            else:
                pipeline_s = time.monotonic() - t0
                print(f"pipeline: {pipeline_s:.1f} s, record {record.status.value}", flush=True)
                size_label = "full" if args.full else "CI size"
                figure(f"big run event -> settled record ({size_label})", f"{pipeline_s:.1f} s", "<= 1/2 of before")
            progress = _progress(store, claims, run_id)
            print(f"  {_fmt(progress)}")
            last = store.get(run_id)
            for error in last.errors if last is not None else []:
                print(f"  record error: {error.step}: {error.message[:300]}")
            size = _document_bytes(store, run_id)
            if size is not None:
                print(f"  record document: ~{size:,} bytes (Firestore limit 1,048,576)")
            time.sleep(3)  # the last accounting lines follow the record
            served = [fn for fn in load_topology().functions if fn.name in state.functions]
            figures = _accounting(state_dir, [fn.name for fn in served], run_id)
            if args.cpu_from_proc:
                cpu_end = group_cpu(state.pgids)
            if args.keep_logs or record is None or record.status.value == "failed" or progress["errors"]:
                print(f"stack logs (fn-<name>.log per function) kept in {_keep_logs(state_dir)}")
        except BaseException:  # upload or a client call broke (or ^C): the logs say what the stack saw
            print(f"stack logs (fn-<name>.log per function) kept in {_keep_logs(state_dir)}", flush=True)
            raise
        finally:
            down(state_dir)
            if hidden is not None:
                shutil.rmtree(hidden, ignore_errors=True)

    over, closest = 0, (0.0, "")
    print(f"\n{'function':<26}{'calls':>6}{'errors':>7}{'max s':>9}{'peak MiB':>10}{'timeout':>9}{'memory':>8}")
    for fn in served:
        rows = figures[fn.name]
        if not rows:
            continue
        max_s = max(r["invocation_seconds"] for r in rows)
        peak = max(r["peak_rss_mib"] for r in rows)
        errors = sum(1 for r in rows if str(r["outcome"]).startswith("error"))
        flag = ""
        share = max(max_s / fn.timeout_seconds, peak / fn.memory_mib)
        closest = max(closest, (share, fn.name))
        if max_s >= fn.timeout_seconds or peak >= fn.memory_mib:
            over += 1
            flag = "  OVER A CAP"
        print(
            f"{fn.name:<26}{len(rows):>6}{errors:>7}{max_s:>9.2f}{peak:>10.1f}{fn.timeout_seconds:>8}s{fn.memory:>8}{flag}"
        )
    figure("big run: invocations over a cap", f"{over} (closest: {closest[1]} at {closest[0]:.0%})", "0")
    run_size = f"sample run {args.sample}" if args.sample else ("full big run" if args.full else "CI-size big run")
    try:
        from cost import report as cost_report
    except ImportError as exc:  # a tree without rlcleanup.ports.usage (no request counting, no CPU fields)
        print(f"\n(no cost report: {exc})")
    else:
        cost_report(served, figures, run_size)
    if cpu_end:
        cpu_rows = _cpu_table(cpu_ready, cpu_end, {name: len(lines) for name, lines in figures.items()})
        if args.cpu_json:
            meta = {"label": run_size, "run_id": run_id, "hide_torch": args.hide_torch, "rows": cpu_rows}
            args.cpu_json.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 1 if over or record is None else 0


if __name__ == "__main__":
    raise SystemExit(main())
