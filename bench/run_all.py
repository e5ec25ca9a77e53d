"""Run every bench, CI-sized by default; `--full` for the issue's sizes (500 ranks, 1 GiB of logs, 40 exports).

Each bench runs in its own process and prints its figures; nothing is asserted on time. The issue's figures (the
benches' `FIGURE | name | value | goal` lines) are gathered into one table at the end, with the load at each start.
`--short`: every bench (bench_load and the fault scenarios too) at its smallest meaningful size.
Run: .venv/bin/python bench/run_all.py [--full | --short]   (or `make bench`, which runs `python -m bench`)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from _common import FIGURE_MARK

HERE = Path(__file__).resolve().parent

CI: list[list[str]] = [
    ["bench_import.py"],
    ["bench_logs.py", "--one-file", "300"],
    ["bench_log_engines.py"],
    ["bench_validate.py"],
    ["bench_validate_many.py", "--exports", "8", "--latency-ms", "10", "25"],
    ["bench_capture.py"],
    ["bench_secret_scan.py"],
    ["bench_discover.py"],
    ["bench_big_run.py", "--sample", "completed-resumed"],
    ["bench_big_run.py"],
    ["bench_event_sources.py", "--runs", "10", "--sweep-runs", "1000"],
    ["bench_tensor_layout.py"],
    ["bench_similar.py", "--sizes", "1000", "5000", "10000"],
    ["bench_trillion.py"],
    ["bench_failure_corpus.py"],
]
FULL: list[list[str]] = [
    ["bench_import.py"],
    ["bench_logs.py", "--full", "--one-file", "1024"],
    ["bench_log_engines.py"],
    ["bench_validate.py"],
    ["bench_validate_many.py", "--exports", "40", "--latency-ms", "10", "25"],
    ["bench_capture.py", "--full"],
    ["bench_secret_scan.py", "--full"],
    ["bench_discover.py", "--full"],
    ["bench_big_run.py", "--sample", "completed-resumed"],
    ["bench_big_run.py", "--full"],
    ["bench_event_sources.py", "--runs", "10", "--sweep-runs", "1000"],
    ["bench_tensor_layout.py"],
    ["bench_similar.py", "--sizes", "1000", "5000", "10000"],
    ["bench_trillion.py", "--slice-ranks", "128"],
    ["bench_failure_corpus.py"],
]
# Every bench at its smallest meaningful size (`python -m bench --short`): each still does its whole job, so none
# rots unnoticed. tests/unit/test_bench_short.py runs the ones that need no emulator stack and checks that every
# bench in bench/ is listed here.
SHORT: list[list[str]] = [
    ["bench_import.py", "--short"],
    ["bench_logs.py"],
    ["bench_log_engines.py", "--repeat", "1"],
    ["bench_validate.py"],
    ["bench_validate_many.py", "--exports", "1", "--latency-ms", "10"],
    ["bench_capture.py", "--latency-ms", "10", "--seq-sample", "20"],
    ["bench_secret_scan.py", "--slice-mb", "0.2"],
    ["bench_discover.py", "--repeat", "1"],
    ["bench_ledger.py", "--repeat", "1"],
    ["bench_tensor_layout.py"],
    ["bench_similar.py", "--sizes", "200", "--repeat", "2", "--no-firestore"],
    ["bench_trillion.py", "--slice-ranks", "8", "--slice-log-mb", "2"],
    ["bench_hub_publish.py", "--short"],
    ["bench_many_files.py", "--short"],
    ["bench_s3_client.py", "--exports", "1", "--repeat", "1"],
    ["bench_large_copy.py", "--gib", "1", "--kill-after", "1"],
    ["bench_big_run.py", "--sample", "completed-resumed"],
    ["bench_event_sources.py", "--runs", "1", "--sweep-runs", "50"],
    ["bench_latency.py", "--runs", "1", "--burst", "2"],
    ["bench_load.py", "--runs", "3"],
    ["faults.py", "--short"],
    ["bench_failure_corpus.py"],
]
# Not here: bench_load.py (200 run ends on the emulator stack: ~20-40 min on 2 shared cores). Run it on its own:
#   .venv/bin/python bench/bench_load.py --runs 200


def _uptime() -> str:
    load = os.getloadavg()
    return f"load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="the issue's sizes")
    size.add_argument("--short", action="store_true", help="every bench at its smallest size (none rots)")
    args = ap.parse_args(argv)
    print(f"{_uptime()} before", flush=True)
    failed = 0
    figures: list[tuple[str, str, str, str, str]] = []  # (bench, name, value, goal, load at its start)
    for cmd in FULL if args.full else SHORT if args.short else CI:
        print(f"\n$ python bench/{' '.join(cmd)}", flush=True)
        load = f"{os.getloadavg()[0]:.1f}"
        argv_ = [sys.executable, str(HERE / cmd[0]), *cmd[1:]]
        with subprocess.Popen(argv_, cwd=HERE.parent, stdout=subprocess.PIPE, text=True, bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:  # echoed as it comes; the FIGURE lines are gathered for the summary
                print(line, end="", flush=True)
                if line.startswith(FIGURE_MARK + " |"):
                    _, name, value, goal = (part.strip() for part in line.split("|", 3))
                    figures.append((cmd[0], name, value, goal, load))
        failed += proc.returncode != 0
    print(
        f"\n== figures ({'--full' if args.full else '--short' if args.short else 'CI size'}; {_uptime()} after; load = 1-min average at each "
        "bench's start, 2 CPUs shared) =="
    )
    width = max((len(name) for _, name, *_ in figures), default=10)
    for bench, name, value, goal, load in figures:
        print(f"  {name:<{width}}  {value:>22}  goal {goal or '-':<18} load {load:>5}  ({bench})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
