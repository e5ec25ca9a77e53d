"""A log file too large for one part, scanned as a chain of segments cut at line boundaries.

Segment k owns the lines that begin in [a_k, a_k+1), where a_k is the first line start at or past its nominal cut.
What its own lines produce (errors, events, metric rows, dropped blocks and errors) is its scan, in the order the
line scanner would have produced it, so the file's scan is the segments' scans concatenated (`merge_segments`).

The line scanner's state at a_k is not all scalar: an open traceback, a legacy metric block or a `terminate called`
waiting for its `what():` line hold lines. Those are re-created by reading an overlap of OVERLAP_BYTES before a_k
without keeping anything (`LogScanner.owning` off); the scalars (line count, stamps, whether an error was seen,
the per-file caps' counters) are handed on exactly: segment k takes them where segment k+1's overlap begins and
publishes segment k+1 with them (`SegmentSeed`). So the chain runs one segment after the other, each bounded by
the part budget plus the overlap. The scan equals the whole file's whenever a traceback or metric block open at a
cut began within OVERLAP_BYTES before it (a traceback keeps 64 KiB; tests/unit/test_logs_differential.py checks it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from rlcleanup.models.parts import LogSegment, SegmentSeed
from rlcleanup.parsing.log_engine import BlockScan, hit_finder
from rlcleanup.parsing.log_grammar import WHAT_LOOKAHEAD
from rlcleanup.parsing.log_scanner import LogScan, LogScanner
from rlcleanup.ports.storage import Storage, StorageError

OVERLAP_BYTES = 1024 * 1024  # 16x a traceback's kept head (TRACEBACK_MAX_BYTES)
_PROBE = 64 * 1024
_LINE_END = re.compile(rb"\r\n?|\n")

Read = Callable[[int, int], bytes]  # (absolute offset, length) -> bytes, short at end of file


def line_start(read: Read, at: int) -> int:
    """The first line start at or past byte `at` (universal newlines: \\n, \\r\\n and a lone \\r end a line), or the
    file's size when no line starts there."""
    if at <= 0:
        return 0
    pos = at - 1  # the byte before `at` may end a line
    while True:
        chunk = read(pos, _PROBE + 1)  # one byte more, so a \\r at the probe's end sees whether \\n follows
        if not chunk:
            return pos
        match = _LINE_END.search(chunk, 0, _PROBE)
        if match is not None:
            end = match.end()
            return pos + end + (chunk[end : end + 1] == b"\n" and match.group() == b"\r")
        if len(chunk) <= _PROBE:
            return pos + len(chunk)  # no line end before the end of the file
        pos += _PROBE


@dataclass
class SegmentResult:
    scan: LogScan  # what the segment's own lines produced; lines = the file's line count at the segment's end
    next_seed: SegmentSeed | None  # None for the last segment


def _bounded(read: Read, low: int, high: int | None) -> Read:
    """read relative to `low`, ending at `high` (None: the file's end)."""

    def inner(start: int, length: int) -> bytes:
        if high is not None:
            length = min(length, high - low - start)
        return read(low + start, length) if length > 0 else b""

    return inner


def scan_segment(
    read: Read, uri: str, attempt_id: str | None, segment: LogSegment, overlap: int = OVERLAP_BYTES
) -> SegmentResult:
    finder = hit_finder()
    scanner = LogScanner(uri, attempt_id)

    def region(low: int, high: int | None) -> None:
        if finder is None:  # google-re2 is a dependency; a cut log has no line-scanner path
            raise RuntimeError("scanning a cut log needs google-re2 (the block scanner)")
        if high is None or high > low:
            BlockScan(scanner, finder).run(_bounded(read, low, high))

    seed = segment.seed or SegmentSeed(warm=0, start=0, lines=0)
    scanner.resume(seed)
    scanner.owning = False  # the overlap: state only
    dropped_before = 0
    if segment.index + 1 >= segment.count:  # the last segment reads to the end of the file
        region(seed.warm, seed.start)
        scanner.own_from(seed)
        dropped_before = scanner.metric_blocks_dropped
        region(seed.start, None)
        scan = scanner.finish()
        scan.metric_blocks_dropped -= dropped_before
        return SegmentResult(scan, None)
    end = max(seed.start, line_start(read, segment.stop))
    # The next segment's overlap may reach back past this segment's start (a short segment, a long overlap): its
    # scalar state is exact anywhere after this segment's own overlap start, owned or not.
    warm = max(seed.warm, line_start(read, end - overlap))
    at_warm: SegmentSeed | None = None
    pos = seed.warm
    for point in sorted({seed.start, warm, end}):
        region(pos, point)
        pos = point
        if point == warm and at_warm is None:
            at_warm = scanner.seed(warm, end)
        if point == seed.start and not scanner.owning:
            scanner.own_from(seed)
            dropped_before = scanner.metric_blocks_dropped
    next_seed = scanner.seed(warm, end, at_warm)
    scan = scanner.scan
    scan.metric_blocks_dropped = scanner.metric_blocks_dropped - dropped_before
    if scanner.settling:  # a `what():` line past the end may still complete an error kept here
        lines, events, rows = scan.lines, len(scan.events), len(scan.metric_rows)
        scanner.owning = False
        stop = end
        for _ in range(WHAT_LOOKAHEAD):
            stop = line_start(read, stop + 1)
        region(end, stop)
        scan.lines = lines
        del scan.events[events:], scan.metric_rows[rows:]
    return SegmentResult(scan, next_seed)


def scan_log_segment(storage: Storage, uri: str, attempt_id: str | None, segment: LogSegment) -> SegmentResult:
    """One segment of a cut log through ranged reads; a read failure keeps what was scanned and names the cause."""
    try:
        return scan_segment(lambda start, length: storage.read_range(uri, start, length), uri, attempt_id, segment)
    except (StorageError, OSError, ValueError) as exc:
        scan = LogScan(uri=uri, attempt_id=attempt_id)
        scan.problems.append(f"log {uri} could not be read in bytes {segment.start}-{segment.stop}: {exc}")
        return SegmentResult(scan, None)


def merge_segments(scans: list[LogScan]) -> LogScan:
    """A cut file's scan from its segments' scans, in segment order."""
    first, last = scans[0], scans[-1]
    merged = LogScan(uri=first.uri, attempt_id=first.attempt_id, lines=last.lines)
    for scan in scans:
        merged.metric_rows.extend(scan.metric_rows)
        merged.events.extend(scan.events)
        merged.errors.extend(scan.errors)
        merged.errors_dropped += scan.errors_dropped
        merged.metric_blocks_dropped += scan.metric_blocks_dropped
        merged.problems.extend(scan.problems)
    merged.first_timestamp = next((s.first_timestamp for s in scans if s.first_timestamp), None)
    merged.last_timestamp = next((s.last_timestamp for s in reversed(scans) if s.last_timestamp), None)
    return merged
