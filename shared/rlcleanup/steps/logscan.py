"""Step 2's log scan, split so no invocation's time or memory grows with the run: plan → scan parts → assemble.

A part is a run of one attempt's log files (in `log_order`) up to a byte and file budget; each part streams its
files and stores their scans as JSON beside the evidence (`_parts/log-scan/<part>.json`, write-once and
deterministic, so a redelivered part rewrites nothing). The fan-in reads the parts back in plan order and
assembles each attempt, carrying the after-error noise rule across files (`carry_error_seen`).
A single log file larger than the budget is cut into segments of at most the budget (`parsing/segments.py`):
each is its own part, cut at line boundaries with an overlap that re-reads what is open at the cut (a
traceback), and the scan of the chain is the whole file's. Segments run one after another: the first is published
with the plan, each next one by the segment before it, with the scanner state it needs (`next_segment`).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from rlcleanup.models.parts import LogScanPart, LogSegment, SegmentSeed
from rlcleanup.parsing.logs import AttemptScan, LogScan, assemble_attempt, log_order, scan_log
from rlcleanup.parsing.segments import merge_segments, scan_log_segment
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import join

MAX_PART_BYTES = 256 * 1024 * 1024  # ~1-2 s of scanning on one core (bench/bench_logs.py: 150-280 MB/s)
MAX_PART_FILES = 200
_SCANS = TypeAdapter(list[LogScan])


def plan_log_scan(
    layout: RunLayout, max_bytes: int = MAX_PART_BYTES, max_files: int = MAX_PART_FILES
) -> list[LogScanPart]:
    """Every attempt's logs in scan order, cut into parts at file boundaries by bytes and file count."""
    parts: list[LogScanPart] = []
    for index_a, attempt in enumerate(layout.attempts):
        sizes = {o.uri: o.size for o in attempt.log_objects}
        mine: list[LogScanPart] = []
        for uri in log_order(attempt.log_uris):
            size = sizes.get(uri, 0)
            if size > max_bytes:  # cut: one part per segment, the chain's parts consecutive
                count = -(-size // max_bytes)
                for index in range(count):
                    segment = _segment(index, count, size)
                    mine.append(
                        LogScanPart(
                            part_id=f"a{index_a:03d}-p{len(mine):04d}",
                            attempt_id=attempt.attempt_id,
                            uris=[uri],
                            bytes=segment.stop - segment.start,
                            segment=segment,
                        )
                    )
                continue
            last = mine[-1] if mine else None
            if last is not None and last.segment is not None:
                last = None  # a segment part holds its segment only
            if last is None or (last.uris and (last.bytes + size > max_bytes or len(last.uris) >= max_files)):
                last = LogScanPart(part_id=f"a{index_a:03d}-p{len(mine):04d}", attempt_id=attempt.attempt_id, uris=[])
                mine.append(last)
            last.uris.append(uri)
            last.bytes += size
        # An attempt without logs still gets its (empty) part, so the chain keeps every attempt in order.
        parts.extend(mine or [LogScanPart(part_id=f"a{index_a:03d}-p0000", attempt_id=attempt.attempt_id, uris=[])])
    return parts


def _segment(index: int, count: int, size: int) -> LogSegment:
    return LogSegment(
        index=index, count=count, start=index * size // count, stop=(index + 1) * size // count, size=size
    )


def first_parts(parts: list[LogScanPart]) -> list[LogScanPart]:
    """The parts the plan publishes: all but the later segments of a cut file (each published by the one before)."""
    return [part for part in parts if part.segment is None or part.segment.index == 0]


def next_segment(part: LogScanPart, seed: SegmentSeed) -> LogScanPart:
    """The next segment's part, seeded with the scanner state the finished segment handed on."""
    assert part.segment is not None
    head, number = part.part_id.rsplit("-p", 1)
    segment = _segment(part.segment.index + 1, part.segment.count, part.segment.size)
    return part.model_copy(
        update={
            "part_id": f"{head}-p{int(number) + 1:04d}",
            "bytes": segment.stop - segment.start,
            "segment": segment.model_copy(update={"seed": seed}),
        }
    )


def part_uri(dest_root: str, part_id: str) -> str:
    return join(dest_root, "_parts", "log-scan", f"{part_id}.json")


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value)  # a metric value of an odd literal type (set, bytes, complex) is kept as its repr


def scan_part(storage: Storage, dest_root: str, part: LogScanPart) -> tuple[str, list[str], LogScanPart | None]:
    """Scan the part's files (or its segment) and store their scans write-once. Returns (uri, problems, the next
    segment's part to publish or None)."""
    after: LogScanPart | None = None
    if part.segment is not None:
        result = scan_log_segment(storage, part.uris[0], part.attempt_id, part.segment)
        scans = [result.scan]
        after = next_segment(part, result.next_seed) if result.next_seed is not None else None
    else:
        scans = [scan_log(storage, uri, part.attempt_id) for uri in part.uris]
    # NaN/inf metric values survive as JSON's NaN/Infinity tokens (json.loads reads them back).
    data = json.dumps([asdict(s) for s in scans], default=_jsonable, sort_keys=True).encode()
    uri = part_uri(dest_root, part.part_id)
    storage.write_if_absent(uri, data)  # deterministic: a replay writes the same bytes (or keeps the first)
    return uri, [p for s in scans for p in s.problems], after


def assemble(storage: Storage, dest_root: str, parts: list[tuple[str, str]]) -> list[AttemptScan]:
    """Attempt scans in chain order from the stored parts, given as (part_id, attempt_id) in plan order."""
    by_attempt: dict[str, tuple[str, list[LogScan]]] = {}  # keyed by the attempt index: ids need not be unique
    for part_id, attempt_id in parts:
        raw = storage.read_bytes(part_uri(dest_root, part_id), max_bytes=1024 * 1024 * 1024)
        _, files = by_attempt.setdefault(part_id.split("-")[0], (attempt_id, []))
        files.extend(_SCANS.validate_python(json.loads(raw)))
    return [assemble_attempt(attempt_id, _merge_cuts(files)) for attempt_id, files in by_attempt.values()]


def _merge_cuts(files: list[LogScan]) -> list[LogScan]:
    """Consecutive scans of one file (its segments, in chain order) as the file's one scan."""
    merged: list[list[LogScan]] = []
    for scan in files:
        if merged and merged[-1][0].uri == scan.uri:
            merged[-1].append(scan)
        else:
            merged.append([scan])
    return [group[0] if len(group) == 1 else merge_segments(group) for group in merged]
