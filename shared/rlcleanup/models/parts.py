"""The fan-out members' payloads: one capture part, one log-scan part. They travel in step messages
(models.events), so they live with the other message types, below the steps that plan and run them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class CaptureItem(BaseModel):
    source: str
    dest_rel: str
    size: int
    crc32c: str | None = None
    md5: str | None = None
    kind: str
    expires_at: datetime | None = None  # source under `tmp/ttl=<N>d/`: creation + N days (steps/expiry.py)


class CapturePart(BaseModel):
    part_id: str
    items: list[CaptureItem]


class SegmentSeed(BaseModel):
    """The line scanner's scalar state a cut log's next segment starts from, handed on by the segment before it:
    at `warm` (where its overlap begins) the line count, stamps and whether an error was seen; at `start` (where
    its own lines begin) the per-file caps' counters. The overlap itself re-creates what is not scalar (an open
    traceback or metric block, a `terminate called` waiting for its `what():`)."""

    warm: int  # byte offset of the first overlap line (a line start)
    start: int  # byte offset of the segment's first own line (a line start)
    lines: int  # lines before `warm`
    first_timestamp: datetime | None = None
    last_timestamp: datetime | None = None  # the last stamp before `warm`
    error_seen: bool = False
    noise_kept: int = 0  # before `start`
    errors_kept: int = 0  # before `start`


class LogSegment(BaseModel):
    """One cut of a log file larger than a part's budget: nominal byte range [start, stop) of `size` bytes; the
    segment owns the lines that begin at or after the first line start at or past `start`, up to the next cut."""

    index: int
    count: int
    start: int
    stop: int
    size: int
    seed: SegmentSeed | None = None  # None for the first segment; the previous one publishes the next with it


def log_part_id(attempt_index: int, number: int) -> str:
    """A log-scan part's id: attempt index, part index (zero-padded: ids sort in chain order)."""
    return f"a{attempt_index:03d}-p{number:04d}"


class LogScanPart(BaseModel):
    part_id: str = Field(pattern=r"^a\d{3,}-p\d{4,}$")  # log_part_id(attempt index, part index)
    attempt_id: str
    uris: list[str]
    bytes: int = 0
    segment: LogSegment | None = None  # set: uris is one file and this part scans one cut of it

    def _number(self) -> tuple[str, int]:
        head, number = self.part_id.rsplit("-p", 1)  # the pattern above guarantees both halves
        return head, int(number)

    def next_part_id(self) -> str:
        """The id of the part after this one in its attempt (a cut file's next segment takes it)."""
        head, number = self._number()
        return f"{head}-p{number + 1:04d}"

    def later_segment_ids(self) -> list[str]:
        """The ids of this cut file's segments after this one (none for a part that is not a segment)."""
        if self.segment is None:
            return []
        head, number = self._number()
        return [f"{head}-p{number + k:04d}" for k in range(1, self.segment.count - self.segment.index)]
