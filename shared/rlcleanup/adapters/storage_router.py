"""One Storage that routes by scheme, so every step accepts local paths and gs:// URIs alike."""

from __future__ import annotations

from collections.abc import Iterator

from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.ports.storage import ObjectInfo, Storage, WriteOutcome
from rlcleanup.uris import is_gcs


class RoutingStorage:
    def __init__(self, local: Storage | None = None, gcs: Storage | None = None) -> None:
        self.local: Storage = local or LocalStorage()
        self._gcs = gcs

    @property
    def gcs(self) -> Storage:
        if self._gcs is None:
            self._gcs = GcsStorage()
        return self._gcs

    def _for(self, uri: str) -> Storage:
        return self.gcs if is_gcs(uri) else self.local

    def stat(self, uri: str) -> ObjectInfo | None:
        return self._for(uri).stat(uri)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        return self._for(prefix_uri).list(prefix_uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        return self._for(uri).read_range(uri, start, length)

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        return self._for(uri).read_bytes(uri, max_bytes)

    def iter_lines(self, uri: str) -> Iterator[str]:
        return self._for(uri).iter_lines(uri)

    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> WriteOutcome:
        return self._for(uri).write_if_absent(uri, data, content_type)

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        if is_gcs(src_uri) == is_gcs(dst_uri):
            return self._for(src_uri).copy_if_absent(src_uri, dst_uri)
        # Cross-backend (a local run preserved to GCS, or back): streamed through this process in bounded chunks.
        gcs, local = self.gcs, self.local
        if isinstance(gcs, GcsStorage) and isinstance(local, LocalStorage):
            if is_gcs(dst_uri):
                return gcs.upload_file_if_absent(local.checked_path(src_uri), dst_uri)
            return local.fill_if_absent(dst_uri, lambda tmp: gcs.download_to(src_uri, tmp))
        data = self._for(src_uri).read_bytes(src_uri, max_bytes=1 << 62)  # other adapters (tests): whole object
        return self._for(dst_uri).write_if_absent(dst_uri, data)

    def delete(self, uri: str) -> bool:
        return self._for(uri).delete(uri)
