"""First-causal-error scan over a large run's logs: MB/s per core and peak RSS, vs `grep -n` over the same files.

The scan (parsing.attempt_logs.scan_attempt over every attempt, then steps.first_cause.find_first_error) runs in a fresh
child process so its peak RSS is its own (VmHWM from /proc/self/status: getrusage's ru_maxrss survives exec on
Linux and would report the parent's peak at fork); the parent discovers the run once and hands the
child its attempts (ids and log uris), so the child's peak is imports + the scan, not the listing of 10,000 objects.
grep runs over exactly the files the scanner reads (log_order: python-core-*.log and binaries are skipped by both).
Single-threaded: CPU s ~ wall s. The block scanner is compared with the line scanner it replaced (every line fed
to LogScanner, the path scan_log takes without the RE2 finder) in the same run: both verdicts must agree.
`--one-file MIB` also scans one log of that size (a worker log repeated) for RSS whatever the file size: once whole
in one scan (its results held at once), and cut as scan-log-part cuts it (segments of MAX_PART_BYTES, each part's
scan serialised and dropped, as one invocation each would).
Run: .venv/bin/python bench/bench_logs.py [--full] [--run R] [--line | --no-line] [--one-file MIB]
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
from pathlib import Path
from typing import Any

from _common import build_run, figure, fmt_bytes
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.parsing.attempt_logs import attempt_log_objects, log_order
from rlcleanup.steps.layout import discover

GREP_PATTERN = r"Traceback \(most recent call last\)|Error|error:|Fatal|SIG[A-Z]+"


def attempts_of(run: Path) -> list[dict[str, object]]:
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(run))
    return [
        {"attempt_id": a.attempt_id, "log_uris": log_order(o.uri for o in attempt_log_objects(storage, a))}
        for a in layout.attempts
    ]


def peak_rss_kib() -> int:
    """This process's own resident high-water mark (VmHWM), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: the best there is


def child(attempts_json: str, engine: str) -> None:
    """Scan every attempt; print one JSON line with wall, CPU, RSS before/after and what was found."""
    from rlcleanup.parsing.attempt_logs import scan_attempt
    from rlcleanup.ports.storage import ObjectInfo
    from rlcleanup.steps.first_cause import find_first_error
    from rlcleanup.steps.layout import AttemptFiles

    if engine == "line":  # the line scanner: scan_log feeds every line when hit_finder() finds no google-re2
        sys.modules["re2"] = None  # None in sys.modules makes `import re2` raise ImportError (before the first scan)
    storage = LocalStorage(checksums=False)
    attempts = [
        AttemptFiles(
            attempt_id=a["attempt_id"],
            log_objects=[ObjectInfo(uri=uri, size=Path(uri).stat().st_size) for uri in a["log_uris"]],
        )
        for a in json.loads(attempts_json)
    ]
    rss_before = peak_rss_kib()
    if engine == "cut":
        cut_child(storage, attempts, rss_before)
        return
    cpu0, t0 = time.process_time(), time.perf_counter()
    scans = [scan_attempt(storage, att) for att in attempts]
    first = find_first_error(scans)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    found = first.candidate if first else None
    print(
        json.dumps(
            {
                "wall": wall,
                "cpu": cpu,
                "rss_before_kib": rss_before,
                "rss_peak_kib": peak_rss_kib(),
                "lines": sum(f.lines for s in scans for f in s.files),
                "files": sum(len(s.files) for s in scans),
                "first": f"{found.error_type} at {Path(found.source_uri).name}:{found.line}" if found else None,
                "causal": bool(first and first.causal),
                "errors": sum(len(f.errors) for s in scans for f in s.files),
                "events": sum(len(f.events) for s in scans for f in s.files),
                "metric_rows": sum(len(f.metric_rows) for s in scans for f in s.files),
            }
        )
    )


