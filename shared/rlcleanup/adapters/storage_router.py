"""One Storage for every registered scheme, so steps accept any run or destination URI the registry knows.

Each call is routed by the URI's scheme through the storage registry; an unregistered scheme raises
UnknownSchemeError (never a local path). Copies between two backends stream through this process. What a backend
can do is read off its registered capabilities alone: the registry checked at registration that its adapter
implements exactly the protocols those flags name (and `__init__` checks a ready-made adapter the same way), so
the casts below are what the flags promise.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from rlcleanup.adapters.storage_registry import BUILTIN, StorageBackend, StorageRegistry
from rlcleanup.ports.storage import (
    AnchorsLocalPaths,
    ChildPage,
    EtagPinnedStorage,
    IncompleteUpload,
    ListsAfter,
    ListsChildren,
    ListsInAnyOrder,
    ListsIncompleteUploads,
    NoObjectVersionsError,
    ObjectInfo,
    SchemeFacts,
    Storage,
    StorageCapabilities,
    StreamingStorage,
    VersionedStorage,
    VisibilityReading,
    WriteOutcome,
    list_in_passes,
)
from rlcleanup.uris import LOCAL_SCHEME


class RoutingStorage:
    """Implements ports.storage.SchemeAwareStorage."""

    def __init__(self, backends: Mapping[str, Storage] | None = None, *, registry: StorageRegistry = BUILTIN) -> None:
        """`backends`: adapters already built, by scheme (tests pass an emulator-bound one); each scheme must be
        registered and each must implement what its registration declares. The others are made on first use."""
        self.registry = registry
        self._made: dict[str, Storage] = {}
        for name, storage in (backends or {}).items():
            self.registry.check_adapter(name, storage)  # an unregistered scheme, or an adapter short of its flags
            self._made[name] = storage

    def backend(self, scheme: str) -> Storage:
        """This router's adapter for a registered scheme (made on first use)."""
        entry = self.registry.for_uri(f"{scheme}://")
        if entry.scheme not in self._made:
            self._made[entry.scheme] = entry.new()
        return self._made[entry.scheme]

    @contextmanager
    def anchored(self, roots: Sequence[str]) -> Iterator[RoutingStorage]:
        """ports.storage.AnchorsLocalPaths: this router, its local backend held under `roots` for the block
        (LocalStorage.anchored; object stores have no links)."""
        if not self.registry.for_uri(LOCAL_SCHEME + "://").capabilities.local_paths:
            yield self
            return
        with cast(AnchorsLocalPaths, self.backend(LOCAL_SCHEME)).anchored(roots):
            yield self

    def _for(self, uri: str) -> Storage:
        return self.backend(self.registry.for_uri(uri).scheme)

    def _entry(self, uri: str) -> tuple[StorageBackend, Storage]:
        entry = self.registry.for_uri(uri)
        return entry, self.backend(entry.scheme)

    def capabilities(self, uri: str) -> StorageCapabilities:
        return self.registry.for_uri(uri).capabilities

    def facts(self, uri: str) -> SchemeFacts:
        """ports.storage.SchemeAwareStorage.facts: what the backend serving `uri` declares of its store."""
        return self.registry.for_uri(uri).facts

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
        """Resumed on the server where the backend can; else in passes (ports.storage.list_in_name_order)."""
        entry, backend = self._entry(prefix_uri)
        if entry.capabilities.resumable_listing:
            return cast(ListsAfter, backend).list_after(prefix_uri, start_after)
        unordered = entry.capabilities.unordered_listing
        listing = cast(ListsInAnyOrder, backend).list_any_order if unordered else backend.list
        return list_in_passes(listing, prefix_uri, start_after)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        return self._for(uri).read_range(uri, start, length)

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        return self._for(uri).read_bytes(uri, max_bytes)

    def iter_lines(self, uri: str) -> Iterator[str]:
        return self._for(uri).iter_lines(uri)

    def list_children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> ChildPage:
        """A page of the prefix's immediate children, where the backend has a children listing; else
        NotImplementedError (the sweep refuses such a root as `sweep_unsupported_storage` rather than list it
        whole: ports.storage.children, which may, reads `children_listing` and lists whole itself)."""
        entry, backend = self._entry(prefix_uri)
        if not entry.capabilities.children_listing:
            raise NotImplementedError(f"{prefix_uri}: this storage cannot list a prefix's children page by page")
        return cast(ListsChildren, backend).list_children(prefix_uri, page_token, page_size)

    def read_generation(self, uri: str, generation: int | None, max_bytes: int = 1024 * 1024) -> bytes | None:
        """An object at a generation (GCS); a backend without object versions has one version, so generation is
        ignored there."""
        entry, backend = self._entry(uri)
        if entry.capabilities.object_version:
            return cast(VersionedStorage, backend).read_generation(uri, generation, max_bytes)
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
        if src_entry.capabilities.streaming_copy and dst_entry.capabilities.streaming_copy:
            # Cross-backend (a local run preserved to GCS, an S3 run to GCS): streamed in bounded chunks.
            reader, writer = cast(StreamingStorage, src), cast(StreamingStorage, dst)
            path = reader.local_file(src_uri)
            if path is not None:
                return writer.upload_file_if_absent(path, dst_uri)
            return writer.fill_if_absent(dst_uri, lambda tmp: reader.download_to(src_uri, tmp))
        data = src.read_bytes(src_uri, max_bytes=1 << 62)  # a backend without streaming: the whole object
        return dst.write_if_absent(dst_uri, data)

    def incomplete_uploads(self, prefix_uri: str) -> builtins.list[IncompleteUpload]:
        """The backend's incomplete multipart uploads under the prefix; none where it has no such thing."""
        entry, backend = self._entry(prefix_uri)
        if not entry.capabilities.multipart_uploads:
            return []
        return cast(ListsIncompleteUploads, backend).incomplete_uploads(prefix_uri)

    def abort_incomplete_upload(self, key_uri: str, upload_id: str) -> bool:
        entry, backend = self._entry(key_uri)
        if not entry.capabilities.multipart_uploads:
            return False
        return cast(ListsIncompleteUploads, backend).abort_incomplete_upload(key_uri, upload_id)

    def delete(self, uri: str) -> bool:
        return self._for(uri).delete(uri)

    def versioned(self, uri: str) -> VersionedStorage:
        """ports.storage.SchemeAwareStorage.versioned: the backend of `uri` when its scheme is registered with
        `object_version` (its adapter then implements the versioned port); else NoObjectVersionsError."""
        entry, backend = self._entry(uri)
        if not entry.capabilities.object_version:
            raise NoObjectVersionsError(uri)
        return cast(VersionedStorage, backend)

    def etag_pinned(self, src_uri: str, dst_uri: str) -> EtagPinnedStorage | None:
        """ports.storage.RoutesEtagPins: the one backend of both URIs when its scheme is registered with
        `etag_pinned_copy` and its server can copy between the two; else None."""
        src_entry, dst_entry = self.registry.for_uri(src_uri), self.registry.for_uri(dst_uri)
        if src_entry.scheme != dst_entry.scheme or not src_entry.capabilities.etag_pinned_copy:
            return None
        backend = cast(EtagPinnedStorage, self.backend(src_entry.scheme))
        return backend if backend.server_side_between(src_uri, dst_uri) else None

    def local_file(self, uri: str) -> Path | None:
        """The object as a local file when its backend keeps it as one (copies then read it in place)."""
        entry, backend = self._entry(uri)
        return cast(StreamingStorage, backend).local_file(uri) if entry.capabilities.streaming_copy else None

    def upload_file_if_absent(self, path: Path, dst_uri: str) -> WriteOutcome:
        """A local file to any backend, write-once (streamed where the backend can)."""
        entry, backend = self._entry(dst_uri)
        if entry.capabilities.streaming_copy:
            return cast(StreamingStorage, backend).upload_file_if_absent(path, dst_uri)
        return backend.write_if_absent(dst_uri, path.read_bytes())  # a backend without streaming: whole
