"""Byte streams the S3 adapter reads and writes through: a digest kept while streaming, and a chunk iterator
wrapped as a file object (uploads read it in parts)."""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Iterator
from typing import Any

import google_crc32c


class StreamDigest:
    """Size, CRC32C and MD5 of a byte stream, updated chunk by chunk (verification while streaming)."""

    def __init__(self) -> None:

        self._crc = google_crc32c.Checksum()
        self._md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self._crc.update(chunk)
        self._md5.update(chunk)
        self.size += len(chunk)

    @property
    def crc32c(self) -> str:
        return base64.b64encode(self._crc.digest()).decode()

    @property
    def md5(self) -> str:
        return base64.b64encode(self._md5.digest()).decode()


class _ChunkReader(io.RawIOBase):
    """A readable, non-seekable binary file over an iterator of chunks. read(n) returns exactly n bytes until the
    end (resumable uploads treat a short read as the last chunk) and tell() works (they ask before starting)."""

    def __init__(self, chunks: Iterator[bytes], digest: StreamDigest | None = None) -> None:
        self._chunks = chunks
        self._buf = bytearray()
        self._pos = 0
        self.digest = digest

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self._pos + offset if whence == io.SEEK_CUR else -1
        if target != self._pos:
            raise io.UnsupportedOperation("a streamed object can only be read forward")
        return self._pos

    def _fill(self) -> bool:
        try:
            chunk = next(self._chunks)
        except StopIteration:
            return False
        if self.digest is not None:
            self.digest.update(chunk)
        self._buf += chunk
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            while self._fill():
                pass
            size = len(self._buf)
        while len(self._buf) < size and self._fill():
            pass
        out = bytes(self._buf[:size])
        del self._buf[:size]  # in place: no second copy of the buffer per read
        self._pos += len(out)
        return out

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)
