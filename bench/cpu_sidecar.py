"""CPU-seconds of each stack server while a bench runs, read from /proc: the same measure for any tree.

An A/B of whole-run CPU against an older commit cannot use that commit's accounting lines (it may have none) nor
today's bench script (it speaks today's record-store API). This wraps the *tree's own* bench command instead:
it passes the command's output through, learns the state dir from the stack's "stack up: ... (state dir D)" line,
reads D/state.json's process groups, and samples each group's CPU (utime + stime of every member, reaped children
too) from /proc: once when the stack is ready, then every 0.5 s until the command exits. Each group's figure is
the highest sample (a group's counters only grow while it lives; its last half second before `down` is lost).

    python bench/cpu_sidecar.py --json /tmp/a.json --hide-torch -- python bench/bench_big_run.py --full

`--hide-torch` puts a `torch` that raises ImportError on the servers' PYTHONPATH, as in the deployed bundle.
Nothing here imports rlcleanup.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_STATE_DIR = re.compile(r"stack up: .*\(state dir (\S+)\)")


def group_cpu(pgids: dict[str, int]) -> dict[str, float]:
    """CPU seconds of each process group: utime + stime (all threads) + cutime + cstime (reaped children) of every
    member, zombies included (not reaped yet, so not in a parent's cutime), from /proc/<pid>/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    by_group: dict[int, int] = dict.fromkeys(pgids.values(), 0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # state ppid pgrp ... utime(11) stime cutime cstime(14)
        if len(fields) > 14 and int(fields[2]) in by_group:
            by_group[int(fields[2])] += sum(int(f) for f in fields[11:15])
    return {name: by_group[pgid] / tick for name, pgid in pgids.items()}


def hide_torch() -> Path:
    """A directory whose `torch` package raises ImportError, put on PYTHONPATH for the processes started later."""
    hidden = Path(tempfile.mkdtemp(prefix="bench-hide-torch-"))
    (hidden / "torch").mkdir()
    (hidden / "torch" / "__init__.py").write_text('raise ImportError("torch hidden by the bench (as deployed)")\n')
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(hidden)) if p)
    return hidden


def _sample(state_dir: Path, done: threading.Event, out: dict[str, Any]) -> None:
    state = json.loads((state_dir / "state.json").read_text())
    pgids: dict[str, int] = state["pgids"]
    out["ready"] = group_cpu(pgids)
    out["peak"] = dict(out["ready"])
    while not done.wait(0.5):
        for name, cpu in group_cpu(pgids).items():
            out["peak"][name] = max(out["peak"][name], cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="write each server's CPU-s here")
    ap.add_argument("--hide-torch", action="store_true", help="no torch for the servers, as deployed")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the bench command")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the bench command after --")
    hidden = hide_torch() if args.hide_torch else None
    done = threading.Event()
    figures: dict[str, Any] = {}
    sampler: threading.Thread | None = None
    t0 = time.monotonic()
    try:
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                found = _STATE_DIR.search(line)
                if found and sampler is None:
                    sampler = threading.Thread(target=_sample, args=(Path(found[1]), done, figures), daemon=True)
                    sampler.start()
            rc = proc.wait()
    finally:
        done.set()
        if sampler is not None:
            sampler.join()
        if hidden is not None:
            shutil.rmtree(hidden, ignore_errors=True)
    if "peak" not in figures:
        print("cpu_sidecar: the command printed no 'stack up: ... (state dir D)' line; no figures", file=sys.stderr)
        return rc or 1
    rows = {
        name: {"ready_s": figures["ready"][name], "run_s": figures["peak"][name] - figures["ready"][name]}
        for name in figures["peak"]
    }
    print("\nCPU-s from /proc (process groups; 'at ready' = start-up, 'run' = ready -> the command's end)")
    print(f"{'server':<30}{'at ready':>10}{'run':>9}")
    for name, row in rows.items():
        print(f"{name:<30}{row['ready_s']:>10.2f}{row['run_s']:>9.2f}")
    functions = [row for name, row in rows.items() if name.startswith("fn-")]
    total = sum(row["run_s"] for row in functions)
    print(f"{'functions total':<30}{sum(r['ready_s'] for r in functions):>10.2f}{total:>9.2f}")
    if args.json:
        meta = {"command": command, "hide_torch": args.hide_torch, "wall_s": time.monotonic() - t0, "rows": rows}
        args.json.write_text(json.dumps(meta, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
