"""Quarantine before delete: what a reclaim removes is moved (server-side where the backend can) to a quarantine
prefix of the same bucket, recorded object by object, and can be restored byte-exact until the quarantine expires.

- Where: `<bucket>/<prefix>/<run_id>/<grant_id>/<key>`; the prefix and the expiry are the deployment's
  (`QuarantineSettings`: RLCLEANUP_QUARANTINE_PREFIX, RLCLEANUP_QUARANTINE_DAYS, Terraform `quarantine_days`),
  never a run's. For local files the run root's parent directory stands for the bucket.
- The move is `pinning.pinned_copy` (a generation-pinned rewrite on GCS; on S3 a server-side copy held to the
  pinned ETag, `CopySourceIfMatch`, §8 P36; elsewhere one stream hashed while it is copied, the source's fingerprint
  checked at both ends), then the source is deleted only while it is still the
  pinned version (GCS `if_generation_match`). A copy whose bytes are not the pinned version's is removed again and
  the source kept.
- The record of each move lives in the record store (`runs/{run}/quarantine/{doc}`), never in a bucket: a restore
  reads only those documents, checks each against this run's roots and the deployment's prefix, re-verifies the
  quarantined bytes against the recorded CRC32C/MD5/SHA-256 and never writes over an object that now holds other
  bytes.
- A bucket's own soft delete is a second net, not the first: `protection()` says which mechanism protects a store,
  as its backend declares it (`SchemeFacts.protection`, adapters/storage_registry.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from rlcleanup.authority.pinning import CopyProof, pinned_copy, sha256_of, still_pinned, twin_mismatch
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.collections import QUARANTINE, Documents
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import (
    ObjectInfo,
    SourceChangedError,
    Storage,
    UnsafePathError,
    anchored_to,
    scheme_facts,
    versions_of,
)
from rlcleanup.settings import QuarantineSettings
from rlcleanup.uris import is_local, strip_file_scheme


def collection(run_id: str) -> str:
    return QUARANTINE.path(run_id)


def _entries(records: RunRecords, run_id: str) -> Documents[QuarantineEntry]:
    """The run's quarantine entries, bound once to their model."""
    return QUARANTINE.bind(records, run_id, QuarantineEntry)


class QuarantineEntry(BaseModel):
    """One object a reclaim moved: where it was, where it is, the proof of the copy, and its state."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    grant_id: str
    step: int | None = None
    digest: str | None = None
    source: str
    quarantine: str
    size: int = Field(ge=0)
    proof: CopyProof  # pinned_copy's proof: CRC32C/MD5 (and SHA-256 of every byte where streamed)
    moved_at: datetime
    expires_at: datetime
    state: str = "quarantined"  # quarantined | restored | purged | expired
    detail: str | None = None
    # The source's version right after a restore put the very bytes back (verified against the proof): a later
    # grant reads that version as the one validated (`restored_versions`), as long as the object is still it.
    restored_fingerprint: str | None = None


def bucket_root(uri: str, run_uri: str) -> str:
    """The bucket `uri` lies in (`gs://b`, `s3://b`); for a local path, the run root's parent directory."""
    if is_local(uri):  # a path: no bucket in it
        return strip_file_scheme(run_uri).rstrip("/").rsplit("/", 1)[0] or "/"
    head, _, rest = uri.partition("://")
    return f"{head}://{rest.split('/', 1)[0]}"


def quarantine_root(uri: str, run_uri: str, settings: QuarantineSettings) -> str:
    return f"{bucket_root(uri, run_uri).rstrip('/')}/{settings.prefix}"


def quarantine_uri(uri: str, record: CompletionRecord, grant_id: str, settings: QuarantineSettings) -> str | None:
    """Where `uri` goes; None when it does not lie in the bucket the quarantine would be in (never guessed)."""
    bucket = bucket_root(uri, record.run_uri).rstrip("/")
    path = strip_file_scheme(uri) if is_local(uri) else uri
    if not path.startswith(bucket + "/"):
        return None
    key = path[len(bucket) + 1 :]
    if any(seg in {"", ".", ".."} for seg in key.split("/")) or key.split("/")[0] == settings.prefix:
        return None  # never quarantine the quarantine, never a name that leaves its directory
    return f"{quarantine_root(uri, record.run_uri, settings)}/{record.run_id}/{grant_id}/{key}"


