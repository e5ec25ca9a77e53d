"""Storage on S3-compatible object stores (CoreWeave AI Object Storage, R2, AWS): `s3://bucket/key`.

Endpoints, credentials, addressing, the obstore client and its error mapping are adapters/s3_client.py's; here,
the port's object operations over one client per bucket.

Checksums: S3 has no CRC32C in listings; its ETag is the MD5 of the bytes for a single-part upload and
`<md5 of part md5s>-<parts>` for a multipart one. `ObjectInfo.etag` always carries the ETag; `md5` is set only
when the ETag is a plain MD5, so a multipart ETag is never mistaken for one.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import hashlib
import io
import re
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rlcleanup.adapters.object_store import RemoteObjects
from rlcleanup.adapters.s3_client import (
    S3Endpoint,
    build_store,
    default_endpoint,
    lifecycle_rule,
    map_error,
    named_endpoints,
    object_key,
)
from rlcleanup.adapters.s3_copy import Precondition, ServerSideCopier, botocore_client
from rlcleanup.adapters.s3_streams import StreamDigest, _ChunkReader
from rlcleanup.ports.lifecycle import LifecycleRule
from rlcleanup.ports.lines import bounded_lines
from rlcleanup.ports.storage import (
    ChildPage,
    IncompleteUpload,
    ObjectInfo,
    SourceChangedError,
    StorageAccessError,
    StorageError,
    UnsafePathError,
    WriteOutcome,
)
from rlcleanup.settings import CopySettings, read

if TYPE_CHECKING:
    from obstore.store import RetryConfig, S3Store

_CHUNK = 1024 * 1024  # streaming reads: memory stays a few chunks whatever the object size


_MD5_ETAG = re.compile(r"^[0-9a-fA-F]{32}$")


def etag_md5(etag: str | None) -> str | None:
    """The base64 MD5 (as GCS reports it) when the ETag is one; None for a multipart or opaque ETag."""
    value = (etag or "").strip().strip('"')
    if not _MD5_ETAG.match(value):
        return None
    return base64.b64encode(binascii.unhexlify(value)).decode()


class S3Storage(RemoteObjects):
    """One obstore S3Store per bucket (a store is bound to a bucket), built lazily and shared across threads."""

    def __init__(
        self,
        endpoints: list[S3Endpoint] | None = None,
        default: S3Endpoint | None = None,
        *,
        retry: RetryConfig | None = None,
    ) -> None:
        self.default = default or default_endpoint()
        self.endpoints = named_endpoints() if endpoints is None else endpoints
        self._retry = retry
        self._stores: dict[str, S3Store] = {}
        self._copiers: dict[str, ServerSideCopier] = {}
        self._copies = read(CopySettings)
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> S3Storage:
        return cls(named_endpoints(environ), default_endpoint(environ))

    def endpoint_for(self, bucket: str) -> S3Endpoint:
        for ep in self.endpoints:
            if bucket in ep.buckets:
                return ep
        return self.default

    def lifecycle_for(self, bucket: str) -> LifecycleRule:
        """How `bucket`'s store dates a lifecycle deletion: the endpoint says which store it is (s3_client)."""
        return lifecycle_rule(self.endpoint_for(bucket))

    def _store(self, bucket: str) -> S3Store:
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                store = self._stores[bucket] = build_store(bucket, self.endpoint_for(bucket), self._retry)
            return store

    def _call(self, what: str, bucket: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self._store(bucket), *args, **kwargs)
        except (StorageAccessError, UnsafePathError, _Exists):
            raise
        except Exception as exc:
            raise map_error(exc, what, self.endpoint_for(bucket)) from exc

    # ------------------------------------------------------------------ Storage port

    def stat(self, uri: str) -> ObjectInfo | None:
        import obstore

        bucket, key = object_key(uri)
        try:
            meta = self._call(uri, bucket, obstore.head, key)
        except FileNotFoundError:
            return None
        return _info(bucket, meta, self.lifecycle_for(bucket))

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        # The port's name order: S3 servers differ (SeaweedFS lists by its directory tree, so `a/b.txt` comes before
        # `a.txt`), hence the sort. A paged plan does not come here: it lists in bounded passes
        # (ports.storage.list_in_name_order over list_any_order), never holding a whole listing.
        return iter(sorted(self.list_any_order(prefix_uri), key=lambda o: o.uri))

    def list_any_order(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        """ports.storage.ListsInAnyOrder: the listing streamed in the server's order, 1,000 keys per request."""
        import obstore

        bucket, key = object_key(prefix_uri.rstrip("/"))
        prefix = key.rstrip("/") or None  # object_store prefixes are whole path segments: `run` never lists `runner/`
        try:
            stream = self._call(prefix_uri, bucket, obstore.list, prefix=prefix, chunk_size=1000)
            for batch in stream:
                for meta in batch:
                    # Folder placeholders ("dir/", 0 bytes) are not objects of the run, but object_store lists
                    # them with the slash stripped, like an empty file "dir". Only a HEAD tells them apart (the
                    # placeholder's key is "dir/"): one extra request per empty object, which runs have few of.
                    if meta["path"].endswith("/") or (
                        int(meta["size"]) == 0 and self.stat(f"s3://{bucket}/{meta['path']}") is None
                    ):
                        continue
                    yield _info(bucket, meta, self.lifecycle_for(bucket))
        except FileNotFoundError:
            return
        except (StorageAccessError, StorageError):
            raise
        except Exception as exc:
            raise map_error(exc, prefix_uri, self.endpoint_for(bucket)) from exc

    def list_children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> ChildPage:
        """One page of a prefix's immediate children (what the sweep walks run roots with).

        obstore has no page-by-page delimiter listing: its `list_with_delimiter` follows S3's continuation tokens
        itself and returns the whole level (one ListObjectsV2 request per 1,000 children). A page is a slice of
        that level after `page_token` (the last child of the previous page, names in S3's byte order), so each
        page costs one listing of its level; the level never crosses the sweep's page bound in what it emits."""
        import obstore

        bucket, key = object_key(prefix_uri.rstrip("/"))
        prefix = key.rstrip("/") or None
        try:
            level = self._call(prefix_uri, bucket, obstore.list_with_delimiter, prefix)
        except FileNotFoundError:
            return ChildPage([], [], None)
        base = f"s3://{bucket}/"
        # Folder placeholders ("dir/") are not objects of the run; the prefix's own placeholder neither.
        objects = {
            f"{base}{m['path']}": m for m in level["objects"] if not m["path"].endswith("/") and m["path"] != key
        }
        names = sorted({*(f"{base}{p.rstrip('/')}" for p in level["common_prefixes"]), *objects})
        after = [n for n in names if page_token is None or n > page_token]
        page, rest = after[:page_size], after[page_size:]
        return ChildPage(
            [n for n in page if n not in objects],
            [_info(bucket, objects[n], self.lifecycle_for(bucket)) for n in page if n in objects],
            page[-1] if rest else None,
        )

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        import obstore

        if length <= 0:
            return b""
        bucket, key = object_key(uri)
        try:
            return bytes(self._call(uri, bucket, obstore.get_range, key, start=start, length=length))
        except StorageError as exc:
            if "416" in str(exc):  # the range starts at or past the end: nothing there, as the port says
                return b""
            raise

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        import obstore

        info = self.stat(uri)
        if info is None:
            raise FileNotFoundError(uri)
        if info.size > max_bytes:
            raise ValueError(f"{uri} is larger than {max_bytes} bytes")
        bucket, key = object_key(uri)
        result = self._call(uri, bucket, obstore.get, key)
        return bytes(result.bytes())

    def iter_chunks(self, uri: str, chunk: int = _CHUNK) -> Iterator[bytes]:
        """The object's bytes in chunks of about `chunk` bytes (bounded memory)."""
        import obstore

        bucket, key = object_key(uri)
        result = self._call(uri, bucket, obstore.get, key)
        try:
            for part in result.stream(min_chunk_size=chunk):
                yield bytes(part)
        except Exception as exc:
            raise map_error(exc, uri, self.endpoint_for(bucket)) from exc

    def iter_lines(self, uri: str) -> Iterator[str]:
        raw = io.BufferedReader(_ChunkReader(self.iter_chunks(uri)), buffer_size=_CHUNK)
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None)
        yield from bounded_lines(text)

    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> WriteOutcome:
        bucket, key = object_key(uri)
        try:
            self._call(uri, bucket, _put_create, key, data, content_type)
            return WriteOutcome.created
        except _Exists:
            existing = self.read_bytes(uri, max_bytes=max(len(data), 1) * 2 + 1024)
            return WriteOutcome.identical if existing == data else WriteOutcome.conflict

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        """Server-side and write-once, whatever the size: CopyObject (If-None-Match: *) within a bucket up to the
        multipart threshold; a multipart copy of ranged UploadPartCopy parts above it, and any copy between two
        buckets of one endpoint, through adapters/s3_copy.py. Only buckets behind different endpoints stream."""
        sb, sk = object_key(src_uri)
        db, dk = object_key(dst_uri)
        dst = self.stat(dst_uri)
        if dst is not None:
            return self._compare(src_uri, dst)
        if self.endpoint_for(sb) != self.endpoint_for(db):  # no server can copy between two endpoints
            return self.fill_if_absent(dst_uri, lambda tmp: self.download_to(src_uri, tmp))
        src = self.stat(src_uri)  # its size decides between one CopyObject and a multipart copy
        if src is None:
            raise FileNotFoundError(src_uri)
        try:
            if sb == db and src.size <= self._copies.s3_multipart_threshold:
                self._call(dst_uri, sb, _copy_create, sk, dk)
            else:
                self._copier(db).copy(src, dst_uri, split=object_key)
        except (_Exists, Precondition):
            dst = self.stat(dst_uri)
            if dst is None:
                raise StorageError(f"copy {src_uri} -> {dst_uri}: precondition failed but no object") from None
            return self._compare(src_uri, dst)
        except FileNotFoundError:
            raise FileNotFoundError(src_uri) from None
        except SourceChangedError as exc:  # overwritten mid-copy (a live run): the retry copies the new version
            raise StorageError(f"copy {src_uri} -> {dst_uri}: {exc}") from exc
        return WriteOutcome.created

    # ------------------------------------------------------------------ EtagPinnedStorage (a grant's copies)

    def server_side_between(self, src_uri: str, dst_uri: str) -> bool:
        return self.endpoint_for(object_key(src_uri)[0]) == self.endpoint_for(object_key(dst_uri)[0])

    def copy_etag_if_absent(self, src: ObjectInfo, dst_uri: str, *, grant_id: str | None = None) -> WriteOutcome:
        """ports.storage.EtagPinnedStorage: the copy a grant makes of the pinned `src`, server-side at any size
        and conditioned on its ETag (CopySourceIfMatch on CopyObject, x-amz-copy-source-if-match on every
        UploadPartCopy: adapters/s3_copy.py), never through obstore's unconditioned copy. A source whose ETag
        moved fails the copy with SourceChangedError and nothing at the destination (a multipart copy's upload
        is aborted); an existing destination is identical only when it holds a copy of exactly that ETag. A
        multipart copy resumes only an upload begun for `grant_id` (the grant the copy is made for)."""
        if not src.etag:
            raise SourceChangedError(f"{src.uri}: no ETag was pinned, so a server-side copy cannot be held to it")
        if not self.server_side_between(src.uri, dst_uri):
            raise ValueError(f"{src.uri} -> {dst_uri}: two endpoints, no server-side copy")
        dst = self.stat(dst_uri)
        if dst is not None:
            return self._compare_pinned(src, dst)
        try:
            self._copier(object_key(dst_uri)[0]).copy(src, dst_uri, split=object_key, grant_id=grant_id)
        except Precondition:  # If-None-Match (the destination appeared) or CopySourceIfMatch (the source moved)
            dst = self.stat(dst_uri)
            if dst is None:
                raise SourceChangedError(f"{src.uri}: its ETag is no longer the pinned {src.etag}") from None
            return self._compare_pinned(src, dst)
        except FileNotFoundError:
            raise SourceChangedError(f"{src.uri}: gone since it was pinned") from None
        return WriteOutcome.created

    def _compare_pinned(self, src: ObjectInfo, dst: ObjectInfo) -> WriteOutcome:
        """An existing destination against the pinned source (not the source as it is now)."""
        if dst.size != src.size:
            return WriteOutcome.conflict
        if dst.etag == src.etag:
            return WriteOutcome.identical
        # A multipart copy's ETag is never the source's: the copy recorded the source's ETag on it.
        copied_from = self._copier(object_key(dst.uri)[0]).source_etag(dst.uri, object_key)
        return WriteOutcome.identical if copied_from == src.etag else WriteOutcome.conflict

    def _copier(self, bucket: str) -> ServerSideCopier:
        """The botocore copier for `bucket`'s endpoint, built on the first copy that needs it (obstore has no
        UploadPartCopy and no cross-bucket copy)."""
        ep = self.endpoint_for(bucket)
        with self._lock:
            copier = self._copiers.get(ep.name)
            if copier is None:
                client = botocore_client(ep, self._copies.s3_workers)
                copier = self._copiers[ep.name] = ServerSideCopier(client, self._copies)
            return copier

    # ------------------------------------------------------------------ StreamingStorage (cross-backend copies)

    def download_to(self, src_uri: str, path: Path) -> None:
        """The object into a local file, streamed in bounded chunks, verified on the way: the byte count must be
        the listed size and, when the ETag is an MD5 (single-part upload), the MD5 must match it. A mismatch
        raises before the caller publishes the file, so a write-once destination never keeps bad bytes."""
        src = self.stat(src_uri)
        if src is None:
            raise FileNotFoundError(src_uri)
        digest = StreamDigest()
        with path.open("wb") as fh:
            for part in self.iter_chunks(src_uri):
                digest.update(part)
                fh.write(part)
        if digest.size != src.size:
            raise StorageError(f"{src_uri}: streamed {digest.size} bytes, the listing says {src.size}")
        if src.md5 is not None and digest.md5 != src.md5:
            raise StorageError(f"{src_uri}: the MD5 of the streamed bytes differs from the object's ETag")

    def upload_file_if_absent(self, path: Path, dst_uri: str) -> WriteOutcome:
        """A local file to S3, write-once (If-None-Match: * on a single PUT; S3 takes up to 5 GiB so)."""
        bucket, key = object_key(dst_uri)
        try:
            with path.open("rb") as fh:
                self._call(dst_uri, bucket, _put_create, key, fh, "application/octet-stream")
            return WriteOutcome.created
        except _Exists:
            dst = self.stat(dst_uri)
            if dst is None:
                raise StorageError(f"{dst_uri}: precondition failed but no object") from None
            return WriteOutcome.identical if _file_matches(path, dst) else WriteOutcome.conflict

    def _compare(self, src_uri: str, dst: ObjectInfo) -> WriteOutcome:
        src = self.stat(src_uri)
        if src is None:
            raise FileNotFoundError(src_uri)
        same = src.size == dst.size and (src.etag or "x") == (dst.etag or "y")
        if not same and src.size == dst.size and src.etag and dst.etag != src.etag and "-" in (dst.etag or ""):
            # A multipart copy's ETag is never the source's: the copy recorded the source's ETag on it.
            same = self._copier(object_key(dst.uri)[0]).source_etag(dst.uri, object_key) == src.etag
        return WriteOutcome.identical if same else WriteOutcome.conflict

    def incomplete_uploads(self, prefix_uri: str) -> builtins.list[IncompleteUpload]:
        """Multipart uploads never completed under the prefix (adapters/s3_uploads.py)."""
        from rlcleanup.adapters import s3_uploads

        return s3_uploads.list_incomplete(self.endpoint_for(object_key(prefix_uri)[0]), prefix_uri)

    def abort_incomplete_upload(self, key_uri: str, upload_id: str) -> bool:
        from rlcleanup.adapters import s3_uploads

        return s3_uploads.abort(self.endpoint_for(object_key(key_uri)[0]), key_uri, upload_id)

    def delete(self, uri: str) -> bool:
        import obstore

        # S3 DeleteObject succeeds whether or not the key existed: stat first so the port's bool is true.
        if self.stat(uri) is None:
            return False
        bucket, key = object_key(uri)
        self._call(uri, bucket, obstore.delete, key)
        return True


