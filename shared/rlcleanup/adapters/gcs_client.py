"""Google Cloud Storage clients: the google-cloud-storage client (honours STORAGE_EMULATOR_HOST, every request
counted by price class), and the lean requests adapters/gcs_storage.py sends on its hot paths.

The hot requests skip the Blob machinery. Ranged reads (shard headers: validation's hot path) send
`GET {endpoint}/download/storage/v1/b/{bucket}/o/{name}?alt=media` with a Range header on bare http.client
connections (gcs_media.py), with the client's credentials and endpoint: ~0.29 ms of client CPU per request against
fake-gcs-server, where urllib3 took ~0.69 ms and blob.download_as_bytes ~2.7 ms (requests re-reads the proxy
environment on every call, the Blob path builds trace spans, retry wrappers and a resumable-media download
object). Listings, stats and rewrites go through one authorized urllib3 pool per GcsStorage; see bench/RESULTS.md.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rlcleanup.adapters import gcs_media
from rlcleanup.adapters.gcs_media import MediaConnections, MediaError
from rlcleanup.ports import usage
from rlcleanup.ports.lifecycle import GCS_AGE
from rlcleanup.ports.storage import ObjectInfo, StorageError
from rlcleanup.settings import platform

if TYPE_CHECKING:
    import google.cloud.storage as storage

RANGE_POOL = 64  # connections kept per host: >= the validation header pool (32), so none is dropped and reopened
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


def default_client() -> storage.Client:

    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials

    if platform().storage_emulator_host:
        project = platform().project or "test-project"
        client = storage.Client(project=project, credentials=AnonymousCredentials())
    else:
        client = storage.Client()
    return count_requests(with_pool(client))


def with_pool(client: storage.Client, size: int = RANGE_POOL) -> storage.Client:
    """requests keeps 10 connections per host by default: concurrent deliveries in one instance, each copying with
    a pool of COPY_WORKERS, would open and discard connections ("Connection pool is full") instead of reusing them."""
    import requests

    adapter = requests.adapters.HTTPAdapter(pool_connections=size, pool_maxsize=size)
    for scheme in ("http://", "https://"):
        client._http.mount(scheme, adapter)
    return client


def info_from_blob(blob: Any) -> ObjectInfo:
    return ObjectInfo(
        uri=f"gs://{blob.bucket.name}/{blob.name}",
        size=int(blob.size or 0),
        crc32c=blob.crc32c,
        md5=blob.md5_hash,
        updated=blob.updated,
        created=blob.time_created,
        generation=blob.generation,
        fingerprint=f"gen:{blob.generation}" if blob.generation is not None else None,
        lifecycle=GCS_AGE,
    )


class RangeReader:
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
            maxsize=RANGE_POOL,
            retries=retries,
            timeout=urllib3.Timeout(connect=gcs_media.CONNECT_TIMEOUT, read=gcs_media.READ_TIMEOUT),
        )
        self._http = AuthorizedHttp(client._credentials, http=pool)
        # Ranged GETs, the header round's many small requests, skip urllib3 (gcs_media.py says why).
        self.media = MediaConnections(self.endpoint, client._credentials, AuthRequest(pool), keep=RANGE_POOL)

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
        if status in (404, 412) or (status in (400, 410) and "rewriteToken" in query):
            return status, {}
        if status >= 300:
            raise from_http_status(status, f"{method} {url}: {resp.data[:300]!r}")
        return status, json.loads(resp.data)

    def stat(self, bucket: str, key: str) -> ObjectInfo | None:
        status, meta = self._json("GET", _object_path(bucket, key), {})
        return None if status == 404 else info_from_json(bucket, meta)

    def list(self, bucket: str, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object under `prefix` (after the name `start_after`), a page (up to 1,000) per request, only the
        fields ObjectInfo keeps. The same JSON API call as list_blobs, without the Blob objects: validation's
        listing is on its critical path (one listing, then one round of header reads)."""
        from google.api_core.exceptions import from_http_status

        query = {
            "prefix": prefix,
            "fields": "items(name,size,crc32c,md5Hash,updated,timeCreated,generation),nextPageToken",
        }
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
                    yield info_from_json(bucket, meta)
            token = page.get("nextPageToken")
            if not token:
                return
            query["pageToken"] = token

    def rewrite(
        self,
        src: tuple[str, str],
        dst: tuple[str, str],
        pins: dict[str, Any],
        *,
        token: str | None = None,
        on_token: Callable[[str], None] | None = None,
    ) -> int:
        """Server-side copy, following rewrite tokens until done: GCS answers a rewrite across locations or storage
        classes (or of a large object) a part per call, at most `maxBytesRewrittenPerCall` when `pins` sends it.
        `token` resumes an interrupted rewrite where it stopped; `on_token` records each token before the next
        call, so a process killed between calls is resumed from its last token, never from zero. The HTTP status:
        200 done, 404 no source (or bucket), 412 a precondition failed, 400/410 a token the server refuses. Bytes
        never pass through this process."""
        path = f"{_object_path(*src)}/rewriteTo{_object_path(*dst)}"
        query = dict(pins)
        if token is not None:
            query["rewriteToken"] = token
        while True:
            status, resp = self._json("POST", path, query)
            if status != 200 or resp.get("done", True):
                return status
            query["rewriteToken"] = resp["rewriteToken"]
            if on_token is not None:
                on_token(str(resp["rewriteToken"]))


def _warmers() -> ThreadPoolExecutor:
    global _WARMERS
    with _WARMERS_LOCK:
        if _WARMERS is None:
            _WARMERS = ThreadPoolExecutor(max_workers=RANGE_POOL, thread_name_prefix="gcs-warm")
        return _WARMERS


def _object_path(bucket: str, key: str) -> str:
    return f"/b/{urllib.parse.quote(bucket, safe='')}/o/{urllib.parse.quote(key, safe='')}"


def info_from_json(bucket: str, meta: dict[str, Any]) -> ObjectInfo:
    """ObjectInfo from an object resource, exactly as info_from_blob reads the same fields off a Blob."""
    from google.cloud._helpers import _rfc3339_nanos_to_datetime

    generation = int(meta["generation"]) if meta.get("generation") is not None else None
    updated = meta.get("updated")
    created = meta.get("timeCreated")
    return ObjectInfo(
        uri=f"gs://{bucket}/{meta['name']}",
        size=int(meta.get("size") or 0),
        crc32c=meta.get("crc32c"),
        md5=meta.get("md5Hash"),
        updated=_rfc3339_nanos_to_datetime(updated) if updated is not None else None,
        created=_rfc3339_nanos_to_datetime(created) if created is not None else None,
        generation=generation,
        fingerprint=f"gen:{generation}" if generation is not None else None,
        lifecycle=GCS_AGE,
    )


def _content_range_start(value: str) -> int | None:
    """The first byte a Content-Range header gives ("bytes 8-9/10" -> 8); None when absent or unparsable."""
    head = value.removeprefix("bytes ").split("-", 1)[0]
    return int(head) if head.isascii() and head.isdigit() else None


def proxied(endpoint: str) -> bool:
    """True when the environment routes this endpoint through an HTTP proxy (only requests honours that)."""
    parts = urllib.parse.urlsplit(endpoint)
    return bool(urllib.request.getproxies().get(parts.scheme)) and not urllib.request.proxy_bypass(parts.hostname or "")
