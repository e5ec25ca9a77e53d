"""Multi-pattern search engines on the block scanner's job: find every line of a training log that can matter.

The scanner's anchors (parsing.log_engine.hit_patterns: trainer-event hints, the traceback header, fatal-line hints
ASCII-caseless, WANDB_MIRROR, legacy dict starts; every one tolerant of ANSI codes between its characters) are
searched over the same buffer (the medium run's logs concatenated, page-cache warm, one thread) by:

- re2: google-re2, one alternation over Latin-1 bytes (what parsing.log_engine.Re2Finder runs; the chosen engine);
- re: Python's sre on the same alternation (no re.IGNORECASE: the hints are ASCII letter classes already);
- re-nocase: sre on the literal hints with re.IGNORECASE (the slow case the issue measured; every hint caseless,
  so it finds a looser superset of lines: `training` in any chatter line);
- hyperscan: the same patterns, one database, a callback per match (optional: skipped when not installed);
- find: bytes.find per literal hint, case variants of the caseless ones not included and no ANSI tolerance
  (a floor for a literal pre-filter, it finds a subset of the lines);
- aho-corasick: pyahocorasick over the lowercased buffer with the literal hints (optional; no ANSI tolerance,
  every hint caseless as in re-nocase).

Each engine's time includes compiling its patterns (~1 ms for RE2, tens of ms for hyperscan).

Each prints MB/s per core and the number of distinct lines it found (the exact engines must agree).
Run: .venv/bin/python bench/bench_log_engines.py [--full] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import build_run, figure, fmt_bytes
from bench_logs import attempts_of
from rlcleanup.parsing import log_grammar
from rlcleanup.parsing.log_engine import Re2Finder, hit_patterns

Engine = Callable[[bytes], set[int]]  # buffer -> offsets of the line starts it found a hit on


def _line_starts(buf: bytes, ends: list[int]) -> set[int]:
    return {buf.rfind(b"\n", 0, max(end - 1, 0)) + 1 for end in ends}


def engine_re2(buf: bytes) -> set[int]:
    finder = Re2Finder(hit_patterns())
    ends, pos, size = [], 0, len(buf)
    while (end := finder.next_hit(buf, pos, size)) is not None:
        ends.append(end)
        nl = buf.find(b"\n", end)
        pos = size if nl < 0 else nl + 1
    return _line_starts(buf, ends)


def _sre_search(pattern: re.Pattern[bytes], buf: bytes) -> set[int]:
    ends, pos, size = [], 0, len(buf)
    while (match := pattern.search(buf, pos)) is not None:
        ends.append(match.end())
        nl = buf.find(b"\n", match.end())
        pos = size if nl < 0 else nl + 1
    return _line_starts(buf, ends)


def engine_re(buf: bytes) -> set[int]:
    return _sre_search(re.compile(b"|".join(b"(?:" + p + b")" for p in hit_patterns())), buf)


def _literals() -> tuple[list[bytes], list[bytes]]:
    """(case-sensitive literals, caseless literals) of the anchors, without their ANSI tolerance."""
    exact = [h.encode() for h in (*log_grammar.EVENT_HINTS, log_grammar.TRACEBACK_HEADER, "WANDB_MIRROR")]
    return exact, [h.encode() for h in log_grammar.FATAL_HINTS]


def engine_re_nocase(buf: bytes) -> set[int]:
    exact, caseless = _literals()
    return _sre_search(re.compile(b"|".join(re.escape(x) for x in exact + caseless), re.IGNORECASE), buf)


def engine_find(buf: bytes) -> set[int]:
    exact, caseless = _literals()
    ends = []
    for literal in exact + caseless:
        pos = buf.find(literal)
        while pos >= 0:
            ends.append(pos + len(literal))
            pos = buf.find(literal, pos + 1)
    return _line_starts(buf, ends)


def engine_hyperscan(buf: bytes) -> set[int]:
    import hyperscan  # type: ignore[import-not-found,unused-ignore]

    patterns = hit_patterns()
    db = hyperscan.Database()
    db.compile(expressions=patterns, ids=list(range(len(patterns))), flags=[0] * len(patterns))
    ends: list[int] = []

    def on_match(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
        ends.append(end)

    db.scan(buf, match_event_handler=on_match)
    return _line_starts(buf, ends)


def engine_aho_corasick(buf: bytes) -> set[int]:
    import ahocorasick  # type: ignore[import-not-found,unused-ignore]

    exact, caseless = _literals()
    automaton = ahocorasick.Automaton()
    for literal in {x.lower() for x in exact} | set(caseless):
        text = literal.decode()
        automaton.add_word(text, text)
    automaton.make_automaton()
    text = buf.lower().decode("latin-1")  # pyahocorasick searches str; lowercasing is part of the cost
    return _line_starts(buf, [end + 1 for end, _ in automaton.iter(text)])


ENGINES: dict[str, Engine] = {
    "re2": engine_re2,
    "re": engine_re,
    "re-nocase": engine_re_nocase,
    "hyperscan": engine_hyperscan,
    "find": engine_find,
    "aho-corasick": engine_aho_corasick,
}
EXACT = {"re2", "re", "hyperscan"}  # the ANSI-tolerant anchor set itself: these must find the same lines


def measure(buf: bytes, repeat: int) -> None:
    mb = len(buf) / 1e6
    found: dict[str, set[int]] = {}
    for name, engine in ENGINES.items():
        best = float("inf")
        try:
            for _ in range(repeat):
                cpu0 = time.process_time()
                lines = engine(buf)
                best = min(best, time.process_time() - cpu0)
        except ImportError as exc:
            print(f"  {name:>12}: not installed ({exc.name})")
            continue
        found[name] = lines
        print(f"  {name:>12}: {best:6.3f} s CPU -> {mb / max(best, 1e-9):8.1f} MB/s per core; {len(lines):,} lines")
        if name in EXACT:
            figure(f"anchor search MB/s per core: {name}", f"{mb / max(best, 1e-9):.1f}", "re2 chosen")
    exact = {name: lines for name, lines in found.items() if name in EXACT}
    same = len({frozenset(lines) for lines in exact.values()}) == 1
    print(f"  exact engines ({', '.join(exact)}) find the same lines: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", action="store_true", help="the 500 x 3 run (1 GiB)")
    ap.add_argument("--repeat", type=int, default=3, help="best CPU time of N runs per engine")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        run, spec, _ = build_run(Path(tmp), args.full, exports=1)
        files = [Path(str(uri)) for a in attempts_of(run) for uri in a["log_uris"]]  # type: ignore[attr-defined]
        buf = b"".join(p.read_bytes() for p in files)  # exactly the files the scanner reads
    print(f"{spec.ranks} ranks x {spec.attempts} attempts: {fmt_bytes(len(buf))} of logs in one buffer")
    measure(buf, args.repeat)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
