"""Preserved evidence is verified when it leaves the preserved location.

The sealed manifest (steps/manifest.py) holds every preserved object's size, CRC32C and MD5, taken when the
evidence was sealed. Anything the pipeline copies or reads back out of the preserved location — the logs and
derived files a publish or a Hub hand-off ships, the metrics and checkpoint listing a report is built from — must
still match those hashes; an object that does not (rewritten, truncated, swapped after capture) is refused as
tampered evidence (`evidence_tampered`), never shipped or shown as if it were the evidence.

Two checks, one rule (`mismatch`): what a listing or a pinned copy reports (`ObjectInfo`, a copy's proof), and bytes
read back and hashed here (`verified_bytes`). Every hash the manifest holds must be matched by the same hash of
the object now; an object whose current hashes are unknown cannot be verified and is refused the same way.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable

import google_crc32c

from rlcleanup.errors import PermanentError
from rlcleanup.models.record import CompletionRecord, PreservedObject
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.uris import basename, parent

EVIDENCE_TAMPERED = "evidence_tampered"
_MANIFEST_MAX_BYTES = 256 * 1024 * 1024
SEALED_NAME = re.compile(r"manifest(-[0-9a-f]{12})?\.json")  # steps/manifest.py's sealed generations


class TamperedEvidence(PermanentError):
    """A preserved object no longer matches the manifest's hashes: refused, and named as tampered evidence."""

    def __init__(self, message: str) -> None:
        super().__init__(EVIDENCE_TAMPERED, message)


def manifest_objects(storage: Storage, record: CompletionRecord) -> dict[str, PreservedObject] | None:
    """The sealed manifest's objects by their preserved URI; None while the evidence is not sealed (the record
    names no manifest, or only the capture manifest, which lists what capture copied but not what was derived)."""
    if not record.manifest_uri or not record.preserved_locations:
        return None
    root = record.preserved_locations[0].rstrip("/")
    if parent(record.manifest_uri) != root or not SEALED_NAME.fullmatch(basename(record.manifest_uri)):
        return None
    if storage.stat(record.manifest_uri) is None:
        return None  # named but not written yet: the report is written just before the manifest that lists it
    doc = json.loads(storage.read_bytes(record.manifest_uri, _MANIFEST_MAX_BYTES))
    objects = [PreservedObject.model_validate(o) for o in doc.get("objects", [])]
    return {o.destination: o for o in objects}


def mismatch(
    expected: PreservedObject, size: int, crc32c: str | None, md5: str | None, *, require_hashes: bool = True
) -> str | None:
    """Why an object with these hashes is not the preserved one; None when it is. `require_hashes=False` is a
    first look at a listing that may not carry checksums (a large local file): only what it reports is compared,
    and the bytes are verified when they are copied."""
    if size != expected.size:
        return f"size {size}, the manifest says {expected.size}"
    pairs = [("crc32c", crc32c, expected.crc32c), ("md5", md5, expected.md5)]
    held = [(name, now, then) for name, now, then in pairs if then is not None]
    if not held:
        return None  # the manifest holds only the size (an object sealed without checksums): that is what it pins
    if all(now is None for _, now, _ in held) and require_hashes:
        return "its current checksums are unknown, so it cannot be verified against the manifest"
    for name, now, then in held:
        if now is not None and now != then:
            return f"{name} {now}, the manifest says {then}"
    return None


def changed_in_listing(pairs: Iterable[tuple[PreservedObject | None, ObjectInfo | None]]) -> str | None:
    """A first look before anything is copied: the preserved objects whose listing (size, and whatever checksums
    it carries) no longer matches the manifest, described; None when none. The copied bytes are checked again."""
    bad = []
    for sealed, info in pairs:
        if sealed is not None and info is not None:
            why = mismatch(sealed, info.size, info.crc32c, info.md5, require_hashes=False)
            if why is not None:
                bad.append(f"{sealed.destination}: {why}")
    return f"preserved evidence changed since it was sealed: {'; '.join(bad[:5])}" if bad else None


def _hashes(data: bytes) -> tuple[str, str]:
    crc = google_crc32c.Checksum()
    crc.update(data)
    md5 = hashlib.md5(data, usedforsecurity=False)
    return base64.b64encode(crc.digest()).decode(), base64.b64encode(md5.digest()).decode()


def verified_bytes(
    storage: Storage,
    uri: str,
    manifest: dict[str, PreservedObject] | None,
    *,
    max_bytes: int | None = None,
    require_listed: bool = True,
) -> bytes:
    """A preserved object's bytes, hashed and checked against the manifest. Without a manifest (the pipeline is
    still writing the evidence: nothing is sealed yet) the bytes are returned as read; with one, an object it does
    not list is refused like a changed one (written after sealing) unless `require_listed=False` (a report of a
    later pass reads what that pass derived before it seals again)."""
    data = storage.read_bytes(uri, max_bytes) if max_bytes is not None else storage.read_bytes(uri)
    if manifest is None:
        return data
    expected = manifest.get(uri)
    if expected is None and not require_listed:
        return data
    if expected is None:
        raise TamperedEvidence(f"{uri}: not in the sealed manifest (written after the evidence was sealed)")
    crc32c, md5 = _hashes(data)
    why = mismatch(expected, len(data), crc32c, md5)
    if why is not None:
        raise TamperedEvidence(f"{uri}: changed since it was preserved ({why})")
    return data
