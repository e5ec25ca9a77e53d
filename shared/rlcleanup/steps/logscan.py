"""Step 2's log scan, split so no invocation's time or memory grows with the run: plan → scan parts → assemble.

The plan lists each attempt's logs (discovery names only the attempt's `logs/` prefix), a bounded number of
objects per invocation: a page that stops short is continued by the next (handlers: `terminal-plan-page:<n>`).
A part is a run of one attempt's log files (in listing order) up to a byte and file budget; each part streams its
files and stores their scans as JSON beside the evidence (`_parts/log-scan/<part>.json`, write-once and
deterministic, so a redelivered part rewrites nothing). The fan-in reads the parts back in plan order and
assembles each attempt in scan order (`log_rank`), carrying the after-error noise rule across files
(`carry_error_seen`).
A single log file larger than the budget is cut into segments of at most the budget (`parsing/segments.py`):
each is its own part, cut at line boundaries with an overlap that re-reads what is open at the cut (a
traceback), and the scan of the chain is the whole file's. Segments run one after another: the first is published
with the plan, each next one by the segment before it, with the scanner state it needs (`next_segment`).
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, TypeAdapter

from rlcleanup.models.parts import LogScanPart, LogSegment, SegmentSeed, log_part_id
from rlcleanup.parsing.attempt_logs import (
    AttemptScan,
    assemble_attempt,
    attempt_log_objects,
    is_scanned_log,
    log_rank,
    scan_log,
)
from rlcleanup.parsing.log_scanner import LogScan
from rlcleanup.parsing.segments import merge_segments, scan_log_segment
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import join

MAX_PART_BYTES = 256 * 1024 * 1024  # ~1-2 s of scanning on one core (bench/bench_logs.py: 150-280 MB/s)
MAX_PART_FILES = 200
_SCANS = TypeAdapter(list[LogScan])


class LogPlanCursor(BaseModel):
    """Where a paged log-scan plan resumes: the attempt (its index in the chain), the last log of it listed, and
    the number its next part takes (part ids stay in plan order across pages)."""

    attempt: int
    after: str | None = None
    next_part: int = 0


class LogPlanPage(BaseModel):
    """One page of a log-scan plan: its parts, how many objects it listed, and where the next page resumes."""

    parts: list[LogScanPart]
    listed: int = 0
    next: LogPlanCursor | None = None


def plan_log_scan(
    storage: Storage, layout: RunLayout, max_bytes: int = MAX_PART_BYTES, max_files: int = MAX_PART_FILES
) -> list[LogScanPart]:
    """The whole plan in one go (tests, benches); the pipeline pages it with plan_log_scan_page."""
    return plan_log_scan_page(storage, layout, None, None, max_bytes, max_files).parts


def plan_log_scan_page(
    storage: Storage,
    layout: RunLayout,
    cursor: LogPlanCursor | None,
    limit: int | None,
    max_bytes: int = MAX_PART_BYTES,
    max_files: int = MAX_PART_FILES,
) -> LogPlanPage:
    """Every attempt's logs, listed here in name order (discovery lists none), cut into parts at file boundaries
    by bytes and file count; at most `limit` objects are listed per page. Files are packed in listing order: the
    scan order (`log_rank`) is restored when the parts are assembled."""
    start = cursor or LogPlanCursor(attempt=0)
    parts: list[LogScanPart] = []
    listed = 0
    for index_a in range(start.attempt, len(layout.attempts)):
        attempt = layout.attempts[index_a]
        resumed = index_a == start.attempt
        after, number = (start.after, start.next_part) if resumed else (None, 0)
        last: LogScanPart | None = None  # the part still taking files
        for info in attempt_log_objects(storage, attempt, after):
            if limit is not None and listed >= limit:
                return LogPlanPage(
                    parts=parts, listed=listed, next=LogPlanCursor(attempt=index_a, after=after, next_part=number)
                )
            listed += 1
            after = info.uri
            if not is_scanned_log(info.uri):
                continue
            if info.size > max_bytes and not info.uri.endswith(".gz"):  # cut (an archive is read whole)
                count = -(-info.size // max_bytes)
                for index in range(count):
                    segment = _segment(index, count, info.size)
                    parts.append(_part(index_a, number, attempt.attempt_id, [info.uri], segment))
                    number += 1
                last = None  # a segment part holds its segment only
                continue
            if last is None or last.bytes + info.size > max_bytes or len(last.uris) >= max_files:
                last = _part(index_a, number, attempt.attempt_id, [])
                parts.append(last)
                number += 1
            last.uris.append(info.uri)
            last.bytes += info.size
        if number == 0:  # an attempt without logs still gets its (empty) part: the chain keeps every attempt
            parts.append(_part(index_a, 0, attempt.attempt_id, []))
    return LogPlanPage(parts=parts, listed=listed)


def _part(
    attempt_index: int, number: int, attempt_id: str, uris: list[str], segment: LogSegment | None = None
) -> LogScanPart:
    size = segment.stop - segment.start if segment is not None else 0
    return LogScanPart(
        part_id=log_part_id(attempt_index, number), attempt_id=attempt_id, uris=uris, bytes=size, segment=segment
    )


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
    segment = _segment(part.segment.index + 1, part.segment.count, part.segment.size)
    return part.model_copy(
        update={
            "part_id": part.next_part_id(),
            "bytes": segment.stop - segment.start,
            "segment": segment.model_copy(update={"seed": seed}),
        }
    )


def part_uri(dest_root: str, part_id: str) -> str:
    return join(dest_root, "_parts", "log-scan", f"{part_id}.json")


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):  # a scan, its rows, events and errors: their fields
        return {f.name: getattr(value, f.name) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value)  # a metric value of an odd literal type (set, bytes, complex) is kept as its repr


def scans_json(scans: list[LogScan]) -> bytes:
    """What a part stores: its scans as sorted JSON, deterministic (a replay writes the same bytes).

    The same bytes as `json.dumps([dataclasses.asdict(s) ...])`, without asdict's deep copy of every metric row
    (~15% of a 256 MiB segment's CPU): the encoder asks `_jsonable` for each dataclass's fields as it reaches it.
    NaN/inf metric values survive as JSON's NaN/Infinity tokens (json.loads reads them back)."""
    return json.dumps(scans, default=_jsonable, sort_keys=True).encode()


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
    data = scans_json(scans)
    uri = part_uri(dest_root, part.part_id)
    storage.write_if_absent(uri, data)  # deterministic: a replay writes the same bytes (or keeps the first)
    return uri, [p for s in scans for p in s.problems], after


def assemble(
    storage: Storage, dest_root: str, parts: list[tuple[str, str]], unread: dict[str, list[str]] | None = None
) -> list[AttemptScan]:
    """Attempt scans in chain order from the stored parts, given as (part_id, attempt_id) in plan order. A part
    named in `unread` (part id -> its files) failed and stored no scan: its files are the attempt's `unread`."""
    unread = unread or {}
    by_attempt: dict[str, tuple[str, list[LogScan], list[str]]] = {}  # by attempt index: ids need not be unique
    for part_id, attempt_id in parts:
        _, files, missed = by_attempt.setdefault(part_id.split("-")[0], (attempt_id, [], []))
        if part_id in unread:
            missed.extend(unread[part_id])
            continue
        raw = storage.read_bytes(part_uri(dest_root, part_id), max_bytes=1024 * 1024 * 1024)
        files.extend(_SCANS.validate_python(json.loads(raw)))
    # Parts hold files in listing order; scan order (`log_rank`) is restored here. The sort is stable, so a cut
    # file's segments stay consecutive and in chain order for _merge_cuts.
    scans = []
    for attempt_id, files, missed in by_attempt.values():
        scan = assemble_attempt(attempt_id, _merge_cuts(sorted(files, key=lambda scan: log_rank(scan.uri))))
        scan.unread = sorted(set(missed), key=log_rank)
        scans.append(scan)
    return scans


def _merge_cuts(files: list[LogScan]) -> list[LogScan]:
    """Consecutive scans of one file (its segments, in chain order) as the file's one scan."""
    merged: list[list[LogScan]] = []
    for scan in files:
        if merged and merged[-1][0].uri == scan.uri:
            merged[-1].append(scan)
        else:
            merged.append([scan])
    return [group[0] if len(group) == 1 else merge_segments(group) for group in merged]
