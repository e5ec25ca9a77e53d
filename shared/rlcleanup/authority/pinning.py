"""Pinned copies: copy exactly the object version a grant authorizes, and prove what arrived.

A grant's digest covers every exported object's fingerprint (GCS generation; local device/inode/size/mtime_ns/
ctime_ns; S3 ETag/Last-Modified/version), taken by the header-only validation without reading a shard. Here the
pin is enforced while the bytes move:

- backends with `object_version` (GCS, through ports.storage.VersionedStorage), same backend: a server-side copy
  with `if_source_generation_match`, then the destination's size/CRC32C/MD5 must equal the pinned source's, and
  its generation is recorded;
- backends with `etag_pinned_copy` (S3, through ports.storage.EtagPinnedStorage), both ends behind one server:
  the fingerprint is checked, then a server-side copy conditioned on the pinned ETag (CopySourceIfMatch; above
  the multipart threshold every UploadPartCopy carries x-amz-copy-source-if-match), so bytes changed since the
  pin fail the copy at the server and nothing is left at the destination; the destination's size (and MD5, for
  a single-part ETag) must match the pinned source's, and its fingerprint (server-set ETag and Last-Modified) is
  recorded (P36). A shard of any size is copied without a byte through this process;
- everything else (local disk, across backends or endpoints): the bytes are streamed once, SHA-256 (and
  CRC32C/MD5) computed over every byte while copying, and the source's fingerprint is checked before and after
  (a local file through one open descriptor, fstat'ed at both ends): any change refuses the copy.

The proof (sizes, checksums, SHA-256 where streamed, destination version) is what reclaim later re-verifies a
twin against: by generation (GCS), by fingerprint (an ETag-pinned S3 copy: any overwrite moves the server's
Last-Modified), else by re-hashing the bytes.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

import google_crc32c
from pydantic import BaseModel, ConfigDict

from rlcleanup.ports.storage import (
    ObjectInfo,
    SourceChangedError,
    Storage,
    WriteOutcome,
    etag_pins_of,
    stat_fingerprint,
    versions_of,
)

_CHUNK = 8 * 1024 * 1024


class CopyProof(BaseModel):
    """What one pinned copy put at its destination (stored with the publish, checked again by reclaim)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    source_fingerprint: str
    source_generation: int | None = None
    destination: str
    size: int
    crc32c: str | None = None
    md5: str | None = None
    sha256: str | None = None  # of every byte copied (streamed copies); None for server-side pinned copies
    source_etag: str | None = None  # the ETag a server-side S3 copy was conditioned on (CopySourceIfMatch)
    destination_generation: int | None = None
    destination_fingerprint: str | None = None
    outcome: str  # created | identical


@runtime_checkable
class _Files(Protocol):
    def local_file(self, uri: str) -> Path | None: ...

    def upload_file_if_absent(self, path: Path, dst_uri: str) -> WriteOutcome: ...


class _Hashes:
    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.crc = google_crc32c.Checksum()
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self.sha.update(chunk)
        self.crc.update(chunk)
        self.md5.update(chunk)
        self.size += len(chunk)

    @property
    def crc32c(self) -> str:
        return base64.b64encode(self.crc.digest()).decode()

    @property
    def md5_b64(self) -> str:
        return base64.b64encode(self.md5.digest()).decode()


def require_pin(src: ObjectInfo) -> str:
    if not src.fingerprint:
        raise SourceChangedError(f"{src.uri}: its backend reports no version, so the validated bytes cannot be pinned")
    return src.fingerprint


def still_pinned(storage: Storage, src: ObjectInfo) -> None:
    """Raise SourceChangedError unless the object at src.uri is still the pinned version."""
    pin = require_pin(src)
    now = storage.stat(src.uri)
    if now is None:
        raise SourceChangedError(f"{src.uri}: gone since it was validated")
    if now.fingerprint != pin or now.size != src.size:
        raise SourceChangedError(f"{src.uri}: changed since it was validated ({pin} -> {now.fingerprint})")


