"""Object storage port: what steps may ask of any backend, and the capabilities that differ between backends.

URIs are `<scheme>://...` or bare local paths (scheme `file`); which schemes exist is the storage registry's
business (adapters/storage_registry.py). Steps talk only to this port, to `StorageCapabilities` (what a backend
can do) and to `SchemeFacts` (what policy must know of its store: price, protection, how to fix its visibility),
both declared by the backend where it is registered and reached through `storage.capabilities(uri)` /
`scheme_facts(storage, uri)`; policy never branches on the URI's scheme.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from rlcleanup.errors import PermanentError, TransientError
from rlcleanup.models.vocab import Visibility
from rlcleanup.ports.lifecycle import LifecycleRule


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int
    crc32c: str | None = None  # base64 big-endian, as GCS reports it
    md5: str | None = None  # base64, as GCS reports it
    updated: datetime | None = None
    # When the object was created, as the listing says (GCS timeCreated, S3 Last-Modified, local mtime): a bucket
    # lifecycle rule's age counts from it, so an object under `tmp/ttl=<N>d/` dies at created + N days.
    created: datetime | None = None
    generation: int | None = None
    etag: str | None = None  # S3: the ETag as the server gave it (an MD5 only for single-part uploads)
    version: str | None = None  # S3: the object version id, when the bucket is versioned
    # What changes whenever the object's bytes may have changed, as this backend can tell without reading them:
    # GCS the generation; local disk device, inode, size, mtime_ns and ctime_ns (ctime cannot be set back by a
    # user, so an edit followed by `touch -d` still shows); S3 the ETag, Last-Modified and version id. A grant's
    # digest covers it, so a grant authorizes exactly the object versions that were validated (docs/authority.md).
    fingerprint: str | None = None
    # How the backend that listed it dates its lifecycle deletion (ports/lifecycle.py): a fact the backend declares,
    # so expiry is never read off the URI's scheme. None: built by hand (a test, a destination), not listed.
    lifecycle: LifecycleRule | None = None


# (defined here, not in the local adapter: pinned copies in authority/ compare a descriptor's fstat with it)
def stat_fingerprint(st: os.stat_result) -> str:
    """A local file's version without reading it: any write changes size or mtime_ns, and ctime_ns (which no
    unprivileged user can set back) changes on every write, utime, rename or chmod; device + inode name the file."""
    return f"local:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


@dataclass(frozen=True)
class ChildPage:
    """One page of a prefix's immediate children: sub-prefixes ("directories") and the objects directly in it."""

    prefixes: list[str]
    objects: list[ObjectInfo]
    next_token: str | None


class WriteOutcome(StrEnum):
    created = "created"  # the object did not exist and now holds our bytes
    identical = "identical"  # it existed with the same content: a safe replay
    conflict = "conflict"  # it existed with different content: never overwritten


@dataclass(frozen=True)
class StorageCapabilities:
    """What a backend can do beyond the port's minimum; callers branch on these, never on the URI's scheme.

    A capability that brings methods is one flag and one protocol (adapters/storage_registry.py `CAPABILITY_PROTOCOLS`): the registry
    refuses a backend whose declared flags differ from the protocols its adapter implements, at registration, so
    the router dispatches on the flag alone."""

    ranged_read: bool  # read_range is one request for just those bytes (header-only validation relies on it)
    listing: bool  # list(prefix) enumerates objects with sizes
    server_side_copy: bool  # copy_if_absent within the backend moves no byte through this process
    streaming_copy: bool  # StreamingStorage: cross-backend copies in bounded memory
    visibility_readback: bool  # who can read a destination can be read back (the registry entry's reader)
    object_version: bool  # VersionedStorage: a version (GCS generation) usable as a write/delete precondition
    strong_checksum: bool  # every listing reports a content checksum without reading the bytes
    # EtagPinnedStorage: a server-side copy conditioned on the source's ETag (S3 CopySourceIfMatch, and
    # x-amz-copy-source-if-match on every UploadPartCopy): a grant's pinned copy stays server-side without versions.
    etag_pinned_copy: bool = False
    children_listing: bool = False  # ListsChildren: a prefix's immediate children page by page (a delimiter)
    resumable_listing: bool = False  # ListsAfter: a listing resumed after a name on the server
    unordered_listing: bool = False  # ListsInAnyOrder: the server's own order, streamed (its `list` sorts)
    multipart_uploads: bool = False  # ListsIncompleteUploads: billed parts of uploads never completed
    local_paths: bool = False  # AnchorsLocalPaths: paths on this host, held under anchors, never through a link