def protection(storage: Storage, uri: str) -> str:
    """Which mechanism protects what a reclaim removes from this store (shown in the preview and the outcome)."""
    return scheme_facts(storage, uri).protection


def _doc_id(grant_id: str, source: str) -> str:
    return f"{grant_id}-{hashlib.sha256(source.encode()).hexdigest()[:24]}"


def _delete_pinned(storage: Storage, info: ObjectInfo) -> None:
    """Delete `info.uri` only while it is the version `info` describes; SourceChangedError otherwise."""
    versions = versions_of(storage, info.uri)
    if versions is not None and info.generation is not None:
        versions.delete_version(info.uri, info.generation)
        return
    still_pinned(storage, info)  # right before the delete: the bytes moved are the bytes removed
    storage.delete(info.uri)


def move(
    storage: Storage,
    records: RunRecords,
    record: CompletionRecord,
    grant_id: str,
    source: ObjectInfo,
    now: datetime,
    settings: QuarantineSettings,
    *,
    step: int | None = None,
    digest: str | None = None,
) -> QuarantineEntry:
    """Move the pinned version `source` into quarantine; raises SourceChangedError (the source stays) when its
    bytes are not that version or its quarantine slot holds other bytes."""
    target = quarantine_uri(source.uri, record, grant_id, settings)
    if target is None:
        raise SourceChangedError(f"{source.uri}: not in a bucket the quarantine can hold")
    proof = pinned_copy(storage, source, target, grant_id=grant_id)
    if proof.outcome == "conflict":
        raise SourceChangedError(f"{source.uri}: its quarantine copy {target} does not hold the pinned bytes")
    entry = QuarantineEntry(
        run_id=record.run_id,
        grant_id=grant_id,
        step=step,
        digest=digest,
        source=source.uri,
        quarantine=target,
        size=source.size,
        proof=proof,
        moved_at=now,
        expires_at=now + timedelta(days=settings.days),
    )
    # Recorded before the source goes: a crash after the delete still leaves the way back on the record.
    doc_id = _doc_id(grant_id, source.uri)
    _entries(records, record.run_id).put(doc_id, entry)
    try:
        _delete_pinned(storage, source)
    except SourceChangedError:
        # Written to between the copy and the delete: the source stays as it is now, and the copy of its old
        # bytes leaves the quarantine again (its record says why).
        held = storage.stat(target)
        if held is not None and held.fingerprint == proof.destination_fingerprint:
            storage.delete(target)
        _set_state(records, doc_id, entry, "source_kept", "the source changed after it was copied: kept")
        raise
    return entry


def entries(records: RunRecords, run_id: str) -> Iterator[tuple[str, QuarantineEntry | None, dict[str, object]]]:
    """(doc id, entry or None when the document is not one, raw document) of every quarantine record of the run."""
    yield from _entries(records, run_id).list_checked()


def _roots(record: CompletionRecord) -> list[str]:
    roots = [record.run_uri, *([record.temp_root] if record.temp_root else []), *(c.uri for c in record.candidates)]
    return [strip_file_scheme(r).rstrip("/") for r in roots]


def local_anchors(record: CompletionRecord) -> list[str]:
    """The roots a restore or purge of this run may touch, each walked without following a link (P30-P33): the
    run's bucket (for local files the run root's parent, which holds the quarantine) and the record's roots."""
    return [bucket_root(record.run_uri, record.run_uri), *_roots(record)]