def _stream_local(path: Path, src: ObjectInfo, out: Path) -> _Hashes:
    """One descriptor from first byte to last: the name cannot be swapped under us mid-copy, and fstat at both
    ends sees any write (size/mtime_ns/ctime_ns) that happened meanwhile."""
    pin = require_pin(src)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    hashes = _Hashes()
    try:
        if stat_fingerprint(os.fstat(fd)) != pin:
            raise SourceChangedError(f"{src.uri}: changed since it was validated")
        with open(fd, "rb", closefd=False) as fh, out.open("wb") as dst:
            while chunk := fh.read(_CHUNK):
                hashes.update(chunk)
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
        if stat_fingerprint(os.fstat(fd)) != pin:
            raise SourceChangedError(f"{src.uri}: written to while it was being copied")
    finally:
        os.close(fd)
    if stat_fingerprint(os.lstat(path)) != pin:  # the name now points elsewhere (renamed over)
        raise SourceChangedError(f"{src.uri}: replaced while it was being copied")
    return hashes


def _ranges(storage: Storage, info: ObjectInfo) -> Iterator[bytes]:
    """The object's bytes in bounded ranged reads, up to its listed size (a short read ends it early)."""
    offset = 0
    while offset < info.size:
        chunk = storage.read_range(info.uri, offset, min(_CHUNK, info.size - offset))
        if not chunk:
            return
        yield chunk
        offset += len(chunk)


def _stream_remote(storage: Storage, src: ObjectInfo, out: Path) -> _Hashes:
    still_pinned(storage, src)
    hashes = _Hashes()
    with out.open("wb") as dst:
        for chunk in _ranges(storage, src):
            hashes.update(chunk)
            dst.write(chunk)
    try:  # an overwrite mid-stream moves the fingerprint (S3 Last-Modified, GCS generation, a local ctime)
        still_pinned(storage, src)
    except SourceChangedError as exc:
        raise SourceChangedError(f"{src.uri}: changed while it was being copied ({exc})") from exc
    if hashes.size != src.size:
        raise SourceChangedError(f"{src.uri}: streamed {hashes.size} bytes, validated {src.size}")
    return hashes


def pinned_copy(storage: Storage, src: ObjectInfo, dst_uri: str, *, grant_id: str | None = None) -> CopyProof:
    """Copy exactly the pinned version of `src` to `dst_uri` (write-once) and verify what arrived. `grant_id`: the
    grant the copy is made for (an interrupted S3 multipart copy resumes only for the same grant).

    Raises SourceChangedError when the source is not the pinned version; returns a proof whose `outcome` is
    `conflict` when the destination holds other bytes (never overwritten)."""
    pin = require_pin(src)
    versions = versions_of(storage, src.uri)
    # Server-side only within one versioned backend: the destination's port is the source's (through the port,
    # never by reading the router's registry or the URIs' schemes).
    if versions is not None and src.generation is not None and versions_of(storage, dst_uri) is versions:
        outcome = versions.copy_version_if_absent(src.uri, dst_uri, src.generation)
        if outcome is WriteOutcome.conflict:
            return CopyProof(
                source=src.uri, source_fingerprint=pin, destination=dst_uri, size=src.size, outcome="conflict"
            )
        got = storage.stat(dst_uri)
        return _verified(src, pin, dst_uri, got, outcome, crc32c=src.crc32c, md5=src.md5, sha256=None)
    etag_pins = etag_pins_of(storage, src.uri, dst_uri) if src.etag else None
    if etag_pins is not None:
        still_pinned(storage, src)  # the grant's whole pin (ETag, Last-Modified, version); the server holds the ETag
        outcome = etag_pins.copy_etag_if_absent(src, dst_uri, grant_id=grant_id)
        if outcome is WriteOutcome.conflict:
            return CopyProof(
                source=src.uri, source_fingerprint=pin, destination=dst_uri, size=src.size, outcome="conflict"
            )
        got = storage.stat(dst_uri)
        proof = _verified(src, pin, dst_uri, got, outcome, crc32c=None, md5=src.md5, sha256=None)
        return proof.model_copy(update={"source_etag": src.etag})
    if not isinstance(storage, _Files):
        raise TypeError(f"{type(storage).__name__} cannot stream a pinned copy")
    with tempfile.TemporaryDirectory(prefix="rlcleanup-pinned-") as tmp_dir:
        tmp = Path(tmp_dir) / "object"
        path = storage.local_file(src.uri)
        hashes = _stream_local(path, src, tmp) if path is not None else _stream_remote(storage, src, tmp)
        if src.crc32c and src.crc32c != hashes.crc32c:  # the listing's checksum (GCS/small local) must agree too
            raise SourceChangedError(f"{src.uri}: the copied bytes do not match the validated CRC32C")
        outcome = storage.upload_file_if_absent(tmp, dst_uri)
    if outcome is WriteOutcome.conflict:
        return CopyProof(source=src.uri, source_fingerprint=pin, destination=dst_uri, size=src.size, outcome="conflict")
    got = storage.stat(dst_uri)
    proof = _verified(
        src, pin, dst_uri, got, outcome, crc32c=hashes.crc32c, md5=hashes.md5_b64, sha256=hashes.sha.hexdigest()
    )
    unlisted = got is not None and not got.crc32c and not got.md5  # a large local file: no listed checksum
    if unlisted and got is not None and sha256_of(storage, got) != proof.sha256:
        return proof.model_copy(update={"outcome": "conflict"})
    return proof


