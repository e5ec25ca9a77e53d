"""Storage on Google Cloud Storage (honours STORAGE_EMULATOR_HOST). Copies are server-side rewrites.

The hot requests skip the Blob machinery. Ranged reads (shard headers: validation's hot path) send
`GET {endpoint}/download/storage/v1/b/{bucket}/o/{name}?alt=media` with a Range header on bare http.client
connections (gcs_media.py), with the client's credentials and endpoint: ~0.29 ms of client CPU per request against
fake-gcs-server, where urllib3 took ~0.69 ms and blob.download_as_bytes ~2.7 ms (requests re-reads the proxy
environment on every call, the Blob path builds trace spans, retry wrappers and a resumable-media download
object). Listings, stats and rewrites go through one authorized urllib3 pool per GcsStorage; see bench/RESULTS.md.
"""

from __future__ import annotations

import io
import json
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlcleanup.adapters import gcs_media
from rlcleanup.adapters.gcs_media import MediaConnections, MediaError
from rlcleanup.adapters.local_storage import file_checksums
from rlcleanup.adapters.object_store import RemoteObjects
from rlcleanup.errors import ObjectTooLarge
from rlcleanup.ports import usage
from rlcleanup.ports.lines import bounded_lines
from rlcleanup.ports.storage import ChildPage, ObjectInfo, SourceChangedError, StorageError, WriteOutcome
from rlcleanup.settings import platform
from rlcleanup.uris import split_bucket

if TYPE_CHECKING:
    import google.cloud.storage as storage

_READ_CHUNK = 4 * 1024 * 1024
_UPLOAD_CHUNK = 4 * 1024 * 1024  # a multiple of 256 KiB, as resumable uploads require; ~3 chunks held at most
_RANGE_POOL = 64  # connections kept per host: >= the validation header pool (32), so none is dropped and reopened
_WARMERS: ThreadPoolExecutor | None = None  # opens the lean pool's connections while a listing is in flight
_WARMERS_LOCK = threading.Lock()


def operation_class(method: str, url: str) -> str:
    """The price list's class of one JSON API request (cloud.google.com/storage/pricing#operations-by-class):
    deletes are free; inserts, uploads, patches, rewrites and listings (objects or buckets) are Class A; other
    gets (object or bucket metadata, media downloads) Class B."""
    if method == "DELETE":
        return usage.GCS_FREE
    if method != "GET":
        return usage.GCS_CLASS_A
    path = urllib.parse.urlsplit(url).path.rstrip("/")
    return usage.GCS_CLASS_A if path.endswith(("/o", "/storage/v1/b")) else usage.GCS_CLASS_B


def _count_response(response: Any, *args: Any, **kwargs: Any) -> None:
    usage.count(operation_class(str(response.request.method), str(response.request.url)))


def count_requests(client: storage.Client) -> storage.Client:
    """Count every request the client's session sends (a response hook; each retry is billed, so counted)."""
    session = getattr(client, "_http", None)
    if session is None or not isinstance(getattr(session, "hooks", None), dict):
        return client  # not a google-cloud-storage client (a test double): nothing to count
    hooks = session.hooks.setdefault("response", [])
    if _count_response not in hooks:
        hooks.append(_count_response)
    return client


def _client() -> storage.Client:

    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials

    if platform().storage_emulator_host:
        project = platform().project or "test-project"
        client = storage.Client(project=project, credentials=AnonymousCredentials())
    else:
        client = storage.Client()
    return count_requests(with_pool(client))


def with_pool(client: storage.Client, size: int = _RANGE_POOL) -> storage.Client:
    """requests keeps 10 connections per host by default: concurrent deliveries in one instance, each copying with
    a pool of COPY_WORKERS, would open and discard connections ("Connection pool is full") instead of reusing them."""
    import requests

    adapter = requests.adapters.HTTPAdapter(pool_connections=size, pool_maxsize=size)
    for scheme in ("http://", "https://"):
        client._http.mount(scheme, adapter)
    return client


def _info(blob: Any) -> ObjectInfo:
    return ObjectInfo(
        uri=f"gs://{blob.bucket.name}/{blob.name}",
        size=int(blob.size or 0),
        crc32c=blob.crc32c,
        md5=blob.md5_hash,
        updated=blob.updated,
        generation=blob.generation,
        fingerprint=f"gen:{blob.generation}" if blob.generation is not None else None,
    )


