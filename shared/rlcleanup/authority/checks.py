"""Content comparison used by publish (verify after copy) and reclaim (re-verify before delete)."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import google_crc32c

from rlcleanup.ports.storage import ObjectInfo, Storage

_CHUNK = 8 * 1024 * 1024


def crc32c_of(storage: Storage, info: ObjectInfo) -> str:
    """The object's CRC32C (base64, as GCS reports it); streamed with ranged reads when the listing lacks it."""
    if info.crc32c:
        return info.crc32c
    crc = google_crc32c.Checksum()
    offset = 0
    while offset < info.size:
        chunk = storage.read_range(info.uri, offset, min(_CHUNK, info.size - offset))
        if not chunk:
            break
        crc.update(chunk)
        offset += len(chunk)
    return base64.b64encode(crc.digest()).decode()


@dataclass(frozen=True)
class Expected:
    """What an object must be: size and CRC32C (MD5 is compared too when both sides report one)."""

    size: int
    crc32c: str
    md5: str | None = None


def expected_of(storage: Storage, info: ObjectInfo) -> Expected:
    return Expected(size=info.size, crc32c=crc32c_of(storage, info), md5=info.md5)


def mismatch(storage: Storage, uri: str, want: Expected) -> str | None:
    """None when the object at uri has exactly the expected content; else why not (checked now, not trusted)."""
    got = storage.stat(uri)
    if got is None:
        return f"{uri}: missing"
    if got.size != want.size:
        return f"{uri}: size {got.size} != {want.size}"
    if crc32c_of(storage, got) != want.crc32c:
        return f"{uri}: crc32c differs"
    if want.md5 and got.md5 and want.md5 != got.md5:
        return f"{uri}: md5 differs"
    return None
