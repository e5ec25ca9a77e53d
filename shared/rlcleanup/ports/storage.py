"""Object storage port. URIs are `gs://bucket/key` or local paths (optionally `file://`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int
    crc32c: str | None = None  # base64 big-endian, as GCS reports it
    md5: str | None = None  # base64, as GCS reports it
    updated: datetime | None = None
    generation: int | None = None


class WriteOutcome(StrEnum):
    created = "created"  # the object did not exist and now holds our bytes
    identical = "identical"  # it existed with the same content: a safe replay
    conflict = "conflict"  # it existed with different content: never overwritten


class StorageError(Exception):
    """A storage failure worth retrying (network, 5xx, emulator down)."""


class UnsafePathError(ValueError):
    """An object name that would escape its root (`..`, absolute, symlink out of the run)."""


class Storage(Protocol):
    def stat(self, uri: str) -> ObjectInfo | None: ...

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        """Every object under prefix_uri (recursive), in name order."""
        ...

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        """Bytes [start, start+length) — one ranged request; short at end of object."""
        ...

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        """A whole small object; raises ValueError when it is larger than max_bytes."""
        ...

    def iter_lines(self, uri: str) -> Iterator[str]:
        """Stream text lines (newline stripped, undecodable bytes replaced) in bounded memory."""
        ...

    def write_if_absent(
        self, uri: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> WriteOutcome: ...

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        """Server-side copy when both ends share a backend; never overwrites different content."""
        ...

    def delete(self, uri: str) -> bool: ...
