"""Cold import time of the Cloud Run entry module (functions/main.py), each in a fresh interpreter.

Reports the median of N runs of: the import alone (measured inside the child) and the whole process (interpreter
start + import + exit), and the import's CPU time (on a shared machine the wall time waits for a core; the CPU time is
what it would be on an idle one). The goal is an import of 1 s or less.
Run: .venv/bin/python bench/bench_import.py [-n 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from _common import REPO, figure

CHILD = (
    "import sys, time; sys.path.insert(0, 'functions'); t, c = time.perf_counter(), time.process_time(); import main; "
    "print(time.perf_counter() - t, time.process_time() - c)"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=5)
    args = ap.parse_args()
    imports, cpus, processes = [], [], []
    for _ in range(args.n):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, check=True)
        processes.append(time.perf_counter() - t0)
        wall, cpu = out.stdout.strip().splitlines()[-1].split()
        imports.append(float(wall))
        cpus.append(float(cpu))
    print(f"functions/main.py cold import, {args.n} fresh processes:")
    print(f"  import alone: median {statistics.median(imports):.3f} s (min {min(imports):.3f}, max {max(imports):.3f})")
    print(f"  import CPU: median {statistics.median(cpus):.3f} s (what the wall time is on an idle core)")
    print(f"  whole process: median {statistics.median(processes):.3f} s (interpreter start + import + exit)")
    print(f"  goal <= 1 s: {'met' if statistics.median(imports) <= 1.0 else 'NOT met'}")
    figure("entry-point import, wall (median)", f"{statistics.median(imports):.3f} s", "<= 1 s")
    figure("entry-point import, CPU (median; wall on an idle core)", f"{statistics.median(cpus):.3f} s", "<= 1 s")


if __name__ == "__main__":
    main()
