"""The fan-out members' payloads: one capture part, one log-scan part. They travel in step messages
(models.events), so they live with the other message types, below the steps that plan and run them."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CaptureItem(BaseModel):
    source: str
    dest_rel: str
    size: int
    crc32c: str | None = None
    md5: str | None = None
    kind: str


class CapturePart(BaseModel):
    part_id: str
    items: list[CaptureItem]


class LogScanPart(BaseModel):
    part_id: str = Field(pattern=r"^a\d{3,}-p\d{4,}$")  # attempt index, part index (zero-padded: chain order)
    attempt_id: str
    uris: list[str]
    bytes: int = 0
