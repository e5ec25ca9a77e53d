"""Where a grant's pinned copy goes server-side on S3 (docs/authority.md P36): the router hands out the S3 backend
only for two s3:// URIs one server can copy between; every other pair keeps its pinning (GCS generations, local
descriptors, streams across backends or endpoints). And reclaim's twin check holds an ETag-pinned copy, which
hashed no byte, to the destination's version as the copy left it. The copies themselves run against SeaweedFS:
tests/integration/test_s3_pinned_copies.py."""

from __future__ import annotations

from pathlib import Path

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.s3_client import S3Endpoint
from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.adapters.storage_registry import BUILTIN
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.authority.pinning import CopyProof, twin_mismatch
from rlcleanup.ports.storage import ObjectInfo, etag_pins_of

_HERE = S3Endpoint(name="here", endpoint_url="http://127.0.0.1:1", buckets=("runs", "models"))
_THERE = S3Endpoint(name="there", endpoint_url="http://127.0.0.1:2", buckets=("elsewhere",))


def _router(tmp_path: Path) -> RoutingStorage:
    s3 = S3Storage(endpoints=[_HERE, _THERE], default=_HERE)
    return RoutingStorage({"s3": s3, "file": LocalStorage()})


def test_only_s3_pairs_behind_one_endpoint_are_copied_etag_pinned(tmp_path: Path) -> None:
    router = _router(tmp_path)
    s3 = router.backend("s3")
    assert BUILTIN.for_uri("s3://x").capabilities.etag_pinned_copy
    assert not BUILTIN.for_uri("gs://x").capabilities.etag_pinned_copy  # GCS keeps its generation pin
    assert etag_pins_of(router, "s3://runs/a/shard", "s3://models/m/shard") is s3  # two buckets, one server
    assert etag_pins_of(router, "s3://runs/a/shard", "s3://runs/staging/shard") is s3
    assert etag_pins_of(router, "s3://runs/a/shard", "s3://elsewhere/shard") is None  # two endpoints: streamed
    assert etag_pins_of(router, "s3://runs/a/shard", str(tmp_path / "shard")) is None  # across backends
    assert etag_pins_of(router, str(tmp_path / "a"), str(tmp_path / "b")) is None  # local: one descriptor
    assert etag_pins_of(s3, "s3://runs/a", "s3://models/b") is s3  # the adapter itself, unrouted
    assert etag_pins_of(LocalStorage(), str(tmp_path / "a"), str(tmp_path / "b")) is None


class _Stat:
    def __init__(self, info: ObjectInfo) -> None:
        self.info = info

    def stat(self, uri: str) -> ObjectInfo | None:
        return self.info if uri == self.info.uri else None


def _proof(**extra: object) -> CopyProof:
    fields: dict[str, object] = {
        "source": "s3://runs/a/shard",
        "source_fingerprint": "s3:abc:2026-12-07T10:00:00+00:00:",
        "destination": "s3://models/m/shard",
        "size": 10,
        "destination_fingerprint": "s3:abc:2026-12-07T10:05:00+00:00:",
        "source_etag": "abc",
        "outcome": "created",
    }
    return CopyProof.model_validate({**fields, **extra})


def test_an_etag_pinned_twin_is_verified_by_its_version_not_its_bytes() -> None:
    made = ObjectInfo("s3://models/m/shard", 10, etag="abc", fingerprint="s3:abc:2026-12-07T10:05:00+00:00:")
    assert twin_mismatch(_Stat(made), _proof()) is None  # no byte read: _Stat cannot serve one
    # The same bytes written again later (a new Last-Modified) are not the object the copy made.
    rewritten = ObjectInfo(made.uri, 10, etag="abc", fingerprint="s3:abc:2026-12-07T11:00:00+00:00:")
    problem = twin_mismatch(_Stat(rewritten), _proof())
    assert problem is not None and "at publish" in problem
    other = ObjectInfo(made.uri, 10, etag="def", fingerprint="s3:def:2026-12-07T10:05:00+00:00:")
    assert twin_mismatch(_Stat(other), _proof()) is not None
    # A proof with neither a sha256 nor the ETag it was pinned to still means "re-hash the bytes" (as before).
    assert "SHA-256" in (twin_mismatch(_Stat(made), _proof(source_etag=None)) or "")
