"""Step 2's log scan, split so no invocation's time or memory grows with the run: plan → scan parts → assemble.

A part is a run of one attempt's log files (in `log_order`) up to a byte and file budget; each part streams its
files and stores their scans as JSON beside the evidence (`_parts/log-scan/<part>.json`, write-once and
deterministic, so a redelivered part rewrites nothing). The fan-in reads the parts back in plan order and
assembles each attempt, carrying the after-error noise rule across files (`carry_error_seen`).
A single log file larger than the budget is its own part: a file is never cut, because a traceback may span
the cut.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from rlcleanup.models.parts import LogScanPart
from rlcleanup.parsing.logs import AttemptScan, LogScan, assemble_attempt, log_order, scan_log
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import join

MAX_PART_BYTES = 256 * 1024 * 1024  # ~30-40 s of scanning on one core (bench/bench_logs.py: 7-11 MB/s)
MAX_PART_FILES = 200
_SCANS = TypeAdapter(list[LogScan])


def plan_log_scan(
    layout: RunLayout, max_bytes: int = MAX_PART_BYTES, max_files: int = MAX_PART_FILES
) -> list[LogScanPart]:
    """Every attempt's logs in scan order, cut into parts at file boundaries by bytes and file count."""
    parts: list[LogScanPart] = []
    for index, attempt in enumerate(layout.attempts):
        sizes = {o.uri: o.size for o in attempt.log_objects}
        mine: list[LogScanPart] = []
        for uri in log_order(attempt.log_uris):
            size = sizes.get(uri, 0)
            last = mine[-1] if mine else None
            if last is None or (last.uris and (last.bytes + size > max_bytes or len(last.uris) >= max_files)):
                last = LogScanPart(part_id=f"a{index:03d}-p{len(mine):04d}", attempt_id=attempt.attempt_id, uris=[])
                mine.append(last)
            last.uris.append(uri)
            last.bytes += size
        # An attempt without logs still gets its (empty) part, so the chain keeps every attempt in order.
        parts.extend(mine or [LogScanPart(part_id=f"a{index:03d}-p0000", attempt_id=attempt.attempt_id, uris=[])])
    return parts


def part_uri(dest_root: str, part_id: str) -> str:
    return join(dest_root, "_parts", "log-scan", f"{part_id}.json")


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value)  # a metric value of an odd literal type (set, bytes, complex) is kept as its repr


def scan_part(storage: Storage, dest_root: str, part: LogScanPart) -> tuple[str, list[str]]:
    """Scan the part's files and store their scans write-once. Returns (uri, problems)."""
    scans = [scan_log(storage, uri, part.attempt_id) for uri in part.uris]
    # NaN/inf metric values survive as JSON's NaN/Infinity tokens (json.loads reads them back).
    data = json.dumps([asdict(s) for s in scans], default=_jsonable, sort_keys=True).encode()
    uri = part_uri(dest_root, part.part_id)
    storage.write_if_absent(uri, data)  # deterministic: a replay writes the same bytes (or keeps the first)
    return uri, [p for s in scans for p in s.problems]


def assemble(storage: Storage, dest_root: str, parts: list[tuple[str, str]]) -> list[AttemptScan]:
    """Attempt scans in chain order from the stored parts, given as (part_id, attempt_id) in plan order."""
    by_attempt: dict[str, tuple[str, list[LogScan]]] = {}  # keyed by the attempt index: ids need not be unique
    for part_id, attempt_id in parts:
        raw = storage.read_bytes(part_uri(dest_root, part_id), max_bytes=1024 * 1024 * 1024)
        _, files = by_attempt.setdefault(part_id.split("-")[0], (attempt_id, []))
        files.extend(_SCANS.validate_python(json.loads(raw)))
    return [assemble_attempt(attempt_id, files) for attempt_id, files in by_attempt.values()]