def pinned_download(storage: Storage, src: ObjectInfo, out: Path) -> tuple[int, str]:
    """The pinned version of `src` streamed into the local file `out` (an upload that is no storage copy: the Hub);
    returns its size and the SHA-256 of every byte. Raises SourceChangedError as `pinned_copy` does."""
    if not isinstance(storage, _Files):
        raise TypeError(f"{type(storage).__name__} cannot stream a pinned copy")
    path = storage.local_file(src.uri)
    hashes = _stream_local(path, src, out) if path is not None else _stream_remote(storage, src, out)
    if src.crc32c and src.crc32c != hashes.crc32c:
        raise SourceChangedError(f"{src.uri}: the streamed bytes do not match the listed CRC32C")
    return hashes.size, hashes.sha.hexdigest()


def _verified(
    src: ObjectInfo,
    pin: str,
    dst_uri: str,
    got: ObjectInfo | None,
    outcome: WriteOutcome,
    *,
    crc32c: str | None,
    md5: str | None,
    sha256: str | None,
) -> CopyProof:
    base = CopyProof(
        source=src.uri,
        source_fingerprint=pin,
        source_generation=src.generation,
        destination=dst_uri,
        size=src.size,
        crc32c=crc32c,
        md5=md5,
        sha256=sha256,
        destination_generation=got.generation if got else None,
        destination_fingerprint=got.fingerprint if got else None,
        outcome=outcome.value,
    )
    if got is None or got.size != src.size:
        return base.model_copy(update={"outcome": "conflict"})
    if crc32c and got.crc32c and got.crc32c != crc32c:
        return base.model_copy(update={"outcome": "conflict"})
    if md5 and got.md5 and got.md5 != md5:
        return base.model_copy(update={"outcome": "conflict"})
    return base


def sha256_of(storage: Storage, info: ObjectInfo) -> str:
    """SHA-256 of the object's bytes as they are now (reclaim re-verifies a streamed copy's twin with it)."""
    sha = hashlib.sha256()
    path = storage.local_file(info.uri) if isinstance(storage, _Files) else None
    if path is not None:
        with path.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                sha.update(chunk)
        return sha.hexdigest()
    for chunk in _ranges(storage, info):
        sha.update(chunk)
    return sha.hexdigest()


def twin_mismatch(storage: Storage, proof: CopyProof) -> str | None:
    """None when the destination still holds exactly what the proof says was copied there (checked now)."""
    got = storage.stat(proof.destination)
    if got is None:
        return f"{proof.destination}: missing"
    if got.size != proof.size:
        return f"{proof.destination}: size {got.size} != {proof.size}"
    if proof.destination_generation is not None and got.generation != proof.destination_generation:
        return f"{proof.destination}: generation {got.generation} != {proof.destination_generation}"
    if proof.crc32c and got.crc32c and got.crc32c != proof.crc32c:
        return f"{proof.destination}: crc32c differs"
    if proof.md5 and got.md5 and got.md5 != proof.md5:
        return f"{proof.destination}: md5 differs"
    if proof.destination_generation is None and proof.sha256 is None and proof.source_etag is not None:
        # An ETag-pinned server-side copy (S3, P36): no byte was hashed; the destination must still be the object
        # the copy made (any overwrite moves the server-set Last-Modified, any other bytes the ETag).
        if proof.destination_fingerprint is None or got.fingerprint != proof.destination_fingerprint:
            return f"{proof.destination}: version {got.fingerprint} != {proof.destination_fingerprint} at publish"
        return None
    # No server-enforced version: the bytes themselves (a local dir anyone with access could edit).
    unversioned = proof.destination_generation is None
    if unversioned and (proof.sha256 is None or sha256_of(storage, got) != proof.sha256):
        return f"{proof.destination}: its bytes differ from the SHA-256 recorded at publish"
    return None
