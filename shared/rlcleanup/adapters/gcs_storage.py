"""Storage on Google Cloud Storage (honours STORAGE_EMULATOR_HOST). Copies are server-side rewrites.

The client and the lean requests of the hot paths (ranged reads, listings, stats, rewrites) are
adapters/gcs_client.py's; here, the port's object operations, and the versioned ones (ports.storage.VersionedStorage:
copies and deletes pinned to a generation).
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from rlcleanup.adapters.gcs_client import RangeReader, count_requests, default_client, info_from_blob, proxied
from rlcleanup.adapters.local_storage import file_checksums
from rlcleanup.adapters.object_store import RemoteObjects
from rlcleanup.errors import ObjectTooLarge
from rlcleanup.ports.lines import bounded_lines
from rlcleanup.ports.storage import ChildPage, ObjectInfo, SourceChangedError, StorageError, WriteOutcome
from rlcleanup.settings import CopySettings, read
from rlcleanup.uris import split_bucket

if TYPE_CHECKING:
    import google.cloud.storage as storage

_READ_CHUNK = 4 * 1024 * 1024
_UPLOAD_CHUNK = 4 * 1024 * 1024  # a multiple of 256 KiB, as resumable uploads require; ~3 chunks held at most


class RewriteState(BaseModel):
    """An unfinished rewrite: the token of its next call, and what it was started with (the token is only valid
    with the same request)."""

    source: str
    pins: dict[str, Any]
    token: str


def _gs(bucket: str, key: str) -> str:
    return f"gs://{bucket}/{key}"


class GcsStorage(RemoteObjects):
    """Implements ports.storage.VersionedStorage (generations) and StreamingStorage, ListsChildren, ListsAfter."""

    def __init__(self, client: storage.Client | None = None, *, lean_reads: bool = True) -> None:
        self._client_obj = count_requests(client) if client is not None else None
        self._lean_reads = lean_reads  # False: ranged reads through blob.download_as_bytes (the bench compares)
        self._ranges: RangeReader | None = None
        self._ranges_lock = threading.Lock()
        self._copies = read(CopySettings)

    @property
    def client(self) -> storage.Client:
        if self._client_obj is None:  # lazy: keeps function cold starts cheap
            self._client_obj = default_client()
        return self._client_obj

    def _blob(self, uri: str) -> Any:
        bucket, key = split_bucket(uri)
        return self.client.bucket(bucket).blob(key)

    def stat(self, uri: str) -> ObjectInfo | None:
        bucket, key = split_bucket(uri)
        blob = self.client.bucket(bucket).get_blob(key)
        return info_from_blob(blob) if blob is not None else None

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        return self.list_after(prefix_uri, None)

    def list_after(self, prefix_uri: str, start_after: str | None) -> Iterator[ObjectInfo]:
        """ports.storage.ListsAfter: the server resumes the listing (`startOffset`), a page of requests a page."""
        bucket, key = split_bucket(prefix_uri.rstrip("/") + "/")
        after = None
        if start_after is not None:
            after_bucket, after = split_bucket(start_after)
            if after_bucket != bucket:
                raise ValueError(f"list_after: {start_after!r} is not in gs://{bucket}")
            if after < key:
                after = None  # sorts before the prefix: every object under it is after
        lean = self._range_reader()
        if lean is not None:
            yield from lean.list(bucket, key, after)
            return
        for blob in self.client.list_blobs(bucket, prefix=key, start_offset=after):
            if not blob.name.endswith("/") and blob.name != after:  # skip folder placeholders
                yield info_from_blob(blob)

    def list_children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> ChildPage:
        """One page of the immediate children of a prefix (a delimiter listing: one request per page, however
        many objects lie deeper). The sweep walks run roots with it instead of listing every checkpoint."""
        bucket, key = split_bucket(prefix_uri.rstrip("/") + "/")
        blobs = self.client.list_blobs(
            bucket, prefix=key, delimiter="/", max_results=page_size, page_token=page_token or None
        )
        page = next(blobs.pages, None)
        if page is None:
            return ChildPage([], [], None)
        objects = [info_from_blob(b) for b in page if not b.name.endswith("/")]
        prefixes = sorted(f"gs://{bucket}/{p.rstrip('/')}" for p in page.prefixes)
        return ChildPage(prefixes, objects, blobs.next_page_token)

    def _range_reader(self) -> RangeReader | None:
        if not self._lean_reads:
            return None
        with self._ranges_lock:
            if self._ranges is None:
                if proxied(str(self.client.api_endpoint)):
                    self._lean_reads = False
                    return None
                self._ranges = RangeReader(self.client)
            return self._ranges

    def warm_reads(self, n: int) -> None:
        """About to read `n` ranges at once (validation, before its listing): open the lean pool's connections
        now, in the background, so the listing's round trip hides their connects. A no-op without the lean path."""
        reader = self._range_reader()
        if reader is not None:
            reader.warm(n)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        reader = self._range_reader()
        if reader is not None:
            bucket, key = split_bucket(uri)
            return reader.read(bucket, key, start, length)
        from google.api_core.exceptions import NotFound, RequestRangeNotSatisfiable

        try:
            data: bytes = self._blob(uri).download_as_bytes(start=start, end=start + length - 1, checksum=None)
        except RequestRangeNotSatisfiable:
            return b""
        except NotFound as exc:
            raise FileNotFoundError(uri) from exc
        return data

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        info = self.stat(uri)
        if info is None:
            raise FileNotFoundError(uri)
        if info.size > max_bytes:
            raise ObjectTooLarge(uri, max_bytes)
        data: bytes = self._blob(uri).download_as_bytes()
        return data

    def read_generation(self, uri: str, generation: int | None, max_bytes: int = 1024 * 1024) -> bytes | None:
        """A small object as it was at `generation` (None: the live one); None when that generation is gone.
        A storage notification names the generation it is about: reading the live object instead would see a
        later overwrite (a resubmitted step's RUNNING over the token the notification was sent for)."""
        from google.api_core.exceptions import NotFound

        bucket, key = split_bucket(uri)
        blob = self.client.bucket(bucket).blob(key, generation=generation)
        try:
            data: bytes = blob.download_as_bytes(start=0, end=max_bytes - 1, checksum=None)
        except NotFound:
            return None
        return data

    def iter_lines(self, uri: str) -> Iterator[str]:
        # blob.open streams in chunks and bounded_lines caps each line: memory stays bounded whatever the log.
        with self._blob(uri).open("rb", chunk_size=_READ_CHUNK) as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None)
            yield from bounded_lines(text)

    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> WriteOutcome:
        from google.api_core.exceptions import PreconditionFailed

        blob = self._blob(uri)
        try:
            blob.upload_from_string(data, content_type=content_type, if_generation_match=0)
            return WriteOutcome.created
        except PreconditionFailed:
            existing = self._blob(uri).download_as_bytes()
            return WriteOutcome.identical if existing == data else WriteOutcome.conflict

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        """Server-side rewrite (token loop for large objects); no byte passes through this process."""
        return self._copy(src_uri, dst_uri, None)

    def copy_version_if_absent(self, src_uri: str, dst_uri: str, source_generation: int) -> WriteOutcome:
        """ports.storage.VersionedStorage: the rewrite pinned to the source's generation
        (ifSourceGenerationMatch): a grant copies exactly the generation that was validated, and an overwrite
        since then fails the copy (SourceChangedError)."""
        return self._copy(src_uri, dst_uri, source_generation)

    def _copy(self, src_uri: str, dst_uri: str, source_generation: int | None) -> WriteOutcome:
        """copy_if_absent, pinned to `source_generation` unless None.

        Three requests for a new object that GCS copies in one call (stat the destination, look for an unfinished
        rewrite's state: a 404 Class B GET, then rewrite with ifGenerationMatch=0); the source is only stat'ed when
        the destination exists (identical or conflict?) or the rewrite finds no source. The destination stat is
        what keeps emulators write-once: they do not enforce copy preconditions. All go through the lean pool
        (capture's hot path: the Blob path cost ~3x the client CPU per copy).
        """
        lean = self._range_reader()
        if lean is None:
            return self._copy_blob(src_uri, dst_uri, source_generation)
        src, dst_name = split_bucket(src_uri), split_bucket(dst_uri)
        dst = lean.stat(*dst_name)
        if dst is not None:
            return self._compare(src_uri, dst)
        pins: dict[str, Any] = {
            "ifGenerationMatch": 0,
            "maxBytesRewrittenPerCall": self._copies.gcs_rewrite_bytes_per_call,
        }
        if source_generation is not None:
            pins["ifSourceGenerationMatch"] = source_generation
        status = self._rewrite(lean, src, dst_name, pins)
        if status == 412:
            return self._precondition_failed(src_uri, dst_uri, source_generation)
        if status == 404:
            if self.stat(src_uri) is None:
                raise FileNotFoundError(src_uri)
            raise StorageError(f"copy {src_uri} -> {dst_uri}: 404 (no destination bucket?)")
        return WriteOutcome.created

    def _rewrite(self, lean: RangeReader, src: tuple[str, str], dst: tuple[str, str], pins: dict[str, Any]) -> int:
        """The rewrite loop, resumable: a rewrite that needs more than one call records its token in a small state
        object (`<state_prefix>/<sha256 of the destination>.json` in the destination's bucket: the deployment's
        prefix, never a place an input chooses) before the next call, so a copy killed half way is resumed from
        its last token by the retried delivery, never from zero. A state made for another source or other pins
        (another generation), or a token the server refuses, starts the rewrite afresh; the state is deleted once
        the rewrite ends either way."""
        state_name = (dst[0], f"{self._copies.state_prefix}/{hashlib.sha256(_gs(*dst).encode()).hexdigest()}.json")
        try:
            raw = lean.read(*state_name, 0, 64 * 1024)
            state = RewriteState.model_validate_json(raw) if raw else None
        except (FileNotFoundError, ValueError):
            state = None
        if state is not None and (state.source, state.pins) != (_gs(*src), pins):
            state = None
        wrote = False

        def record(token: str) -> None:
            nonlocal wrote
            body = RewriteState(source=_gs(*src), pins=pins, token=token).model_dump_json().encode()
            blob = self.client.bucket(state_name[0]).blob(state_name[1])
            blob.upload_from_string(body, content_type="application/json")
            wrote = True

        status = lean.rewrite(src, dst, pins, token=state.token if state else None, on_token=record)
        if state is not None and status in (400, 410):  # the server no longer knows the token: from the start
            status = lean.rewrite(src, dst, pins, on_token=record)
        if wrote or state is not None:
            self._delete(_gs(*state_name), None)
        return status

    def _precondition_failed(self, src_uri: str, dst_uri: str, source_generation: int | None) -> WriteOutcome:
        """Someone created the destination meanwhile, or the source is another generation now."""
        dst = self.stat(dst_uri)
        if dst is None:
            src = self.stat(src_uri)
            if source_generation is not None and (src is None or src.generation != source_generation):
                raise SourceChangedError(f"{src_uri}: generation {source_generation} is gone") from None
            raise StorageError(f"copy {src_uri} -> {dst_uri}: precondition failed but no object") from None
        return self._compare(src_uri, dst)

    def _copy_blob(self, src_uri: str, dst_uri: str, source_generation: int | None) -> WriteOutcome:
        """copy_if_absent through google-cloud-storage (an HTTP proxy in the environment: only requests honours it).
        Blob.rewrite sends no maxBytesRewrittenPerCall and keeps its tokens in memory: only the lean path
        resumes an interrupted rewrite."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        dst = self.stat(dst_uri)
        if dst is not None:
            return self._compare(src_uri, dst)
        src_blob, dst_blob = self._blob(src_uri), self._blob(dst_uri)
        pin: dict[str, Any] = {"if_generation_match": 0}
        if source_generation is not None:
            pin["if_source_generation_match"] = source_generation
        try:
            token, _, _ = dst_blob.rewrite(src_blob, **pin)
            while token is not None:
                token, _, _ = dst_blob.rewrite(src_blob, token=token, **pin)
        except PreconditionFailed:
            return self._precondition_failed(src_uri, dst_uri, source_generation)
        except NotFound as exc:
            if self.stat(src_uri) is None:
                raise FileNotFoundError(src_uri) from exc
            raise StorageError(f"copy {src_uri} -> {dst_uri}: {exc}") from exc
        return WriteOutcome.created

    def upload_file_if_absent(self, path: Path, dst_uri: str) -> WriteOutcome:
        """A local file to GCS, write-once, streamed from disk in bounded chunks (a local run preserved to GCS)."""
        from google.api_core.exceptions import PreconditionFailed

        def compare(dst: ObjectInfo) -> WriteOutcome:
            crc32c, md5 = file_checksums(path)
            same = _same(ObjectInfo(uri=str(path), size=path.stat().st_size, crc32c=crc32c, md5=md5), dst)
            return WriteOutcome.identical if same else WriteOutcome.conflict

        dst = self.stat(dst_uri)  # emulators ignore the precondition on resumable uploads: check first
        if dst is not None:
            return compare(dst)
        blob = self._blob(dst_uri)
        blob.chunk_size = _UPLOAD_CHUNK  # resumable upload above 8 MiB: memory is a few chunks, not the file
        try:
            blob.upload_from_filename(str(path), if_generation_match=0)
            return WriteOutcome.created
        except PreconditionFailed:
            dst = self.stat(dst_uri)
            if dst is None:
                raise
            return compare(dst)

    def download_to(self, src_uri: str, path: Path) -> None:
        """An object's bytes into a local file, streamed in chunks: bounded memory whatever the object size."""
        from google.api_core.exceptions import NotFound

        blob = self._blob(src_uri)
        blob.chunk_size = _UPLOAD_CHUNK
        try:
            blob.download_to_filename(str(path), checksum=None)
        except NotFound as exc:
            raise FileNotFoundError(src_uri) from exc

    def _compare(self, src_uri: str, dst: ObjectInfo) -> WriteOutcome:
        src = self.stat(src_uri)
        if src is None:
            raise FileNotFoundError(src_uri)
        return WriteOutcome.identical if _same(src, dst) else WriteOutcome.conflict

    def delete(self, uri: str) -> bool:
        return self._delete(uri, None)

    def delete_version(self, uri: str, generation: int) -> bool:
        """ports.storage.VersionedStorage: delete only that generation (reclaim deletes exactly the generation it
        verified); a newer generation raises SourceChangedError and stays."""
        return self._delete(uri, generation)

    def _delete(self, uri: str, if_generation: int | None) -> bool:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            if if_generation is None:
                self._blob(uri).delete()
            else:
                self._blob(uri).delete(if_generation_match=if_generation)
            return True
        except NotFound:
            return False
        except PreconditionFailed as exc:
            raise SourceChangedError(f"{uri}: not generation {if_generation} any more") from exc


def _same(a: ObjectInfo, b: ObjectInfo) -> bool:
    if a.size != b.size:
        return False
    if a.crc32c and b.crc32c:
        return a.crc32c == b.crc32c
    return a.md5 is not None and a.md5 == b.md5