def cut_child(storage: LocalStorage, attempts: list[Any], rss_before: int) -> None:
    """Each file as scan-log-part scans it: over MAX_PART_BYTES, cut into segments run one after another, each
    segment's scan serialised as its part file and dropped (one invocation each in production; here in turn)."""
    from rlcleanup.parsing.segments import scan_log_segment
    from rlcleanup.steps.logscan import MAX_PART_BYTES, _segment, scans_json

    counts = {"lines": 0, "files": 0, "errors": 0, "events": 0, "metric_rows": 0, "segments": 0}
    cpu0, t0 = time.process_time(), time.perf_counter()
    for attempt in attempts:
        for uri in log_order(o.uri for o in attempt.log_objects):
            size = Path(uri).stat().st_size
            count = max(1, -(-size // MAX_PART_BYTES))
            seed = None
            for index in range(count):
                segment = _segment(index, count, size).model_copy(update={"seed": seed})
                result = scan_log_segment(storage, uri, attempt.attempt_id, segment)
                scans_json([result.scan])  # what the part stores (steps/logscan.scan_part)
                for key in ("errors", "events", "metric_rows"):
                    counts[key] += len(getattr(result.scan, key))
                seed, lines = result.next_seed, result.scan.lines
                del result
                counts["segments"] += 1
            counts["lines"] += lines
            counts["files"] += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    out = {"wall": wall, "cpu": cpu, "rss_before_kib": rss_before, "rss_peak_kib": peak_rss_kib(), **counts}
    print(json.dumps({**out, "first": None, "causal": False}))


def run_child(attempts: list[dict[str, object]], engine: str) -> dict[str, object]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(attempts, fh)
    try:
        argv = [sys.executable, __file__, "--child", fh.name, "--engine", engine]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(fh.name)
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def warm(path: Path) -> None:
    with path.open("rb") as fh:
        while fh.read(1 << 20):
            pass


def anchor_pattern() -> str:
    """The block scanner's own anchors (log_engine.hit_patterns) as one ERE, without their ANSI gaps: the event hints
    and the traceback header as written, the fatal hints caseless as bracket classes (as the scanner matches them),
    WANDB_MIRROR, `Step ` and a dict's opening `{'`. What grep does for the same question, minus the colour codes."""
    from rlcleanup.parsing.log_grammar import EVENT_HINTS, FATAL_HINTS, TRACEBACK_HEADER

    def ere(literal: str, caseless: bool = False) -> str:
        out = []
        for ch in literal:
            if caseless and ch.isascii() and ch.isalpha():
                out.append(f"[{ch.lower()}{ch.upper()}]")
            else:
                out.append("\\" + ch if ch in ".^$*+?()[]{}|\\" else ch)
        return "".join(out)

    plain = [*EVENT_HINTS, TRACEBACK_HEADER, "WANDB_MIRROR", "Step "]
    return "|".join([*(ere(h) for h in plain), *(ere(h, caseless=True) for h in FATAL_HINTS), "\\{['\"]"])


def grep(files: list[str], pattern: str = GREP_PATTERN) -> tuple[float, float, int]:
    """(wall s, CPU s, matching lines) of `grep -n -E` over files, in argv batches."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, matches = time.perf_counter(), 0
    for i in range(0, len(files), 2000):
        out = subprocess.run(
            ["grep", "-n", "-E", pattern, *files[i : i + 2000]],
            capture_output=True,
            env={"LC_ALL": "C"},
            check=False,
        )
        matches += out.stdout.count(b"\n")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), matches


def report(name: str, res: dict[str, object], mb: float) -> None:
    cpu, wall = float(res["cpu"]), float(res["wall"])  # type: ignore[arg-type]
    print(f"  {name}: {wall:.2f} s wall, {cpu:.2f} s CPU -> {mb / cpu:.1f} MB/s per core")
    print(f"           {res['lines']:,} lines; first error found: {res['first']} (causal={res['causal']})")
    peak, before = int(res["rss_peak_kib"]) * 1024, int(res["rss_before_kib"]) * 1024  # type: ignore[call-overload]
    print(f"           peak RSS {fmt_bytes(peak)} (+{fmt_bytes(peak - before)} over the process after its imports)")


def bench(attempts: list[dict[str, object]], line: bool) -> None:
    files = [str(u) for a in attempts for u in a["log_uris"]]  # type: ignore[attr-defined]
    total = sum(Path(f).stat().st_size for f in files)
    print(f"logs scanned: {len(files):,} files, {fmt_bytes(total)}")
    for f in files:  # warm the page cache for every contender alike
        warm(Path(f))
    mb = total / 1e6
    block = run_child(attempts, "block")
    report("block scanner", block, mb)
    g_wall, g_cpu, matches = grep(files)
    print(
        f"  grep -n -E: {g_wall:.2f} s wall, {g_cpu:.2f} s CPU -> {mb / max(g_cpu, 1e-9):.1f} MB/s; {matches:,} lines"
    )
    ratio = float(block["cpu"]) / max(g_cpu, 1e-9)  # type: ignore[arg-type]
    print(f"  ratio: the block scanner takes {ratio:.1f}x grep's CPU time")
    label = f"{len(files):,} files, {fmt_bytes(total)}"
    figure(f"log scan MB/s per core ({label})", f"{mb / float(block['cpu']):.1f}", ">= 150")  # type: ignore[arg-type]
    figure(f"log scan CPU / grep CPU ({label})", f"{ratio:.1f}x", "<= 10x")
    figure(f"log scan peak RSS ({label})", fmt_bytes(int(block["rss_peak_kib"]) * 1024), "<= 64 MiB")  # type: ignore[call-overload]
    if line:
        old = run_child(attempts, "line")
        report("line scanner", old, mb)
        same = all(old[k] == block[k] for k in ("first", "causal", "lines", "errors", "events", "metric_rows"))
        print(
            f"  block vs line scanner: {float(old['cpu']) / float(block['cpu']):.1f}x less CPU; "  # type: ignore[arg-type]
            f"same verdict, lines, errors, events and metric rows: {same}"
        )


def one_file(run: Path, mib: int) -> None:
    """One log of `mib` MiB (the run's largest worker log repeated): RSS whatever the file size."""
    attempts = attempts_of(run)
    logs = sorted((Path(str(u)) for a in attempts for u in a["log_uris"]), key=lambda p: p.stat().st_size)  # type: ignore[attr-defined]
    unit = logs[-1].read_bytes()
    with tempfile.TemporaryDirectory(prefix="bench-logs-one-") as tmp:
        big = Path(tmp) / "worker-big.err"
        with big.open("wb") as fh:
            written = 0
            while written < mib * 1024 * 1024:
                fh.write(unit)
                written += len(unit)
        print(f"\none file: {fmt_bytes(written)} ({logs[-1].name} x {written // len(unit)})")
        warm(big)
        res = run_child([{"attempt_id": "one", "log_uris": [str(big)]}], "block")
        report("block scanner, the file in one scan", res, written / 1e6)
        cut = run_child([{"attempt_id": "one", "log_uris": [str(big)]}], "cut")
        report(f"block scanner, cut as scan-log-part cuts it ({cut['segments']} segments)", cut, written / 1e6)
        res = cut
        _, g_cpu, g_lines = grep([str(big)])
        ratio = float(res["cpu"]) / max(g_cpu, 1e-9)  # type: ignore[arg-type]
        print(
            f"  grep -n -E over the same file: {g_cpu:.2f} s CPU, {g_lines:,} lines matched (its pattern: GREP_PATTERN)"
        )
        print(f"    the cut scan takes {ratio:.1f}x grep's CPU")
        # The goal's baseline searches five case-sensitive words that this log never holds (0 lines): grep's fastest
        # path. The same file with the scanner's own anchors (no ANSI tolerance) is what grep needs for our question.
        _, a_cpu, a_lines = grep([str(big)], anchor_pattern())
        anchored = float(res["cpu"]) / max(a_cpu, 1e-9)  # type: ignore[arg-type]
        print(
            f"  grep -n -E with the scanner's anchors: {a_cpu:.2f} s CPU, {a_lines:,} lines; the cut scan {anchored:.1f}x"
        )
        label = f"one file of {fmt_bytes(written)}, cut as the pipeline cuts it"
        figure(f"log scan MB/s per core ({label})", f"{written / 1e6 / float(res['cpu']):.1f}", ">= 150")  # type: ignore[arg-type]
        figure(f"log scan CPU / grep CPU ({label})", f"{ratio:.1f}x", "<= 3x")
        figure(f"log scan CPU / grep CPU with the scanner's anchors ({label})", f"{anchored:.1f}x", "")
        figure(f"log scan peak RSS ({label})", fmt_bytes(int(res["rss_peak_kib"]) * 1024), "<= 64 MiB")  # type: ignore[call-overload]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", action="store_true", help="500 ranks x 3 attempts, 1 GiB of logs")
    ap.add_argument("--run", type=Path, help="an existing run root (skips generation)")
    ap.add_argument("--line", action=argparse.BooleanOptionalAction, default=None, help="also the line scanner")
    ap.add_argument("--one-file", type=int, default=0, metavar="MIB", help="also one log file of MIB MiB")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="block", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(Path(args.child).read_text(), args.engine)
        return
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    line = args.line if args.line is not None else not args.full  # the line scanner takes ~2.5 min on --full
    if args.run:
        bench(attempts_of(args.run), line)
        if args.one_file:
            one_file(args.run, args.one_file)
        return
    with tempfile.TemporaryDirectory(prefix="bench-logs-") as tmp:
        run, spec, secs = build_run(Path(tmp), args.full, exports=2)
        print(f"generated {spec.ranks} ranks x {spec.attempts} attempts in {secs:.1f} s")
        bench(attempts_of(run), line)
        if args.one_file:
            one_file(run, args.one_file)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