class _Exists(Exception):
    pass


def _file_matches(path: Path, dst: ObjectInfo) -> bool:
    """A local file against an existing S3 object: size, then MD5 when the ETag is one (else: not provably same)."""
    if path.stat().st_size != dst.size:
        return False
    md5 = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            md5.update(block)
    return dst.md5 is not None and dst.md5 == base64.b64encode(md5.digest()).decode()


def _put_create(store: Any, key: str, data: bytes | IO[bytes], content_type: str) -> Any:
    import obstore
    import obstore.exceptions as oe

    try:
        # use_multipart=False: a conditional (If-None-Match) put must be one request; S3 takes up to 5 GiB so.
        return obstore.put(
            store, key, data, mode="create", use_multipart=False, attributes={"Content-Type": content_type}
        )
    except (oe.AlreadyExistsError, oe.PreconditionError):
        raise _Exists() from None


def _copy_create(store: Any, src: str, dst: str) -> None:
    import obstore
    import obstore.exceptions as oe

    try:
        obstore.copy(store, src, dst, overwrite=False)
    except (oe.AlreadyExistsError, oe.PreconditionError):
        raise _Exists() from None


def _info(bucket: str, meta: Mapping[str, Any], lifecycle: LifecycleRule) -> ObjectInfo:
    etag = meta.get("e_tag")
    modified = meta.get("last_modified")
    # An overwrite gets a new Last-Modified from the server (clients cannot set it), even with the same ETag.
    fingerprint = (
        f"s3:{(etag or '').strip(chr(34))}:{modified.isoformat() if modified else ''}:{meta.get('version') or ''}"
    )
    return ObjectInfo(
        uri=f"s3://{bucket}/{meta['path']}",
        size=int(meta["size"]),
        md5=etag_md5(etag),
        updated=meta.get("last_modified"),
        created=meta.get("last_modified"),  # S3 objects are immutable: a lifecycle rule counts from Last-Modified
        etag=etag.strip('"') if etag else None,
        version=meta.get("version"),
        fingerprint=fingerprint,
        lifecycle=lifecycle,
    )
