"""First-causal-error scan over a large run's logs: MB/s per core and peak RSS, vs `grep -n` over the same files.

The scan (parsing.logs.scan_attempt over every attempt, then steps.terminal.find_first_error) runs in a fresh
child process so its peak RSS (getrusage ru_maxrss) is its own; grep runs over exactly the files the scanner
reads (log_order: python-core-*.log and binaries are skipped by both). Single-threaded: CPU s ≈ wall s.
Run: .venv/bin/python bench/bench_logs.py [--full] [--run R]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import build_run, fmt_bytes
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.parsing.logs import log_order
from rlcleanup.steps.layout import discover

GREP_PATTERN = r"Traceback \(most recent call last\)|Error|error:|Fatal|SIG[A-Z]+"


def scanned_files(run: Path) -> list[str]:
    layout = discover(LocalStorage(checksums=False), str(run))
    return [uri for att in layout.attempts for uri in log_order(att.log_uris)]


def child(run: str) -> None:
    """Scan every attempt; print one JSON line with wall, CPU, RSS before/after and what was found."""
    from rlcleanup.parsing.logs import scan_attempt
    from rlcleanup.steps.terminal import find_first_error

    storage = LocalStorage(checksums=False)
    layout = discover(storage, run)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu0, t0 = time.process_time(), time.perf_counter()
    scans = [scan_attempt(storage, att) for att in layout.attempts]
    first = find_first_error(scans)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    found = first.candidate if first else None
    print(
        json.dumps(
            {
                "wall": wall,
                "cpu": cpu,
                "rss_before_kib": rss_before,
                "rss_peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "lines": sum(f.lines for s in scans for f in s.files),
                "files": sum(len(s.files) for s in scans),
                "first": f"{found.error_type} at {Path(found.source_uri).name}:{found.line}" if found else None,
                "causal": bool(first and first.causal),
            }
        )
    )


def grep(files: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, matching lines) of `grep -n -E` over files, in argv batches."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, matches = time.perf_counter(), 0
    for i in range(0, len(files), 2000):
        out = subprocess.run(
            ["grep", "-n", "-E", GREP_PATTERN, *files[i : i + 2000]],
            capture_output=True,
            env={"LC_ALL": "C"},
            check=False,
        )
        matches += out.stdout.count(b"\n")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), matches


def bench(run: Path) -> None:
    files = scanned_files(run)
    total = sum(Path(f).stat().st_size for f in files)
    print(f"logs scanned: {len(files):,} files, {fmt_bytes(total)}")
    for f in files:  # warm the page cache for both contenders alike
        Path(f).read_bytes()
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(run)], capture_output=True, text=True, check=True
    ).stdout
    res = json.loads(out.strip().splitlines()[-1])
    mb = total / 1e6
    print(f"  scanner: {res['wall']:.2f} s wall, {res['cpu']:.2f} s CPU -> {mb / res['cpu']:.1f} MB/s per core")
    print(f"           {res['lines']:,} lines; first error found: {res['first']} (causal={res['causal']})")
    rss_delta = (res["rss_peak_kib"] - res["rss_before_kib"]) * 1024
    print(
        f"           peak RSS {fmt_bytes(res['rss_peak_kib'] * 1024)} "
        f"(+{fmt_bytes(rss_delta)} over the process after imports and discovery)"
    )
    g_wall, g_cpu, matches = grep(files)
    print(
        f"  grep -n -E: {g_wall:.2f} s wall, {g_cpu:.2f} s CPU -> {mb / max(g_cpu, 1e-9):.1f} MB/s; {matches:,} lines"
    )
    print(f"  ratio: the scanner takes {res['cpu'] / max(g_cpu, 1e-9):.1f}x grep's CPU time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", action="store_true", help="500 ranks x 3 attempts, 1 GiB of logs")
    ap.add_argument("--run", type=Path, help="an existing run root (skips generation)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    if args.run:
        bench(args.run)
        return
    with tempfile.TemporaryDirectory(prefix="bench-logs-") as tmp:
        run, spec, secs = build_run(Path(tmp), args.full, exports=2)
        print(f"generated {spec.ranks} ranks x {spec.attempts} attempts in {secs:.1f} s")
        bench(run)


if __name__ == "__main__":
    main()