def entry_problem(entry: QuarantineEntry, record: CompletionRecord, settings: QuarantineSettings) -> str | None:
    """Why this record of a move must not be acted on (None: it may): another run's object, a location outside
    this run's roots, a quarantine slot that is not the deployment's for this run and grant."""
    if entry.run_id != record.run_id:
        return f"{entry.source}: recorded for run {entry.run_id}, not {record.run_id}"
    source = strip_file_scheme(entry.source)
    if any(seg in {".", ".."} for seg in source.split("/")) or not any(
        source.startswith(root + "/") for root in _roots(record)
    ):
        return f"{entry.source}: outside this run's roots"
    if any(source.startswith(p.rstrip("/") + "/") for p in record.preserved_locations):
        return f"{entry.source}: preserved evidence is never a reclaim's to move"
    expected = quarantine_uri(entry.source, record, entry.grant_id, settings)
    if expected is None or expected != entry.quarantine or entry.proof.destination != entry.quarantine:
        return f"{entry.source}: its quarantine location {entry.quarantine} is not this deployment's for the run"
    if entry.proof.source != entry.source:
        return f"{entry.source}: its proof is another object's"
    return None


class RestoreResult(BaseModel):
    restored: list[str] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list)  # "<uri>: why"
    expired: list[str] = Field(default_factory=list)


def _identical(storage: Storage, info: ObjectInfo, proof: CopyProof) -> bool:
    if info.size != proof.size:
        return False
    if proof.crc32c and info.crc32c and info.crc32c != proof.crc32c:
        return False
    if proof.md5 and info.md5 and info.md5 != proof.md5:
        return False
    return proof.sha256 is None or sha256_of(storage, info) == proof.sha256


def restore(
    storage: Storage,
    records: RunRecords,
    record: CompletionRecord,
    now: datetime,
    settings: QuarantineSettings,
) -> RestoreResult:
    """Put every quarantined object of the run back where it was, byte-exact; never over other bytes. Local paths
    are walked from the run's bucket without following a link: a quarantine slot, a run directory or the
    quarantine itself replaced by a symlink refuses that object before anything is read, written or deleted."""
    result = RestoreResult()
    with anchored_to(storage, local_anchors(record)) as held_storage:
        for doc_id, entry, _raw in entries(records, record.run_id):
            if entry is None:
                result.refused.append(f"{doc_id}: not a quarantine record")
                continue
            try:
                _restore_one(held_storage, records, record, doc_id, entry, now, settings, result)
            except UnsafePathError as exc:
                result.refused.append(f"{entry.source}: {exc}")
    return result


def _restore_one(
    storage: Storage,
    records: RunRecords,
    record: CompletionRecord,
    doc_id: str,
    entry: QuarantineEntry,
    now: datetime,
    settings: QuarantineSettings,
    result: RestoreResult,
) -> None:
    """One quarantined object back (see restore); appends to `result`. Every path below is reached under the
    anchors, so an UnsafePathError (a link anywhere on the slot's, the quarantine's or the source's path) is raised
    by the first stat, before a byte is read, written or deleted."""
    if entry.state != "quarantined":
        return
    problem = entry_problem(entry, record, settings)
    if problem:
        result.refused.append(problem)
        return
    if now >= entry.expires_at:
        result.expired.append(entry.source)
        _set_state(records, doc_id, entry, "expired", f"expired at {entry.expires_at.isoformat()}")
        return
    storage.stat(entry.source)  # its directory walked first: a symlinked run directory refuses before any move
    mismatch = twin_mismatch(storage, entry.proof)  # the quarantined bytes, checked now against the move
    if mismatch:
        result.refused.append(f"{entry.source}: quarantined copy altered: {mismatch}")
        return
    held = storage.stat(entry.quarantine)
    assert held is not None  # twin_mismatch found it a moment ago
    try:
        back = pinned_copy(storage, held, entry.source, grant_id=entry.grant_id)
    except SourceChangedError as exc:
        result.refused.append(f"{entry.source}: {exc}")
        return
    now_at_source = storage.stat(entry.source)
    if back.outcome == "conflict" or now_at_source is None or not _identical(storage, now_at_source, entry.proof):
        result.refused.append(f"{entry.source}: the path now holds other bytes; never overwritten")
        return
    try:
        _delete_pinned(storage, held)
    except SourceChangedError as exc:  # restored, but the quarantine copy changed meanwhile: leave it
        result.refused.append(f"{entry.quarantine}: kept: {exc}")
    back_at = storage.stat(entry.source)
    _set_state(
        records, doc_id, entry, "restored", f"restored at {now.isoformat()}",
        restored_fingerprint=back_at.fingerprint if back_at is not None else None,
    )  # fmt: skip
    result.restored.append(entry.source)