class _RangeReader:
    """The hot requests without the Blob path: ranged media GETs on bare http.client connections (gcs_media.py),
    listings, copy's metadata GETs and rewrites through one pooled, authorized urllib3 pool (thread-safe)."""

    def __init__(self, client: storage.Client) -> None:
        import urllib3
        from google.auth.transport.urllib3 import AuthorizedHttp
        from google.auth.transport.urllib3 import Request as AuthRequest

        self.endpoint = str(client.api_endpoint).rstrip("/")
        retries = urllib3.Retry(
            total=gcs_media.RETRIES,  # one retry policy and one pair of timeouts for both paths
            backoff_factor=gcs_media.BACKOFF_FACTOR,
            status_forcelist=gcs_media.RETRY_STATUSES,
            allowed_methods={"GET"},
            raise_on_status=False,
        )
        # A rewrite is retried only with a precondition (ifGenerationMatch=0): a repeat of one that landed gets
        # 412, and copy_if_absent then compares the two objects (google-cloud-storage retries the same way).
        self._post_retries = retries.new(allowed_methods={"GET", "POST"})
        pool = urllib3.PoolManager(
            maxsize=_RANGE_POOL,
            retries=retries,
            timeout=urllib3.Timeout(connect=gcs_media.CONNECT_TIMEOUT, read=gcs_media.READ_TIMEOUT),
        )
        self._http = AuthorizedHttp(client._credentials, http=pool)
        # Ranged GETs, the header round's many small requests, skip urllib3 (gcs_media.py says why).
        self.media = MediaConnections(self.endpoint, client._credentials, AuthRequest(pool), keep=_RANGE_POOL)

    def warm(self, n: int) -> None:
        """Have up to `n` connections for ranged reads open (TCP, and TLS on real GCS) without waiting for them:
        the connects run in the background, so a caller that is about to list and then read n objects at once
        pays them during the listing's round trip instead of in front of the first round of reads. Connections
        already idle are counted; a connect that fails only leaves its slot empty (the read then opens its own
        connection, with the usual timeouts and retries)."""
        self.media.warm(n, _warmers().submit)

    def read(self, bucket: str, key: str, start: int, length: int) -> bytes:
        """Bytes [start, start+length); b"" past the end; FileNotFoundError when there is no such object."""
        from google.api_core.exceptions import from_http_status

        quoted = urllib.parse.quote(key, safe="~")
        path = f"/download/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o/{quoted}?alt=media"
        try:
            resp = self.media.get(path, start, start + length - 1)
        except MediaError as exc:  # connection refused/reset/timed out after the retries
            raise StorageError(f"GET gs://{bucket}/{key} bytes {start}+{length}: {exc}") from exc
        status, body = resp.status, resp.body
        if status == 206:
            first = _content_range_start(resp.content_range)
            if first is not None and first != start:
                raise StorageError(f"gs://{bucket}/{key}: asked for bytes from {start}, got them from {first}")
            return body
        if status == 200:  # the Range was ignored (e.g. decompressive transcoding): keep our slice only
            return body[start:]
        if status == 416:  # start is at or past the end of the object
            return b""
        if status == 404:
            raise FileNotFoundError(f"gs://{bucket}/{key}")
        raise from_http_status(status, f"GET {self.endpoint}{path}: {body[:300]!r}")

    def _json(self, method: str, path: str, query: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(status, decoded body) of one JSON API call; 404 and 412 are returned, other errors raised as
        google-cloud-storage would (from_http_status), connection failures as StorageError."""
        import urllib3
        from google.api_core.exceptions import from_http_status

        url = f"{self.endpoint}/storage/v1{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        body, headers = (b"{}", {"Content-Type": "application/json"}) if method == "POST" else (None, None)
        retries = self._post_retries if method == "POST" else None
        usage.count(operation_class(method, url))
        try:
            resp = self._http.urlopen(method, url, body=body, headers=headers, retries=retries)
        except urllib3.exceptions.HTTPError as exc:
            raise StorageError(f"{method} {url}: {exc}") from exc
        status = int(resp.status)
        if status in (404, 412):
            return status, {}
        if status >= 300:
            raise from_http_status(status, f"{method} {url}: {resp.data[:300]!r}")
        return status, json.loads(resp.data)

    def stat(self, bucket: str, key: str) -> ObjectInfo | None:
        status, meta = self._json("GET", _object_path(bucket, key), {})
        return None if status == 404 else _info_from_json(bucket, meta)

    def list(self, bucket: str, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object under `prefix` (after the name `start_after`), a page (up to 1,000) per request, only the
        fields ObjectInfo keeps. The same JSON API call as list_blobs, without the Blob objects: validation's
        listing is on its critical path (one listing, then one round of header reads)."""
        from google.api_core.exceptions import from_http_status

        query = {"prefix": prefix, "fields": "items(name,size,crc32c,md5Hash,updated,generation),nextPageToken"}
        if start_after is not None:
            query["startOffset"] = start_after  # inclusive: the name itself is skipped below
        path = f"/b/{urllib.parse.quote(bucket, safe='')}/o"
        while True:
            status, page = self._json("GET", path, query)
            if status != 200:  # 404: no such bucket, as list_blobs raises it
                raise from_http_status(status, f"list gs://{bucket}/{prefix}")
            for meta in page.get("items", ()):
                name = str(meta["name"])
                if not name.endswith("/") and name != start_after:  # skip folder placeholders
                    yield _info_from_json(bucket, meta)
            token = page.get("nextPageToken")
            if not token:
                return
            query["pageToken"] = token

    def rewrite(self, src: tuple[str, str], dst: tuple[str, str], pins: dict[str, Any]) -> int:
        """Server-side copy, following rewrite tokens until done (GCS returns one per ~1 GiB, or per call across
        locations and storage classes). The HTTP status: 200 done, 404 no source (or bucket), 412 a precondition
        failed. Bytes never pass through this process."""
        path = f"{_object_path(*src)}/rewriteTo{_object_path(*dst)}"
        query = dict(pins)
        while True:
            status, resp = self._json("POST", path, query)
            if status != 200 or resp.get("done", True):
                return status
            query["rewriteToken"] = resp["rewriteToken"]


def _warmers() -> ThreadPoolExecutor:
    global _WARMERS
    with _WARMERS_LOCK:
        if _WARMERS is None:
            _WARMERS = ThreadPoolExecutor(max_workers=_RANGE_POOL, thread_name_prefix="gcs-warm")
        return _WARMERS


def _object_path(bucket: str, key: str) -> str:
    return f"/b/{urllib.parse.quote(bucket, safe='')}/o/{urllib.parse.quote(key, safe='')}"


def _info_from_json(bucket: str, meta: dict[str, Any]) -> ObjectInfo:
    """ObjectInfo from an object resource, exactly as _info reads the same fields off a Blob."""
    from google.cloud._helpers import _rfc3339_nanos_to_datetime

    generation = int(meta["generation"]) if meta.get("generation") is not None else None
    updated = meta.get("updated")
    return ObjectInfo(
        uri=f"gs://{bucket}/{meta['name']}",
        size=int(meta.get("size") or 0),
        crc32c=meta.get("crc32c"),
        md5=meta.get("md5Hash"),
        updated=_rfc3339_nanos_to_datetime(updated) if updated is not None else None,
        generation=generation,
        fingerprint=f"gen:{generation}" if generation is not None else None,
    )


def _content_range_start(value: str) -> int | None:
    """The first byte a Content-Range header gives ("bytes 8-9/10" -> 8); None when absent or unparsable."""
    head = value.removeprefix("bytes ").split("-", 1)[0]
    return int(head) if head.isascii() and head.isdigit() else None


def _proxied(endpoint: str) -> bool:
    """True when the environment routes this endpoint through an HTTP proxy (only requests honours that)."""
    parts = urllib.parse.urlsplit(endpoint)
    return bool(urllib.request.getproxies().get(parts.scheme)) and not urllib.request.proxy_bypass(parts.hostname or "")


class GcsStorage(RemoteObjects):
    """Implements ports.storage.VersionedStorage (generations) and StreamingStorage, ListsChildren, ListsAfter."""

    def __init__(self, client: storage.Client | None = None, *, lean_reads: bool = True) -> None:
        self._client_obj = count_requests(client) if client is not None else None
        self._lean_reads = lean_reads  # False: ranged reads through blob.download_as_bytes (the bench compares)
        self._ranges: _RangeReader | None = None
        self._ranges_lock = threading.Lock()

    @property
    def client(self) -> storage.Client:
        if self._client_obj is None:  # lazy: keeps function cold starts cheap
            self._client_obj = _client()
        return self._client_obj

    def _blob(self, uri: str) -> Any:
        bucket, key = split_bucket(uri)
        return self.client.bucket(bucket).blob(key)

    def stat(self, uri: str) -> ObjectInfo | None:
        bucket, key = split_bucket(uri)
        blob = self.client.bucket(bucket).get_blob(key)
        return _info(blob) if blob is not None else None

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
                yield _info(blob)

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
        objects = [_info(b) for b in page if not b.name.endswith("/")]
        prefixes = sorted(f"gs://{bucket}/{p.rstrip('/')}" for p in page.prefixes)
        return ChildPage(prefixes, objects, blobs.next_page_token)

    def _range_reader(self) -> _RangeReader | None:
        if not self._lean_reads:
            return None
        with self._ranges_lock:
            if self._ranges is None:
                if _proxied(str(self.client.api_endpoint)):
                    self._lean_reads = False
                    return None
                self._ranges = _RangeReader(self.client)
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

        Two requests for a new object (stat the destination, rewrite with ifGenerationMatch=0); the source is
        only stat'ed when the destination exists (identical or conflict?) or the rewrite finds no source. The
        destination stat is what keeps emulators write-once: they do not enforce copy preconditions. Both go
        through the lean pool (capture's hot path: the Blob path cost ~3x the client CPU per copy).
        """
        lean = self._range_reader()
        if lean is None:
            return self._copy_blob(src_uri, dst_uri, source_generation)
        src, dst_name = split_bucket(src_uri), split_bucket(dst_uri)
        dst = lean.stat(*dst_name)
        if dst is not None:
            return self._compare(src_uri, dst)
        pins: dict[str, Any] = {"ifGenerationMatch": 0}
        if source_generation is not None:
            pins["ifSourceGenerationMatch"] = source_generation
        status = lean.rewrite(src, dst_name, pins)
        if status == 412:
            return self._precondition_failed(src_uri, dst_uri, source_generation)
        if status == 404:
            if self.stat(src_uri) is None:
                raise FileNotFoundError(src_uri)
            raise StorageError(f"copy {src_uri} -> {dst_uri}: 404 (no destination bucket?)")
        return WriteOutcome.created

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
        """copy_if_absent through google-cloud-storage (an HTTP proxy in the environment: only requests honours it)."""
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
