"""`make demo`: write bundled sample runs and run the whole pipeline on them (embedded default, no cloud).

Records and evidence go to the default locations (`$XDG_STATE_HOME/rlcleanup`), so `rlcleanup status`, `show`,
`report` and the README's Authority block work on them afterwards from any directory. A second `make demo` writes
fresh sample runs and re-runs them (`run --rerun`: the earlier records are kept as history).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rlcleanup.paths import default_db, default_preserve_root, state_home

SCENARIOS = ("completed-resumed", "failed-first-link")


def main() -> int:
    bin_dir = Path(sys.executable).parent
    rlcleanup = str(bin_dir / "rlcleanup")
    # Sample runs stay on disk (not in /tmp): a grant publishes from them and a reclaim deletes from them later.
    (state_home() / "demo-runs").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=state_home() / "demo-runs"))
    run_ids = []
    for scenario in SCENARIOS:
        run_root = subprocess.run(
            [rlcleanup, "sample-run", str(work / scenario), "--scenario", scenario],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        print(f"\n=== {scenario}: rlcleanup run {run_root} --rerun\n", flush=True)
        subprocess.run([rlcleanup, "run", run_root, "--rerun"], check=True)
        run_ids.append(f"math-rl-{scenario}-2026.11.30")
    print(f"\nSample runs: {work}\nRecords: {default_db()}\nPreserved evidence: {default_preserve_root()}")
    for run_id in run_ids:
        shown_record = subprocess.run([rlcleanup, "show", run_id, "--json"], capture_output=True, text=True)
        locations = json.loads(shown_record.stdout).get("preserved_locations") if shown_record.returncode == 0 else []
        report = Path(locations[0]) / "derived" / "report.html" if locations else None
        if report is not None and report.is_file():
            print(f"Report (open in a browser): {report}")
    shown = bin_dir.relative_to(Path.cwd()) if bin_dir.is_relative_to(Path.cwd()) else bin_dir
    print(
        "\nNext, from the repo root (they read what the demo just made; or `source "
        f"{shown}/activate` and drop the prefix):"
    )
    for line in (
        "status",
        f"show {run_ids[0]}",
        f"report {run_ids[1]} --format html --out /tmp/rlcleanup-report",
        f"watch {run_ids[0]} --json",
    ):
        print(f"  {shown}/rlcleanup {line}")
    print("  then the README's Authority block publishes and reclaims step 20 of the first run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
