"""A hostile run shape (issue 37 item 3): a run with N tiny files, end to end on the embedded stack.

A sample run (`selection-policy`) gets N one-line log files in its last attempt's log directory: the log-scan plan
and the capture plan both page through them. Measured in a fresh child process (so its peak RSS is the run's
alone): wall time, peak RSS, the invocations (messages handled, per function), the slowest invocation and the
pages each plan took. With `--ceiling` below N the run must be refused as `run_too_large` instead (the figure is
how fast and how cheaply). A million files under the default ceiling is refused at page 40 of both plans (measured
in RESULTS.md); a million preserved needs the ceiling raised, given there by arithmetic.

    .venv/bin/python bench/bench_many_files.py --files 100000
    .venv/bin/python bench/bench_many_files.py --files 100000 --ceiling 20000
    .venv/bin/python bench/bench_many_files.py --files 1000000
    .venv/bin/python bench/bench_many_files.py --short      # CI: 200 files in pages of 60 (4 per plan)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

CHILD = "--child"


def _make_run(base: Path, files: int) -> Path:
    from rlcleanup.samples.generator import write_sample_run

    root = write_sample_run(base / "src", "selection-policy")
    logs = sorted((base / "src").rglob("attempts/*/logs"))[-1] / "many"
    logs.mkdir()
    for i in range(files):
        (logs / f"f{i:07d}.log").write_bytes(b"step %d ok\n" % i)
    return root


def _reset_high_water() -> bool:
    """Reset this process's resident-set high-water mark (Linux `clear_refs` 5, since 4.0): the next VmHWM read
    is the peak since now. False where the kernel or sandbox does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _status_mib(field: str) -> float:
    """A /proc/self/status figure in MiB: VmHWM (the peak resident set since the last reset) or VmRSS (now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _child(base: Path, files: int) -> None:
    from rlcleanup.runtime import embedded
    from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
    from rlcleanup.runtime.handlers import resolve_run_id

    root = _make_run(base, files)
    calls: Counter[str] = Counter()
    slowest: dict[str, float] = {}
    # Per invocation: the high-water mark is reset before each delivery and read after it, so each function's
    # figure is its own invocations' peak (the bus delivers one message at a time). It includes this process's
    # resident base (every function's imports), so it is an upper bound of what that function's instance holds.
    peak_mib: dict[str, float] = {}
    growth_mib: dict[str, float] = {}  # the invocation's peak above what was resident when it started
    per_invocation = _reset_high_water()
    original = EmbeddedStack._handler

    def timed_handler(self: EmbeddedStack, fn: object) -> object:
        inner = original(self, fn)  # type: ignore[arg-type]
        name = getattr(fn, "name", "?")

        def handle(data: bytes, attributes: dict[str, str], message_id: str) -> None:
            resident = _status_mib("VmRSS") if per_invocation else 0.0
            if per_invocation:
                _reset_high_water()
            started = time.perf_counter()
            inner(data, attributes, message_id)
            calls[name] += 1
            slowest[name] = max(slowest.get(name, 0.0), time.perf_counter() - started)
            if per_invocation:
                peak = _status_mib("VmHWM")
                peak_mib[name] = max(peak_mib.get(name, 0.0), peak)
                growth_mib[name] = max(growth_mib.get(name, 0.0), peak - resident)

        return handle

    embedded.EmbeddedStack._handler = timed_handler  # type: ignore[method-assign,assignment]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    stack = EmbeddedStack.create(base / "r.db", str(base / "p"))
    event = manual_event(str(root))
    stack.emit(event)
    wall = time.perf_counter() - started
    lifetime_peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # ru_maxrss is not reset by clear_refs
    record = stack.ports.records.get(resolve_run_id(stack.ports, event))
    pages = {
        plan: len(stack.ports.claims.results(record.run_id, f"{plan}-page:")) if record else 0
        for plan in ("capture-plan", "terminal-plan")
    }
    print(
        json.dumps(
            {
                "files": files,
                "wall_s": round(wall, 1),
                "peak_rss_mib_whole_process": lifetime_peak_kib // 1024,
                "rss_before_run_mib": rss_before // 1024,
                "invocations": sum(calls.values()),
                "per_function": dict(sorted(calls.items())),
                "peak_rss_mib_per_invocation": {k: round(v) for k, v in sorted(peak_mib.items(), key=lambda kv: -kv[1])}
                if per_invocation
                else "not measurable here (no /proc/self/clear_refs)",
                "peak_growth_mib_per_invocation": {
                    k: round(v) for k, v in sorted(growth_mib.items(), key=lambda kv: -kv[1])
                },
                "slowest_invocation_s": {k: round(v, 2) for k, v in sorted(slowest.items(), key=lambda kv: -kv[1])[:5]},
                "pages": pages,
                "status": record.status.value if record else None,
                "errors": [f"{e.code}: {e.message[:160]}" for e in (record.errors if record else [])][:3],
                "preserved_objects": record.preserved_object_count if record else None,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--ceiling", type=int, default=None, help="RLCLEANUP_MAX_RUN_OBJECTS for this run")
    parser.add_argument("--short", action="store_true", help="200 files in pages of 60 (CI: the bench still works)")
    parser.add_argument(CHILD, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.short:
        args.files = 200
    if args.child:
        _child(Path(args.child), args.files)
        return
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    env = dict(os.environ)
    if args.ceiling is not None:
        env["RLCLEANUP_MAX_RUN_OBJECTS"] = str(args.ceiling)
    if args.short:  # several pages per plan, as the full size has
        env["RLCLEANUP_CAPTURE_PAGE_OBJECTS"] = "60"
    with tempfile.TemporaryDirectory(prefix="bench-many-") as tmp:
        cmd = [sys.executable, __file__, "--files", str(args.files), CHILD, tmp]
        subprocess.run(cmd, check=True, env=env)


if __name__ == "__main__":
    main()
