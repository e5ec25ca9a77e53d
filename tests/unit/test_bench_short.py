"""Every bench runs at its smallest meaningful size, so none rots unnoticed (issue 48: bench_hub_publish.py failed
with `publish_to_hub() missing 'pinned'` and bench_many_files.py had no size CI could afford).

`bench/run_all.py`'s SHORT list names every bench in bench/ with its short arguments (`python -m bench --short`
runs them all, the emulator-stack ones included). Here, in the unit tier, the short modes that need no emulator
stack and finish in seconds on an idle machine are run for real, each in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from run_all import SHORT  # noqa: E402

# Run here: fast without a stack. The others (a stack, an S3 server, a Firestore emulator, or minutes of CPU) run
# with `python -m bench --short`.
IN_UNIT_TIER = ("bench_import.py", "bench_hub_publish.py", "bench_many_files.py", "bench_ledger.py")


def test_every_bench_has_a_short_mode() -> None:
    benches = {p.name for p in BENCH.glob("bench_*.py")} | {"faults.py"}
    assert {cmd[0] for cmd in SHORT} == benches


@pytest.mark.parametrize("cmd", [c for c in SHORT if c[0] in IN_UNIT_TIER], ids=lambda c: c[0])
def test_a_bench_runs_in_its_short_mode(cmd: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / cmd[0]), *cmd[1:]],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert done.stdout.strip()  # it printed its figures
