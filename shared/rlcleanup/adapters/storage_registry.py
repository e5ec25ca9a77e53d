"""The storage scheme registry: which URI schemes exist, which adapter serves each, and what each can do.

The one place that knows schemes. A URI whose scheme is not registered raises UnknownSchemeError (naming the
known ones); nothing falls back to the local disk. Adding a backend = its adapter module + one `StorageBackend`
below (+ a field on StorageCapabilities only if it brings a new kind of ability); see docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rlcleanup.adapters.local_visibility import path_visibility
from rlcleanup.ports.storage import Storage, StorageCapabilities, UnknownSchemeError, VisibilityReading
from rlcleanup.uris import LOCAL_SCHEME, scheme


@dataclass(frozen=True)
class StorageBackend:
    scheme: str
    capabilities: StorageCapabilities
    make: Callable[[], Storage]  # called once per router, on first use (keeps cold starts cheap)
    # Given the router's instance of this backend: who can read `uri`. Required iff capabilities.visibility_readback.
    visibility: Callable[[Storage, str], VisibilityReading] | None = None


class StorageRegistry:
    def __init__(self, backends: Iterable[StorageBackend] = ()) -> None:
        self._backends: dict[str, StorageBackend] = {}
        for backend in backends:
            self.register(backend)

    def register(self, backend: StorageBackend) -> None:
        if backend.scheme in self._backends:
            raise ValueError(f"storage scheme {backend.scheme!r} is already registered")
        if backend.capabilities.visibility_readback != (backend.visibility is not None):
            raise ValueError(f"storage scheme {backend.scheme!r}: visibility_readback needs a visibility reader")
        self._backends[backend.scheme] = backend

    @property
    def schemes(self) -> tuple[str, ...]:
        return tuple(sorted(self._backends))

    def for_uri(self, uri: str) -> StorageBackend:
        """The backend serving `uri`; UnknownSchemeError for a scheme nobody registered."""
        name = scheme(uri)
        backend = self._backends.get(name)
        if backend is None:
            raise UnknownSchemeError(name, uri, self.schemes)
        return backend


def _local() -> Storage:
    from rlcleanup.adapters.local_storage import LocalStorage

    return LocalStorage()


def _gcs() -> Storage:
    from rlcleanup.adapters.gcs_storage import GcsStorage

    return GcsStorage()


def _gcs_visibility(storage: Storage, uri: str) -> VisibilityReading:
    from rlcleanup.adapters.gcs_storage import GcsStorage
    from rlcleanup.adapters.gcs_visibility import bucket_visibility

    if not isinstance(storage, GcsStorage):  # a test double in the gs slot has no bucket IAM to read
        return VisibilityReading(None, f"{type(storage).__name__} cannot read bucket IAM for {uri}")
    return bucket_visibility(uri, storage.client)


def _local_visibility(_storage: Storage, uri: str) -> VisibilityReading:
    return path_visibility(uri)


LOCAL = StorageBackend(
    scheme=LOCAL_SCHEME,
    capabilities=StorageCapabilities(
        ranged_read=True,
        listing=True,
        server_side_copy=True,  # copyfile within the host (the kernel's sendfile), no network hop
        streaming_copy=True,
        visibility_readback=True,  # permission bits of the directory and its ancestors
        object_version=False,
        strong_checksum=False,  # files above 64 MiB are listed with their size only (checksumming reads them)
    ),
    make=_local,
    visibility=_local_visibility,
)
GCS = StorageBackend(
    scheme="gs",
    capabilities=StorageCapabilities(
        ranged_read=True,
        listing=True,
        server_side_copy=True,  # rewrite
        streaming_copy=True,
        visibility_readback=True,  # bucket IAM, public access prevention, default object ACL
        object_version=True,  # generation
        strong_checksum=True,  # crc32c and md5 on every listing
    ),
    make=_gcs,
    visibility=_gcs_visibility,
)


def _s3() -> Storage:
    from rlcleanup.adapters.s3_storage import S3Storage

    return S3Storage()  # endpoints and credentials from the environment (docs/s3.md)


S3 = StorageBackend(
    scheme="s3",
    capabilities=StorageCapabilities(
        ranged_read=True,
        listing=True,
        server_side_copy=True,  # CopyObject / UploadPartCopy within one endpoint; across endpoints it streams
        streaming_copy=True,
        visibility_readback=False,  # bucket policies/ACLs differ per provider: an s3:// destination reads unknown
        object_version=False,  # version ids exist only on versioned buckets; nothing may rely on them
        strong_checksum=False,  # an ETag is an MD5 only for single-part uploads (ObjectInfo.etag says which)
        etag_pinned_copy=True,  # CopySourceIfMatch / x-amz-copy-source-if-match: grants copy server-side (P36)
    ),
    make=_s3,
)

BUILTIN = StorageRegistry([LOCAL, GCS, S3])
