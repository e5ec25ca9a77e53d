"""Learning across runs: time per "other runs with the same signature" lookup as the record store grows
(issue 39), on SQLite and on the Firestore emulator.

The store holds the sample history (samples/history.py: the current run, two earlier runs with its signature, a
near miss, a fixed experiment) plus filler records, each failed with a signature of its own (every tenth
completed), grown in steps (`--sizes`, default 1,000 / 5,000 / 10,000 records). At each size:
- `runs_where`: the one indexed query (signature ==, ended before the current run, newest first, limit 21);
- `similar_runs`: the whole lookup the record and `rlcleanup similar` make (two signature queries: up to the current
  run's second, and the newest, for the runs after it; then one experiment query per listed failed run for what
  fixed it, and the kept configurations it diffs);
- SQLite only, for contrast: the same answer by a scan of every record (what the lookup would cost unindexed).
Median of `--repeat` lookups after one warm-up. Prints figures; asserts nothing about time.

Run: .venv/bin/python bench/bench_similar.py [--sizes 1000 5000 10000] [--repeat 30] [--no-firestore]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import figure
from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.records import RunRecords
from rlcleanup.samples.history import filler_record, write_history
from rlcleanup.stack import procs
from rlcleanup.stack.tools import emulator_scripts
from rlcleanup.steps.history import similar_runs


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: connections, statement cache
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def grow(records: RunRecords, start: int, stop: int) -> float:
    t0 = time.perf_counter()
    for index in range(start, stop):
        records.create_if_absent(filler_record(index))
    return time.perf_counter() - t0


def measure(name: str, records: RunRecords, sizes: list[int], repeat: int, scan: Callable[[], object] | None) -> None:
    history = write_history(records)
    current = records.get(history.current)
    assert current is not None and current.signature is not None
    signature, ended = current.signature, current.ended_at
    expected = [history.later_same, *history.oom_earlier]  # before and after this run
    stored = 0
    for size in sizes:
        seconds = grow(records, stored, size)
        stored = size
        found = [s.run_id for s in similar_runs(records, current)]
        assert found == expected, found  # the same answer at every size
        one = median_ms(lambda: records.runs_where("signature", signature, ended_before=ended, limit=21), repeat)
        whole = median_ms(lambda: similar_runs(records, current), repeat)
        line = f"{name}: {size:>6} filler records (+{len(expected) + 6} history; wrote them in {seconds:.1f} s)"
        line += f" | runs_where {one:.2f} ms | similar_runs {whole:.2f} ms"
        if scan is not None:
            line += f" | unindexed scan {median_ms(scan, max(3, repeat // 10)):.1f} ms"
        print(line, flush=True)
        figure(f"similar lookup, {name}, {size} records", f"{one:.2f} ms query, {whole:.2f} ms with fixes")


def sqlite_scan(db: Path, signature: str) -> Callable[[], list[CompletionRecord]]:
    import sqlite3

    def scan() -> list[CompletionRecord]:
        conn = sqlite3.connect(str(db))
        try:
            rows = conn.execute("SELECT doc FROM records").fetchall()
        finally:
            conn.close()
        docs = [CompletionRecord.model_validate_json(doc) for (doc,) in rows]
        return [r for r in docs if r.signature == signature]

    return scan


def firestore_emulator(state_dir: Path) -> tuple[procs.Server, str]:
    _, firestore_script = emulator_scripts()
    port = procs.free_port()
    argv = [str(firestore_script), "start", "--host=127.0.0.1", f"--port={port}", "--database-mode=firestore-native"]
    server = procs.start("firestore", argv, state_dir=state_dir, env=dict(os.environ))
    procs.wait_ready(server, lambda: procs.accepts(port), timeout=120, port=port)
    return server, f"127.0.0.1:{port}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--no-firestore", action="store_true")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-similar-") as tmp:
        db = Path(tmp) / "records.db"
        sqlite = SqliteRunRecords(db)
        probe_store = SqliteRunRecords(Path(tmp) / "probe.db")
        probe = probe_store.get(write_history(probe_store).current)
        assert probe is not None and probe.signature is not None
        measure("SQLite", sqlite, args.sizes, args.repeat, sqlite_scan(db, probe.signature))
        if args.no_firestore:
            return
        server, host = firestore_emulator(Path(tmp))
        try:
            os.environ["FIRESTORE_EMULATOR_HOST"] = host
            from rlcleanup.adapters.firestore_records import firestore_stores

            records, _ = firestore_stores(project="bench-similar")
            measure("Firestore emulator", records, args.sizes, max(5, args.repeat // 3), None)
        finally:
            procs.stop_group(server.pid, popen=server.popen)  # the emulator this bench started, by its group


if __name__ == "__main__":
    sys.exit(main())