@dataclass(frozen=True)
class StoragePrice:
    """A store's list price of holding bytes, per GiB-month of its standard class, and where it comes from."""

    usd_per_gib_month: float
    source: str  # the price list and its date, as the ledger's `prices` names it


@dataclass(frozen=True)
class SchemeFacts:
    """What policy must know of a store that is not an ability: declared with its backend in the registry, read
    through `scheme_facts(storage, uri)`. The defaults are what holds for a store nobody described: no price (the
    ledger refuses it as `unpriced_scheme`, never priced as another store), no protection beyond the quarantine,
    the generic visibility fix."""

    price: StoragePrice | None = None
    protection: str = "rlcleanup quarantine (restore until expiry); no other protection is known for this store"
    visibility_fix: str = "grant the destination's actual visibility, or choose a private destination"
    # The fix when a visibility read-back failed for want of credentials (its evidence names them); None: the above.
    credentials_fix: str | None = None


@dataclass(frozen=True)
class VisibilityReading:
    """Who can read a destination, as the backend reports it; `visibility` None means it could not tell."""

    visibility: Visibility | None
    evidence: str


class UnknownSchemeError(PermanentError, ValueError):
    """A URI whose scheme no storage backend is registered for. Never guessed to be a local path: an `s3://`
    run read from the local disk would be an empty run, and a destination's visibility would be read off it."""

    code = "unsupported_scheme"

    def __init__(self, scheme: str, uri: str, known: tuple[str, ...]) -> None:
        self.scheme = scheme
        self.known = known
        super().__init__(
            self.code, f"no storage backend for scheme {scheme!r} ({uri[:200]!r}); known schemes: {', '.join(known)}"
        )


class StorageError(TransientError):
    """A storage failure worth retrying (network, 5xx, emulator down)."""


class StorageAccessError(PermanentError):
    """A storage failure no retry fixes: missing or wrong credentials, access denied, a bucket in another region,
    an unusable endpoint. Recorded on the run (permanent), with the endpoint and operation in the message."""

    def __init__(self, message: str) -> None:
        super().__init__("storage_access", message)


class SourceChangedError(Exception):
    """The object is not the version a caller pinned (a generation precondition failed, or its fingerprint moved
    while it was being copied). Never retried into success: the grant that pinned it is refused."""


class NoObjectVersionsError(PermanentError, ValueError):
    """A version-pinned copy or delete asked of a backend whose objects carry no version usable as a precondition
    (local disk; S3 here, see adapters/storage_registry.py). Callers check `object_version` first and pin
    otherwise (S3: the ETag, EtagPinnedStorage; else by streaming); reaching this is asking the wrong backend."""

    code = "no_object_versions"

    def __init__(self, uri: str) -> None:
        super().__init__(self.code, f"{uri[:200]}: its backend has no object versions to pin a copy or delete to")


class UnsafePathError(PermanentError, ValueError):
    """An object name that would escape its root (`..`, absolute, symlink out of the run, a special file)."""

    def __init__(self, message: str) -> None:
        super().__init__("unsafe_path", message)


