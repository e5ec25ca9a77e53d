"""Cold import time of the Cloud Run entry module (functions/main.py), each in a fresh interpreter.

Reports the median of N runs of: the import alone (measured inside the child) and the whole process (interpreter
start + import + exit), and the import's CPU time (on a shared machine the wall time waits for a core; the CPU time is
what it would be on an idle one). Also the import's CPU in a process that has functions-framework loaded already
(what a Cloud Run instance pays on top of its server, which imports it before our source), and what the first
delivery adds (the pipeline, `rlcleanup.runtime.functions`). Goal (issue 48): the entry-point import <= 0.3 s CPU.
Run: .venv/bin/python bench/bench_import.py [-n 5] [--short]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from _common import REPO, figure

_TIMED = (
    "t, c = time.perf_counter(), time.process_time(); {stmt}; print(time.perf_counter() - t, time.process_time() - c)"
)
CHILD = "import sys, time; sys.path.insert(0, 'functions'); " + _TIMED.format(stmt="import main")
AFTER_FRAMEWORK = "import sys, time, functions_framework; sys.path.insert(0, 'functions'); " + _TIMED.format(
    stmt="import main"
)
FIRST_DELIVERY = "import sys, time; sys.path.insert(0, 'functions'); import main; " + _TIMED.format(
    stmt="import rlcleanup.runtime.functions"
)


def _measure(code: str) -> tuple[float, float, float]:
    """(import wall, import CPU, whole process wall) of one fresh interpreter running `code`."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    whole = time.perf_counter() - t0
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu), whole


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--short", action="store_true", help="one run of each (CI: the bench still works)")
    args = ap.parse_args()
    n = 1 if args.short else args.n
    runs = [_measure(CHILD) for _ in range(n)]
    imports, cpus, processes = ([r[i] for r in runs] for i in range(3))
    after = statistics.median(_measure(AFTER_FRAMEWORK)[1] for _ in range(n))
    first = statistics.median(_measure(FIRST_DELIVERY)[1] for _ in range(n))
    print(f"functions/main.py cold import, {n} fresh processes (load {os.getloadavg()[0]:.1f}):")
    print(f"  import alone: median {statistics.median(imports):.3f} s (min {min(imports):.3f}, max {max(imports):.3f})")
    print(f"  import CPU: median {statistics.median(cpus):.3f} s (what the wall time is on an idle core)")
    print(f"  import CPU with functions-framework already loaded (a Cloud Run instance): median {after:.3f} s")
    print(f"  the first delivery's imports (the pipeline), CPU: median {first:.3f} s")
    print(f"  whole process: median {statistics.median(processes):.3f} s (interpreter start + import + exit)")
    print(f"  goal <= 0.3 s CPU: {'met' if statistics.median(cpus) <= 0.3 else 'NOT met'}")
    figure("entry-point import, wall (median)", f"{statistics.median(imports):.3f} s", "<= 1 s")
    figure("entry-point import, CPU (median; wall on an idle core)", f"{statistics.median(cpus):.3f} s", "<= 0.3 s")
    figure("entry-point import after functions-framework, CPU", f"{after:.3f} s", "<= 0.3 s")
    figure("first delivery's pipeline import, CPU", f"{first:.3f} s", "")


if __name__ == "__main__":
    main()
