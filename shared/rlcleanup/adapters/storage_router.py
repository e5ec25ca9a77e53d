"""One Storage for every registered scheme, so steps accept any run or destination URI the registry knows.

Each call is routed by the URI's scheme through the storage registry; an unregistered scheme raises
UnknownSchemeError (never a local path). Copies between two backends stream through this process.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from rlcleanup.adapters.storage_registry import BUILTIN, StorageRegistry
from rlcleanup.ports.storage import (
    AnchorsLocalPaths,
    ChildPage,
    EtagPinnedStorage,
    IncompleteUpload,
    ListsIncompleteUploads,
    NoObjectVersionsError,
    ObjectInfo,
    Storage,
    StorageCapabilities,
    StreamingStorage,
    VersionedStorage,
    VisibilityReading,
    WriteOutcome,
    list_in_name_order,
)
from rlcleanup.uris import LOCAL_SCHEME


class RoutingStorage:
    """Implements ports.storage.SchemeAwareStorage."""

    def __init__(self, backends: Mapping[str, Storage] | None = None, *, registry: StorageRegistry = BUILTIN) -> None:
        """`backends`: adapters already built, by scheme (tests pass an emulator-bound one); each scheme must be
        registered. The others are made on first use."""
        self.registry = registry
        self._made: dict[str, Storage] = {}
        for name, storage in (backends or {}).items():
            self.registry.for_uri(f"{name}://")  # fail closed on a scheme nobody registered
            self._made[name] = storage

    def backend(self, scheme: str) -> Storage:
        """This router's adapter for a registered scheme (made on first use)."""
        entry = self.registry.for_uri(f"{scheme}://")
        if entry.scheme not in self._made:
            self._made[entry.scheme] = entry.make()
        return self._made[entry.scheme]

    @contextmanager
    def anchored(self, roots: Sequence[str]) -> Iterator[RoutingStorage]:
        """ports.storage.AnchorsLocalPaths: this router, its local backend held under `roots` for the block
        (LocalStorage.anchored; object stores have no links)."""
        local = self.backend(LOCAL_SCHEME)
        if not isinstance(local, AnchorsLocalPaths):
            yield self
            return
        with local.anchored(roots):
            yield self

    def _for(self, uri: str) -> Storage:
        return self.backend(self.registry.for_uri(uri).scheme)

    def capabilities(self, uri: str) -> StorageCapabilities:
        return self.registry.for_uri(uri).capabilities

    def read_visibility(self, uri: str) -> VisibilityReading:
        entry = self.registry.for_uri(uri)
        if entry.visibility is None:
            return VisibilityReading(None, f"{entry.scheme} storage cannot read back who can read {uri}")
        return entry.visibility(self.backend(entry.scheme), uri)

    def stat(self, uri: str) -> ObjectInfo | None:
        return self._for(uri).stat(uri)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        return self._for(prefix_uri).list(prefix_uri)

    def list_after(self, prefix_uri: str, start_after: str | None) -> Iterator[ObjectInfo]:
        return list_in_name_order(self._for(prefix_uri), prefix_uri, start_after)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        return self._for(uri).read_range(uri, start, length)

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        return self._for(uri).read_bytes(uri, max_bytes)

    def iter_lines(self, uri: str) -> Iterator[str]:
        return self._for(uri).iter_lines(uri)

    def list_children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> ChildPage:
        backend = self._for(prefix_uri)
        lister = getattr(backend, "list_children", None)
        if lister is None:
            raise NotImplementedError(f"{prefix_uri}: this storage cannot list a prefix's children page by page")
        page: ChildPage = lister(prefix_uri, page_token, page_size)
        return page

    def read_generation(self, uri: str, generation: int | None, max_bytes: int = 1024 * 1024) -> bytes | None:
        """An object at a generation (GCS); a local file has one version, so generation is ignored there."""
        backend = self._for(uri)
        reader = getattr(backend, "read_generation", None)
        if reader is not None:
            result: bytes | None = reader(uri, generation, max_bytes)
            return result
        if backend.stat(uri) is None:
            return None
        return backend.read_range(uri, 0, max_bytes)

    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> WriteOutcome:
        return self._for(uri).write_if_absent(uri, data, content_type)

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        """Server-side within one backend; across two, streamed (or whole, for test doubles). The authority's
        version-pinned copies go through `versioned` instead (authority/pinning.py)."""
        src_entry, dst_entry = self.registry.for_uri(src_uri), self.registry.for_uri(dst_uri)
        src, dst = self.backend(src_entry.scheme), self.backend(dst_entry.scheme)
        if src_entry.scheme == dst_entry.scheme:
            return src.copy_if_absent(src_uri, dst_uri)
        streaming = src_entry.capabilities.streaming_copy and dst_entry.capabilities.streaming_copy
        if streaming and isinstance(src, StreamingStorage) and isinstance(dst, StreamingStorage):
            # Cross-backend (a local run preserved to GCS, an S3 run to GCS): streamed in bounded chunks.
            path = src.local_file(src_uri)
            if path is not None:
                return dst.upload_file_if_absent(path, dst_uri)
            return dst.fill_if_absent(dst_uri, lambda tmp: src.download_to(src_uri, tmp))
        data = src.read_bytes(src_uri, max_bytes=1 << 62)  # test doubles without streaming: the whole object
        return dst.write_if_absent(dst_uri, data)

    def incomplete_uploads(self, prefix_uri: str) -> builtins.list[IncompleteUpload]:
        """The backend's incomplete multipart uploads under the prefix; none where it has no such thing."""
        backend = self._for(prefix_uri)
        return backend.incomplete_uploads(prefix_uri) if isinstance(backend, ListsIncompleteUploads) else []

    def abort_incomplete_upload(self, key_uri: str, upload_id: str) -> bool:
        backend = self._for(key_uri)
        return isinstance(backend, ListsIncompleteUploads) and backend.abort_incomplete_upload(key_uri, upload_id)

    def delete(self, uri: str) -> bool:
        return self._for(uri).delete(uri)

    def versioned(self, uri: str) -> VersionedStorage:
        """ports.storage.SchemeAwareStorage.versioned: the backend of `uri` when its scheme is registered with
        `object_version` and the adapter implements the versioned port; else NoObjectVersionsError."""
        entry = self.registry.for_uri(uri)
        backend = self.backend(entry.scheme)
        if not entry.capabilities.object_version or not isinstance(backend, VersionedStorage):
            raise NoObjectVersionsError(uri)
        return backend

    def etag_pinned(self, src_uri: str, dst_uri: str) -> EtagPinnedStorage | None:
        """ports.storage.RoutesEtagPins: the one backend of both URIs when its scheme is registered with
        `etag_pinned_copy`, the adapter implements it and its server can copy between the two; else None."""
        src_entry, dst_entry = self.registry.for_uri(src_uri), self.registry.for_uri(dst_uri)
        if src_entry.scheme != dst_entry.scheme or not src_entry.capabilities.etag_pinned_copy:
            return None
        backend = self.backend(src_entry.scheme)
        if isinstance(backend, EtagPinnedStorage) and backend.server_side_between(src_uri, dst_uri):
            return backend
        return None

    def local_file(self, uri: str) -> Path | None:
        """The object as a local file when its backend keeps it as one (copies then read it in place)."""
        backend = self._for(uri)
        return backend.local_file(uri) if isinstance(backend, StreamingStorage) else None

    def upload_file_if_absent(self, path: Path, dst_uri: str) -> WriteOutcome:
        """A local file to any backend, write-once (streamed where the backend can)."""
        backend = self._for(dst_uri)
        if isinstance(backend, StreamingStorage):
            return backend.upload_file_if_absent(path, dst_uri)
        return backend.write_if_absent(dst_uri, path.read_bytes())  # test doubles without streaming
