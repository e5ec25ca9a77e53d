"""`make demo`: write a bundled sample run and run the whole pipeline on it (embedded default, no cloud)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

SCENARIOS = ("completed-resumed", "failed-first-link")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="rlcleanup-demo-"))
    rlcleanup = str(Path(sys.executable).with_name("rlcleanup"))
    for scenario in SCENARIOS:
        run_root = subprocess.run(
            [rlcleanup, "sample-run", str(work / scenario), "--scenario", scenario],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        print(f"\n=== {scenario}: rlcleanup run {run_root}\n", flush=True)
        subprocess.run(
            [rlcleanup, "run", run_root, "--preserve-to", str(work / "preserved"), "--db", str(work / "records.db")],
            check=True,
        )
    print(f"\nPreserved evidence and manifests: {work / 'preserved'}\nRecords: {work / 'records.db'}")
    for report in sorted((work / "preserved").glob("*/derived/report.html")):
        print(f"Report (open in a browser): {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
