"""Run every bench, CI-sized by default; `--full` for the issue's sizes (500 ranks, 1 GiB of logs, 40 exports).

Each bench runs in its own process and prints its figures; nothing is asserted on time.
Run: .venv/bin/python bench/run_all.py [--full]   (or `make bench`, which runs `python -m bench`)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CI: list[list[str]] = [
    ["bench_import.py"],
    ["bench_logs.py"],
    ["bench_validate.py"],
    ["bench_validate_many.py", "--exports", "8", "--latency-ms", "20"],
    ["bench_capture.py"],
    ["bench_big_run.py"],
]
FULL: list[list[str]] = [
    ["bench_import.py"],
    ["bench_logs.py", "--full"],
    ["bench_validate.py"],
    ["bench_validate_many.py", "--exports", "40", "--latency-ms", "20"],
    ["bench_capture.py", "--full"],
    ["bench_big_run.py", "--full"],
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", action="store_true")
    args = ap.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    failed = 0
    for cmd in FULL if args.full else CI:
        print(f"\n$ python bench/{' '.join(cmd)}", flush=True)
        failed += subprocess.run([sys.executable, str(HERE / cmd[0]), *cmd[1:]], cwd=HERE.parent).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
