"""Cold import time of the Cloud Run entry module (functions/main.py), each in a fresh interpreter.

Reports the median of N runs of: the import alone (measured inside the child) and the whole process (interpreter
start + import + exit). The goal is an import of 1 s or less.
Run: .venv/bin/python bench/bench_import.py [-n 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from _common import REPO

CHILD = (
    "import sys, time; sys.path.insert(0, 'functions'); t = time.perf_counter(); import main; "
    "print(time.perf_counter() - t)"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=5)
    args = ap.parse_args()
    imports, processes = [], []
    for _ in range(args.n):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, check=True)
        processes.append(time.perf_counter() - t0)
        imports.append(float(out.stdout.strip().splitlines()[-1]))
    print(f"functions/main.py cold import, {args.n} fresh processes:")
    print(f"  import alone: median {statistics.median(imports):.3f} s (min {min(imports):.3f}, max {max(imports):.3f})")
    print(f"  whole process: median {statistics.median(processes):.3f} s (interpreter start + import + exit)")
    print(f"  goal <= 1 s: {'met' if statistics.median(imports) <= 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