def purge(
    storage: Storage,
    records: RunRecords,
    record: CompletionRecord,
    now: datetime,
    settings: QuarantineSettings,
    *,
    step: int | None,
    digest: str | None,
) -> tuple[list[str], list[str]]:
    """Delete, before their expiry, the quarantined objects of this run's reclaims of (step, digest). Only the
    slots the records name and `entry_problem` accepts; returns (purged quarantine URIs, refused: why)."""
    purged: list[str] = []
    refused: list[str] = []
    with anchored_to(storage, local_anchors(record)) as held_storage:
        for doc_id, entry, _raw in entries(records, record.run_id):
            if entry is None or entry.state != "quarantined" or entry.step != step or entry.digest != digest:
                continue
            problem = entry_problem(entry, record, settings)
            if problem:
                refused.append(problem)
                continue
            try:  # the slot's whole path walked from the run's bucket: a link on it refuses, nothing is deleted
                held = held_storage.stat(entry.quarantine)
                if held is not None:
                    held_storage.delete(entry.quarantine)
            except UnsafePathError as exc:
                refused.append(f"{entry.quarantine}: {exc}")
                continue
            _set_state(records, doc_id, entry, "purged", f"purged at {now.isoformat()}")
            purged.append(entry.quarantine)
    return purged, refused


def _set_state(
    records: RunRecords,
    doc_id: str,
    entry: QuarantineEntry,
    state: str,
    detail: str,
    *,
    restored_fingerprint: str | None = None,
) -> None:
    changes: dict[str, str | None] = {"state": state, "detail": detail}
    if restored_fingerprint is not None:
        changes["restored_fingerprint"] = restored_fingerprint
    updated = entry.model_copy(update=changes)
    _entries(records, entry.run_id).put(doc_id, updated)


def restored_versions(records: RunRecords, run_id: str, step: int | None, digest: str | None) -> dict[str, str]:
    """`<source uri>\t<its version now>` -> the version that was validated, for the objects of (step, digest) a
    restore put back byte-exact (issue 47 item 5). A restore cannot bring back a version (a local file gets a
    new inode and ctime), but it verified the bytes: while the object is still the restored version it is the
    validated one, so a grant pinned to the validated digest is still about these bytes."""
    found: dict[str, str] = {}
    for _doc, entry, _raw in entries(records, run_id):
        if entry is None or entry.state != "restored" or entry.restored_fingerprint is None:
            continue
        if entry.step == step and entry.digest == digest and entry.proof.source_fingerprint:
            found[f"{entry.source}\t{entry.restored_fingerprint}"] = entry.proof.source_fingerprint
    return found


def expire(storage: Storage, root: str, settings: QuarantineSettings, now: datetime) -> list[str]:
    """The lifecycle rule where the backend has none (local files, the emulator stack): delete the objects under
    `<root>/<prefix>/` older than the quarantine's days, and nothing else. On GCS and S3 the bucket's lifecycle
    rule on the same prefix (infra/) does this."""
    prefix = f"{root.rstrip('/')}/{settings.prefix}"
    gone: list[str] = []
    with anchored_to(storage, [root]) as held_storage:  # a symlinked prefix or directory in it: UnsafePathError
        for info in list(held_storage.list(prefix)):
            born = info.created or info.updated
            if not info.uri.startswith(prefix + "/") or born is None:
                continue
            if now - born >= timedelta(days=settings.days):
                held_storage.delete(info.uri)
                gone.append(info.uri)
    return gone
