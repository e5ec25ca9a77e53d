"""The storage scheme registry: which URI schemes exist, which adapter serves each, what each can do and what policy
must know of its store.

The one place that knows schemes. A URI whose scheme is not registered raises UnknownSchemeError (naming the
known ones); nothing falls back to the local disk. Adding a backend = its adapter module + one `StorageBackend`
below (+ a field on StorageCapabilities only if it brings a new kind of ability); see docs/architecture.md.

Capabilities and ports are one declaration: a capability that brings methods is a flag and a protocol
(`CAPABILITY_PROTOCOLS`), and `register` refuses a backend whose adapter class implements other protocols than
its flags declare (`StorageRegistrationError`, at import for the built-in ones), so the router dispatches on the
flag alone. Scheme facts (`SchemeFacts`: list price, protection, visibility fix) are declared here too, never
branched on by policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.local_visibility import path_visibility
from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.ports.storage import (
    AnchorsLocalPaths,
    EtagPinnedStorage,
    ListsAfter,
    ListsChildren,
    ListsInAnyOrder,
    ListsIncompleteUploads,
    SchemeFacts,
    Storage,
    StorageCapabilities,
    StoragePrice,
    StreamingStorage,
    UnknownSchemeError,
    VersionedStorage,
    VisibilityReading,
)
from rlcleanup.uris import LOCAL_SCHEME, scheme

# Each capability that brings methods, and the protocol an adapter declaring it implements (one not declaring it
# does not): `register` checks both directions.
CAPABILITY_PROTOCOLS: dict[str, type] = {
    "streaming_copy": StreamingStorage,
    "object_version": VersionedStorage,
    "etag_pinned_copy": EtagPinnedStorage,
    "children_listing": ListsChildren,
    "resumable_listing": ListsAfter,
    "unordered_listing": ListsInAnyOrder,
    "multipart_uploads": ListsIncompleteUploads,
    "local_paths": AnchorsLocalPaths,
}


class StorageRegistrationError(ValueError):
    """A storage backend declared inconsistently (a defect in its registration): raised when it is registered,
    at startup, never at the first call that would have needed the missing ability."""


def capability_mismatches(capabilities: StorageCapabilities, adapter: type) -> list[str]:
    """Where `adapter` (a class) and the capabilities declared for it disagree: a declared capability whose
    protocol it does not implement, or a protocol it implements undeclared. Empty: they are one declaration."""
    problems = []
    for flag, protocol in CAPABILITY_PROTOCOLS.items():
        declared, implemented = getattr(capabilities, flag), issubclass(adapter, protocol)
        if declared and not implemented:
            problems.append(f"declares {flag} but {adapter.__name__} does not implement {protocol.__name__}")
        elif implemented and not declared:
            problems.append(f"{adapter.__name__} implements {protocol.__name__} but does not declare {flag}")
    return problems


@dataclass(frozen=True)
class StorageBackend:
    scheme: str
    capabilities: StorageCapabilities
    # The adapter's class: what it implements is checked against `capabilities` when the backend is registered,
    # and (unless `make` says otherwise) the router calls it once, on first use, to make its instance.
    adapter: type[Storage]
    facts: SchemeFacts = field(default_factory=SchemeFacts)  # undescribed: unpriced, generic protection and fix
    # Given the router's instance of this backend: who can read `uri`. Required iff capabilities.visibility_readback.
    visibility: Callable[[Storage, str], VisibilityReading] | None = None
    make: Callable[[], Storage] | None = None  # how to make the instance, when not `adapter()`

    def new(self) -> Storage:
        return self.make() if self.make is not None else self.adapter()


class StorageRegistry:
    def __init__(self, backends: Iterable[StorageBackend] = ()) -> None:
        self._backends: dict[str, StorageBackend] = {}
        for backend in backends:
            self.register(backend)

    def register(self, backend: StorageBackend) -> None:
        if backend.scheme in self._backends:
            raise StorageRegistrationError(f"storage scheme {backend.scheme!r} is already registered")
        if backend.capabilities.visibility_readback != (backend.visibility is not None):
            raise StorageRegistrationError(
                f"storage scheme {backend.scheme!r}: visibility_readback needs a visibility reader, and only it has one"
            )
        problems = capability_mismatches(backend.capabilities, backend.adapter)
        if problems:
            raise StorageRegistrationError(f"storage scheme {backend.scheme!r}: {'; '.join(problems)}")
        self._backends[backend.scheme] = backend

    def check_adapter(self, scheme_name: str, storage: Storage) -> None:
        """A ready-made adapter handed to a router for `scheme_name` (a test's emulator-bound one) implements what
        the scheme's registration declares, as its registered class does: StorageRegistrationError otherwise."""
        entry = self.for_uri(f"{scheme_name}://")
        problems = capability_mismatches(entry.capabilities, type(storage))
        if problems:
            raise StorageRegistrationError(f"storage scheme {scheme_name!r}: {'; '.join(problems)}")

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


def _gcs_visibility(storage: Storage, uri: str) -> VisibilityReading:
    from rlcleanup.adapters.gcs_visibility import bucket_visibility

    if not isinstance(storage, GcsStorage):  # a test double in the gs slot has no bucket IAM to read
        return VisibilityReading(None, f"{type(storage).__name__} cannot read bucket IAM for {uri}")
    return bucket_visibility(uri, storage.client)


def _local_visibility(_storage: Storage, uri: str) -> VisibilityReading:
    return path_visibility(uri)


# List prices, USD per GiB-month of the standard class, as of 2026-12-03 (the date of bench/prices.json): the
# ledger's estimate of holding the bytes, not a bill (no free tier, no discounts, no operations).
_PRICES_AS_OF = "list price as of 2026-12-03"

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
        children_listing=True,
        resumable_listing=True,
        local_paths=True,  # every path walked from a descriptor, never through a link (adapters/local_anchor.py)
    ),
    adapter=LocalStorage,
    facts=SchemeFacts(
        price=StoragePrice(0.0, "local disk $0 (the host's own disk)"),
        protection="rlcleanup quarantine (restore until expiry); a local file system has no soft delete",
        visibility_fix="make the destination private (`chmod go-rwx DIR` on it or an ancestor), choose a new "
        "directory (rlcleanup creates it 0700), or grant the wider visibility",
    ),
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
        children_listing=True,  # a delimiter listing
        resumable_listing=True,  # startOffset
    ),
    adapter=GcsStorage,
    facts=SchemeFacts(
        # https://cloud.google.com/storage/pricing (Standard, regional us-central1: $0.020/GB-month)
        price=StoragePrice(0.020, f"GCS Standard regional us-central1 $0.020/GiB-month, {_PRICES_AS_OF}"),
        protection="rlcleanup quarantine (restore until expiry); a bucket with GCS soft delete also keeps deleted "
        "objects for its retention window, but restoring from it is a bucket admin's job and Marin's main buckets "
        "run without it",
        visibility_fix="grant the bucket's actual visibility, or remove its public IAM members",
        credentials_fix="no Google Cloud credentials to read the bucket's IAM: set GOOGLE_APPLICATION_CREDENTIALS to "
        "a service-account key (or run `gcloud auth application-default login`); for the local stack set "
        'STORAGE_EMULATOR_HOST (`eval "$(rlcleanup stack up)"`), or publish to a local directory',
    ),
    visibility=_gcs_visibility,
)
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
        children_listing=True,  # a delimiter listing
        unordered_listing=True,  # SeaweedFS orders start-after by its tree: resumed in passes (ports/storage.py)
        multipart_uploads=True,
    ),
    adapter=S3Storage,  # endpoints and credentials from the environment (docs/s3.md)
    facts=SchemeFacts(
        # https://aws.amazon.com/s3/pricing/ (S3 Standard, first 50 TB, us-east-1: $0.023/GB-month)
        price=StoragePrice(0.023, f"S3 Standard us-east-1 $0.023/GiB-month, {_PRICES_AS_OF}"),
        protection="rlcleanup quarantine (restore until expiry); S3 has no soft delete unless the bucket is versioned",
    ),
)

BUILTIN = StorageRegistry([LOCAL, GCS, S3])