class Storage(Protocol):
    def stat(self, uri: str) -> ObjectInfo | None: ...

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        """Every object under prefix_uri (recursive), in name order."""
        ...

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        """Bytes [start, start+length) — one ranged request; short at end of object."""
        ...

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        """A whole small object; raises ObjectTooLarge (a ValueError) when it is larger than max_bytes."""
        ...

    def iter_lines(self, uri: str) -> Iterator[str]:
        """Stream text lines (newline stripped, undecodable bytes replaced) in bounded memory."""
        ...

    def write_if_absent(
        self, uri: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> WriteOutcome: ...

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        """Server-side copy when both ends share a backend; never overwrites different content."""
        ...

    def delete(self, uri: str) -> bool: ...


@runtime_checkable
class VersionedStorage(Storage, Protocol):
    """A backend with the `object_version` capability (GCS generations): copy and delete conditioned on the object
    version a grant pinned, enforced by the server (authority/pinning.py, authority/reclaim.py)."""

    def copy_version_if_absent(self, src_uri: str, dst_uri: str, source_generation: int) -> WriteOutcome:
        """Server-side copy of exactly that version of the source, write-once like copy_if_absent; raises
        SourceChangedError when the source is another version now."""
        ...

    def delete_version(self, uri: str, generation: int) -> bool:
        """Delete the object only while it is that version (False: already gone); raises SourceChangedError when
        it is another version now, which then stays."""
        ...

    def read_generation(self, uri: str, generation: int | None, max_bytes: int = 1024 * 1024) -> bytes | None:
        """A small object as it was at `generation` (None: the live one); None when that version is gone."""
        ...


@runtime_checkable
class EtagPinnedStorage(Storage, Protocol):
    """A backend with the `etag_pinned_copy` capability (S3): a grant's pinned copy made by the server, conditioned
    on the pinned source's ETag, so no byte passes through this process and bytes changed since the pin are
    refused by the server (authority/pinning.py, docs/authority.md P36)."""

    def server_side_between(self, src_uri: str, dst_uri: str) -> bool:
        """Whether one server can copy src to dst (S3: both buckets behind one endpoint)."""
        ...

    def copy_etag_if_absent(self, src: ObjectInfo, dst_uri: str, *, grant_id: str | None = None) -> WriteOutcome:
        """Server-side copy of `src` (as pinned: its `etag` and `size`) to `dst_uri`, write-once like
        copy_if_absent (identical: the destination already holds a copy of that ETag); raises SourceChangedError
        when the source's ETag is another now, leaving nothing at the destination. `grant_id`: the grant the copy
        is made for (an interrupted multipart copy is resumed only for the same grant)."""
        ...


@runtime_checkable
class RoutesEtagPins(Protocol):
    """A storage that routes by scheme (the router) and hands out the ETag-pinning backend for a pair of URIs."""

    def etag_pinned(self, src_uri: str, dst_uri: str) -> EtagPinnedStorage | None: ...


def etag_pins_of(storage: Storage, src_uri: str, dst_uri: str) -> EtagPinnedStorage | None:
    """The backend that copies src to dst server-side pinned to the source's ETag, or None (another backend at
    either end, two endpoints, a backend without the capability): the caller then pins as before."""
    if isinstance(storage, RoutesEtagPins):
        return storage.etag_pinned(src_uri, dst_uri)
    if isinstance(storage, EtagPinnedStorage) and storage.server_side_between(src_uri, dst_uri):
        return storage
    return None


@runtime_checkable
class ListsChildren(Protocol):
    """A backend that lists a prefix's immediate children page by page (a delimiter listing on GCS and S3): one
    request per page of children, however many objects lie deeper."""

    def list_children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> ChildPage: ...


def child_names(storage: Storage, prefix_uri: str, page_size: int = 1000) -> list[str]:
    """The URIs of prefix_uri's immediate children (sub-prefixes and objects), each once, sorted.

    Where the backend lists children, a step with 1,500 checkpoint files costs nothing here; a backend without it
    (a wrapper in a bench or test) is listed whole and cut at the first path component, which names the same
    children: a directory with nothing in it is no child on any backend (local storage skips it too)."""
    prefixes, objects = children(storage, prefix_uri, page_size)
    return sorted({*prefixes, *(o.uri for o in objects)})


def children(storage: Storage, prefix_uri: str, page_size: int = 1000) -> tuple[list[str], list[ObjectInfo]]:
    """prefix_uri's immediate sub-prefixes (URIs, sorted) and objects (with what the listing said of them, in name
    order), from one children listing: a caller that needs an object's size or time has it without a stat."""
    base = prefix_uri.rstrip("/")
    if isinstance(storage, ListsChildren) and (
        not isinstance(storage, SchemeAwareStorage) or storage.capabilities(base).children_listing
    ):
        prefixes: set[str] = set()
        objects: dict[str, ObjectInfo] = {}
        token: str | None = None
        while True:
            page = storage.list_children(base, token, page_size)
            prefixes.update(page.prefixes)
            objects.update((o.uri, o) for o in page.objects)
            if not page.next_token:
                return sorted(prefixes), [objects[uri] for uri in sorted(objects)]
            token = page.next_token
    deeper: set[str] = set()
    direct: list[ObjectInfo] = []
    for o in storage.list(base):
        name, sep, _ = o.uri[len(base) + 1 :].partition("/") if o.uri.startswith(base + "/") else ("", "", "")
        if name and sep:
            deeper.add(f"{base}/{name}")
        elif name:
            direct.append(o)
    return sorted(deeper), sorted(direct, key=lambda o: o.uri)


@runtime_checkable
class ListsAfter(Protocol):
    """A backend that resumes a listing after a name on the server (GCS `startOffset`, S3 `start-after`), so a
    listing paged across invocations costs one page of requests per page, not a re-listing from the start."""

    def list_after(self, prefix_uri: str, start_after: str | None) -> Iterator[ObjectInfo]:
        """The objects under prefix_uri whose URI sorts strictly after `start_after` (None: all), in name order
        (byte order of the names: Python's str order of the URIs)."""
        ...


@runtime_checkable
class ListsInAnyOrder(Protocol):
    """A backend whose server lists in an order of its own (S3 servers differ: see S3Storage), streamed a page of
    requests at a time; its `list` sorts the whole listing to keep the port's name order, this does not."""

    def list_any_order(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        """Every object under prefix_uri (recursive), in the server's order, without holding the listing."""
        ...


# Names a listing pass keeps at most, for a backend that cannot resume in name order (below): memory per pass.
NAME_ORDER_CHUNK = 10_000


def list_in_name_order(
    storage: Storage, prefix_uri: str, start_after: str | None = None, *, chunk: int = NAME_ORDER_CHUNK
) -> Iterator[ObjectInfo]:
    """The objects under prefix_uri in name order, strictly after `start_after`: what a paged listing resumes from.

    A backend without ListsAfter (S3: SeaweedFS orders `start-after` by its directory tree, so a server-side resume
    could skip objects; see S3Storage) is listed here in passes: each pass streams the whole listing and keeps only
    the `chunk` smallest names after the cursor (a bounded heap), yields them in order, and the next pass resumes
    after the last. Memory per invocation is one chunk whatever the run's size (issue 37 item 3, §8 P24); requests
    are one listing per chunk, and a page of a paged plan (RLCLEANUP_CAPTURE_PAGE_OBJECTS, 5,000) fits one chunk."""
    if isinstance(storage, ListsAfter):
        yield from storage.list_after(prefix_uri, start_after)
        return
    listing = storage.list_any_order if isinstance(storage, ListsInAnyOrder) else storage.list
    yield from list_in_passes(listing, prefix_uri, start_after, chunk=chunk)


def list_in_passes(
    listing: Callable[[str], Iterator[ObjectInfo]],
    prefix_uri: str,
    start_after: str | None = None,
    *,
    chunk: int = NAME_ORDER_CHUNK,
) -> Iterator[ObjectInfo]:
    """`list_in_name_order`'s passes over `listing` (a backend's `list`, or its `list_any_order` where the router
    knows it has one): the `chunk` smallest names after the cursor per pass."""
    cursor = start_after
    while True:
        seen = 0

        def after_cursor(bound: str | None) -> Iterator[ObjectInfo]:
            nonlocal seen
            for info in listing(prefix_uri):
                if bound is None or info.uri > bound:
                    seen += 1
                    yield info

        smallest = heapq.nsmallest(chunk, after_cursor(cursor), key=lambda o: o.uri)  # a heap of `chunk` at most
        yield from smallest
        if seen <= chunk:
            return
        cursor = smallest[-1].uri


@runtime_checkable
class StreamingStorage(Storage, Protocol):
    """A backend with the `streaming_copy` capability: whole objects to and from a local file in bounded chunks,
    which is how copies between two backends run (no server-side copy exists across them)."""

    def download_to(self, src_uri: str, path: Path) -> None:
        """The object's bytes into the local file `path`, streamed."""
        ...

    def upload_file_if_absent(self, path: Path, dst_uri: str) -> WriteOutcome:
        """A local file to `dst_uri`, write-once, streamed."""
        ...

    def fill_if_absent(self, uri: str, fill: Callable[[Path], object]) -> WriteOutcome:
        """Write-once from `fill`, which writes a whole local file (e.g. another backend's download_to)."""
        ...

    def local_file(self, uri: str) -> Path | None:
        """The object as a local file when it already is one (scheme `file`), so a copy reads it in place."""
        ...


@runtime_checkable
class SchemeAwareStorage(Storage, Protocol):
    """The storage steps receive (the registry-backed router): the port plus per-URI capabilities."""

    def capabilities(self, uri: str) -> StorageCapabilities: ...

    def facts(self, uri: str) -> SchemeFacts:
        """What the backend serving `uri` declares of its store; UnknownSchemeError for an unregistered scheme."""
        ...

    def read_visibility(self, uri: str) -> VisibilityReading:
        """Read back who can read `uri`; visibility None (never a guess) when the backend cannot tell."""
        ...

    def versioned(self, uri: str) -> VersionedStorage:
        """The backend of `uri` as a VersionedStorage; NoObjectVersionsError when it has no `object_version`."""
        ...


def scheme_facts(storage: Storage, uri: str) -> SchemeFacts:
    """What the store holding `uri` declares (price, protection, visibility fix); for a storage that does not route
    by scheme (a bare adapter) or a scheme nobody registered, the facts of an undescribed store: nothing assumed."""
    if not isinstance(storage, SchemeAwareStorage):
        return SchemeFacts()
    try:
        return storage.facts(uri)
    except UnknownSchemeError:
        return SchemeFacts()


def versions_of(storage: Storage, uri: str) -> VersionedStorage | None:
    """Where `uri`'s backend enforces object versions (GCS generations), its VersionedStorage; None for every
    other backend (local disk, S3) and for a storage that does not route by scheme: the caller then pins by the
    ETag (`etag_pins_of`, S3) or by streaming and comparing fingerprints, or deletes unconditionally after its own
    check."""
    if isinstance(storage, SchemeAwareStorage) and storage.capabilities(uri).object_version:
        return storage.versioned(uri)
    return None


@dataclass(frozen=True)
class IncompleteUpload:
    """A multipart upload started and never completed or aborted (S3 ListMultipartUploads): its parts are billed
    bytes no object listing shows (issue 36 item 3, issue 40 item 4)."""

    key_uri: str  # the object it would have become
    upload_id: str
    initiated: datetime | None
    parts: int
    bytes: int


@runtime_checkable
class ListsIncompleteUploads(Protocol):
    """A backend with multipart uploads (S3): list them under a prefix, and abort one (a reclaim grant only)."""

    def incomplete_uploads(self, prefix_uri: str) -> list[IncompleteUpload]: ...

    def abort_incomplete_upload(self, key_uri: str, upload_id: str) -> bool: ...


@runtime_checkable
class AnchorsLocalPaths(Protocol):
    """A storage whose local paths can be held under anchors (adapters/local_anchor.py): the view it gives walks
    every local path from the outermost of `roots` it lies under, never through a link, and refuses one under
    none of them (UnsafePathError). Object stores have no links: their URIs pass through unchanged."""

    def anchored(self, roots: Sequence[str]) -> AbstractContextManager[Storage]: ...


@contextmanager
def anchored_to(storage: Storage, roots: Sequence[str]) -> Iterator[Storage]:
    """`storage` with its local paths held under `roots` for the block (itself where it has no local paths)."""
    if isinstance(storage, AnchorsLocalPaths):
        with storage.anchored(roots) as view:
            yield view
    else:
        yield storage
