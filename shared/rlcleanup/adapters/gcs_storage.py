"""Storage on Google Cloud Storage (honours STORAGE_EMULATOR_HOST). Copies are server-side rewrites."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rlcleanup.adapters.lines import bounded_lines
from rlcleanup.ports.storage import ObjectInfo, StorageError, WriteOutcome
from rlcleanup.uris import split_gcs

if TYPE_CHECKING:
    import google.cloud.storage as storage

_READ_CHUNK = 4 * 1024 * 1024


def _client() -> storage.Client:
    import os

    import google.cloud.storage as storage
    from google.auth.credentials import AnonymousCredentials

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        project = os.environ.get("GOOGLE_CLOUD_PROJECT", "test-project")
        return storage.Client(project=project, credentials=AnonymousCredentials())
    return storage.Client()


def _info(blob: Any) -> ObjectInfo:
    return ObjectInfo(
        uri=f"gs://{blob.bucket.name}/{blob.name}",
        size=int(blob.size or 0),
        crc32c=blob.crc32c,
        md5=blob.md5_hash,
        updated=blob.updated,
        generation=blob.generation,
    )


class GcsStorage:
    def __init__(self, client: storage.Client | None = None) -> None:
        self._client_obj = client

    @property
    def client(self) -> storage.Client:
        if self._client_obj is None:  # lazy: keeps function cold starts cheap
            self._client_obj = _client()
        return self._client_obj

    def _blob(self, uri: str) -> Any:
        bucket, key = split_gcs(uri)
        return self.client.bucket(bucket).blob(key)

    def stat(self, uri: str) -> ObjectInfo | None:
        bucket, key = split_gcs(uri)
        blob = self.client.bucket(bucket).get_blob(key)
        return _info(blob) if blob is not None else None

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        bucket, key = split_gcs(prefix_uri.rstrip("/") + "/")
        for blob in self.client.list_blobs(bucket, prefix=key):
            if not blob.name.endswith("/"):  # skip folder placeholders
                yield _info(blob)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        from google.api_core.exceptions import RequestRangeNotSatisfiable

        try:
            data: bytes = self._blob(uri).download_as_bytes(start=start, end=start + length - 1, checksum=None)
        except RequestRangeNotSatisfiable:
            return b""
        return data

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        info = self.stat(uri)
        if info is None:
            raise FileNotFoundError(uri)
        if info.size > max_bytes:
            raise ValueError(f"{uri} is larger than {max_bytes} bytes")
        data: bytes = self._blob(uri).download_as_bytes()
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
        """Server-side rewrite (token loop for large objects); no byte passes through this process.

        Two requests for a new object (stat the destination, rewrite with if_generation_match=0); the source is
        only stat'ed when the destination exists (identical or conflict?) or the rewrite finds no source. The
        destination stat is what keeps emulators write-once: they do not enforce copy preconditions.
        """
        from google.api_core.exceptions import NotFound, PreconditionFailed

        dst = self.stat(dst_uri)
        if dst is not None:
            return self._compare(src_uri, dst)
        src_blob, dst_blob = self._blob(src_uri), self._blob(dst_uri)
        try:
            token, _, _ = dst_blob.rewrite(src_blob, if_generation_match=0)
            while token is not None:
                token, _, _ = dst_blob.rewrite(src_blob, token=token, if_generation_match=0)
        except PreconditionFailed:  # someone created it meanwhile (real GCS enforces the precondition)
            dst = self.stat(dst_uri)
            if dst is None:
                raise StorageError(f"copy {src_uri} -> {dst_uri}: precondition failed but no object") from None
            return self._compare(src_uri, dst)
        except NotFound as exc:
            if self.stat(src_uri) is None:
                raise FileNotFoundError(src_uri) from exc
            raise StorageError(f"copy {src_uri} -> {dst_uri}: {exc}") from exc
        return WriteOutcome.created

    def _compare(self, src_uri: str, dst: ObjectInfo) -> WriteOutcome:
        src = self.stat(src_uri)
        if src is None:
            raise FileNotFoundError(src_uri)
        return WriteOutcome.identical if _same(src, dst) else WriteOutcome.conflict

    def delete(self, uri: str) -> bool:
        from google.api_core.exceptions import NotFound

        try:
            self._blob(uri).delete()
            return True
        except NotFound:
            return False


def _same(a: ObjectInfo, b: ObjectInfo) -> bool:
    if a.size != b.size:
        return False
    if a.crc32c and b.crc32c:
        return a.crc32c == b.crc32c
    return a.md5 is not None and a.md5 == b.md5
