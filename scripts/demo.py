"""`make demo`: write bundled sample runs and run the whole pipeline on them (embedded default, no cloud).

Records and evidence go to the default locations (`$XDG_STATE_HOME/rlcleanup`), so `rlcleanup status`, `show`,
`report` and the README's Authority block work on them afterwards from any directory. It needs no `layout-check`
extra (the Makefile's demo install leaves out torch + transformers): the tensor layout check is then skipped, a
warning on each candidate, and the demo says so. A second `make demo` writes
the sample runs afresh in the same place and re-runs them (`run --rerun`: the earlier records are kept as
history). The same place, because a run's id is bound to where it lives (runtime/admission.py): samples at a new
path each time would be other runs claiming the same ids.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from rlcleanup.paths import default_db, default_preserve_root, state_home

SCENARIOS = ("completed-resumed", "failed-first-link")


def layout_check_note() -> str | None:
    """What the demo says when the `layout-check` extra (torch + transformers) is not installed, as on the demo's
    own install (Makefile: `make demo` leaves it out; `make test` adds it): the check of export tensor names against
    the architecture was skipped, which each candidate's record carries as a warning, never as a problem."""
    import importlib.util

    if all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers")):
        return None
    return (
        "Tensor layout check: skipped on every export (the optional `layout-check` extra, torch + transformers, is not "
        "installed; each candidate's warnings say so). `make test` or pip install 'rlcleanup[layout-check]' adds it."
    )


def _forget_an_older_demos_record(rlcleanup: str, run_id: str, samples: Path) -> None:
    """Earlier versions of this demo wrote the samples elsewhere under `demo-runs/` (`demo-runs/run-<random>/`): their
    record binds the sample's id to that location, and `run` records the samples here under their location's id
    with a run_id_conflict on both records.
    Only a record of the demo's own, bound inside `demo-runs/` but not to these samples, is forgotten; any other
    record keeps its id and the conflict is reported as usual."""
    shown = subprocess.run([rlcleanup, "show", run_id, "--json"], capture_output=True, text=True)
    if shown.returncode != 0:
        return  # no such record
    bound = Path(str(json.loads(shown.stdout).get("run_uri") or ""))
    demo_runs = samples.parent
    if bound.is_relative_to(demo_runs) and not bound.is_relative_to(samples):
        print(f"forgetting {run_id}: an older demo's record of samples at {bound}", flush=True)
        subprocess.run([rlcleanup, "forget", run_id, "--yes"], check=True, capture_output=True)


def main() -> int:
    bin_dir = Path(sys.executable).parent
    rlcleanup = str(bin_dir / "rlcleanup")
    # Sample runs stay on disk (not in /tmp): a grant publishes from them and a reclaim deletes from them later.
    # Written afresh each time (a reclaim may have deleted from the last ones), at the same path.
    work = state_home() / "demo-runs" / "samples"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run_ids = []
    for scenario in SCENARIOS:
        run_root = subprocess.run(
            [rlcleanup, "sample-run", str(work / scenario), "--scenario", scenario],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        run_id = f"math-rl-{scenario}-2026.11.30"
        _forget_an_older_demos_record(rlcleanup, run_id, work)
        print(f"\n=== {scenario}: rlcleanup run {run_root} --rerun\n", flush=True)
        subprocess.run([rlcleanup, "run", run_root, "--rerun"], check=True)
        run_ids.append(run_id)
    print(f"\nSample runs: {work}\nRecords: {default_db()}\nPreserved evidence: {default_preserve_root()}")
    note = layout_check_note()
    if note:
        print(note)
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
