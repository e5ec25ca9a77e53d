"""The storage scheme registry fails closed: an unknown scheme is a typed error naming it, never a local path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.storage_registry import (
    BUILTIN,
    GCS,
    LOCAL,
    S3,
    StorageBackend,
    StorageRegistrationError,
    StorageRegistry,
    capability_mismatches,
)
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.authority.visibility import read_visibility
from rlcleanup.errors import ErrorKind, error_kind
from rlcleanup.models.vocab import Visibility
from rlcleanup.ports.storage import (
    NoObjectVersionsError,
    UnknownSchemeError,
    VersionedStorage,
    WriteOutcome,
    versions_of,
)
from rlcleanup.uris import scheme, split_bucket


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("gs://b/k", "gs"),
        ("GS://b/k", "gs"),
        ("s3://b/k", "s3"),
        ("az://c/k", "az"),
        ("http://host/x", "http"),
        ("file:///data/run", "file"),
        ("/data/run", "file"),
        ("relative/run", "file"),
    ],
)
def test_scheme_of_a_uri(uri: str, expected: str) -> None:
    assert scheme(uri) == expected


def test_split_bucket_works_for_any_object_store_scheme() -> None:
    assert split_bucket("gs://b/k/x") == ("b", "k/x")
    assert split_bucket("s3://bucket/iris/job") == ("bucket", "iris/job")
    with pytest.raises(ValueError, match="bucket"):
        split_bucket("gs:///k")


@pytest.mark.parametrize("uri", ["hdfs://marin-us-east/iris/job", "http://example.com/run", "az://c/run"])
def test_unknown_scheme_is_an_error_naming_it_and_the_known_ones(uri: str, tmp_path: Path) -> None:
    router = RoutingStorage({"file": LocalStorage()})
    with pytest.raises(UnknownSchemeError) as info:
        router.list(uri)
    assert info.value.scheme == scheme(uri)
    assert f"{scheme(uri)!r}" in str(info.value) and "file, gs, s3" in str(info.value)
    for call in (
        lambda: router.stat(uri),
        lambda: router.read_bytes(uri),
        lambda: router.write_if_absent(uri, b"x"),
        lambda: router.copy_if_absent(str(tmp_path / "x"), uri),
        lambda: router.capabilities(uri),
    ):
        with pytest.raises(UnknownSchemeError):
            call()


def test_unknown_scheme_is_a_permanent_typed_error_on_the_run() -> None:
    error = UnknownSchemeError("s3", "s3://b/run", BUILTIN.schemes)
    assert error_kind(error) is ErrorKind.domain and error.code == "unsupported_scheme" and "s3" in str(error)


def test_s3_destination_visibility_is_unknown_not_read_off_the_local_disk(tmp_path: Path) -> None:
    """Before the registry an s3:// URI fell through to the local-disk reader and came back 'private'. s3 is
    registered now, without visibility read-back (bucket policies differ per provider): still unknown."""
    reading = read_visibility(RoutingStorage(), "s3://bucket/models")
    assert reading.visibility is None and "cannot read back" in reading.evidence


def test_local_visibility_goes_through_the_registry(tmp_path: Path) -> None:
    private = tmp_path / "dest"
    private.mkdir(mode=0o700)
    reading = read_visibility(RoutingStorage(), str(private))
    assert reading.visibility is Visibility.private and "owner-only" in reading.evidence


def test_a_backend_without_visibility_readback_reads_unknown(tmp_path: Path) -> None:
    caps = dataclasses.replace(LOCAL.capabilities, server_side_copy=False, visibility_readback=False)
    registry = StorageRegistry([LOCAL, StorageBackend("mem", caps, adapter=LocalStorage)])
    reading = read_visibility(RoutingStorage(registry=registry), "mem://bucket/models")
    assert reading.visibility is None and "cannot read back" in reading.evidence


def test_registration_refuses_duplicates_and_missing_visibility_readers() -> None:
    registry = StorageRegistry([LOCAL])
    with pytest.raises(StorageRegistrationError, match="already registered"):
        registry.register(LOCAL)
    with pytest.raises(StorageRegistrationError, match="visibility"):
        registry.register(StorageBackend("x", GCS.capabilities, adapter=LocalStorage))
    with pytest.raises(UnknownSchemeError):
        RoutingStorage({"az": LocalStorage()})  # a prebuilt adapter for an unregistered scheme


@pytest.mark.parametrize(
    ("flags", "builtin", "expected"),
    [
        # declared, not implemented: the router would cast LocalStorage to a VersionedStorage it is not
        ({"object_version": True}, LOCAL, "declares object_version but LocalStorage does not implement"),
        # implemented, not declared: GCS's generations would go unused, its pinned copies streamed
        ({"object_version": False}, GCS, "GcsStorage implements VersionedStorage but does not declare"),
        ({"multipart_uploads": False}, S3, "implements ListsIncompleteUploads but does not declare"),
        ({"etag_pinned_copy": False}, S3, "implements EtagPinnedStorage but does not declare"),
        ({"local_paths": False}, LOCAL, "implements AnchorsLocalPaths but does not declare local_paths"),
        ({"streaming_copy": False}, LOCAL, "implements StreamingStorage but does not declare"),
    ],
)
def test_declared_capabilities_must_be_the_protocols_the_adapter_implements(
    flags: dict[str, bool], builtin: StorageBackend, expected: str
) -> None:
    """One mechanism: a capability flag and its protocol are checked against each other once, when the backend is
    registered (a startup error), so no call checks both."""
    caps = dataclasses.replace(builtin.capabilities, **flags)
    with pytest.raises(StorageRegistrationError, match=expected):
        StorageRegistry([dataclasses.replace(builtin, scheme="x", capabilities=caps)])
    assert capability_mismatches(builtin.capabilities, builtin.adapter) == []  # as built in: one declaration
    assert all(capability_mismatches(b.capabilities, b.adapter) == [] for b in (LOCAL, GCS, S3))


def test_a_ready_made_adapter_must_implement_what_its_scheme_declares(tmp_path: Path) -> None:
    """An adapter handed to the router for a scheme (a test's emulator-bound one) is held to the same declaration:
    a LocalStorage in the gs slot has no generations, so the router refuses it rather than cast it later."""
    with pytest.raises(StorageRegistrationError, match="declares object_version but LocalStorage"):
        RoutingStorage({"gs": LocalStorage()})
    assert RoutingStorage({"file": LocalStorage()}).backend("file") is not None


def test_capabilities_per_backend() -> None:
    router = RoutingStorage()
    assert router.capabilities("gs://b/k").object_version and router.capabilities("gs://b/k").strong_checksum
    assert not router.capabilities("/tmp/x").object_version
    assert BUILTIN.schemes == ("file", "gs", "s3")
    s3 = router.capabilities("s3://b/k")
    assert s3.ranged_read and s3.listing and s3.streaming_copy and not s3.strong_checksum


def test_only_backends_with_object_versions_offer_the_versioned_port(tmp_path: Path) -> None:
    """Pinned copies and deletes reach GCS generations through the port; local disk and S3 have none to pin to,
    so policy gets None (and pins by streaming) and asking the router anyway is a typed error."""
    router = RoutingStorage()
    assert isinstance(router.versioned("gs://b/k"), VersionedStorage)
    assert isinstance(versions_of(router, "gs://b/k"), VersionedStorage)
    for uri in (str(tmp_path / "x"), "s3://b/k"):
        assert versions_of(router, uri) is None
        with pytest.raises(NoObjectVersionsError) as exc:
            router.versioned(uri)
        assert error_kind(exc.value) is ErrorKind.domain and exc.value.code == "no_object_versions"
    assert versions_of(LocalStorage(), str(tmp_path / "x")) is None  # not scheme-aware: never versioned


def test_cross_backend_copy_streams_between_registered_backends(tmp_path: Path) -> None:
    """A second registered backend: copies both ways take the streaming path (download_to / fill), never a
    whole-object read_bytes, and stay write-once."""

    class Remote(LocalStorage):  # stands in for an object store: not a local file, no whole-object reads
        @staticmethod
        def _path(uri: str) -> Path:
            return Path(uri.removeprefix("mem://"))

        def local_file(self, uri: str) -> Path | None:
            return None

        def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
            raise AssertionError("streaming backends are copied in chunks, not as one whole object")

    caps = dataclasses.replace(LOCAL.capabilities, visibility_readback=False)
    backend = StorageBackend("mem", caps, adapter=Remote)
    router = RoutingStorage(registry=StorageRegistry([LOCAL, backend]))
    src = tmp_path / "a.log"
    src.write_bytes(b"hello\n" * 1000)
    dst = tmp_path / "out" / "a.log"
    assert router.copy_if_absent(str(src), f"mem://{dst}") is WriteOutcome.created
    assert dst.read_bytes() == src.read_bytes()
    back = tmp_path / "back" / "a.log"
    assert router.copy_if_absent(f"mem://{dst}", str(back)) is WriteOutcome.created
    assert back.read_bytes() == src.read_bytes()
    assert router.copy_if_absent(f"mem://{dst}", str(back)) is WriteOutcome.identical


@pytest.mark.parametrize("flag", ["run_uri", "preserve_to"])
def test_cli_run_refuses_an_unknown_scheme_as_a_usage_error(tmp_path: Path, flag: str) -> None:
    from typer.testing import CliRunner

    from rlcleanup.cli.main import app

    run_uri, preserve = ("hdfs://bucket/iris/job", str(tmp_path)) if flag == "run_uri" else (str(tmp_path), "az://c/p")
    result = CliRunner().invoke(app, ["run", run_uri, "--preserve-to", preserve, "--db", str(tmp_path / "r.db")])
    assert result.exit_code == 2
    assert "no storage backend for scheme" in result.stderr and "known schemes: file, gs, s3" in result.stderr
    assert not (tmp_path / "r.db").exists()


def test_an_event_for_an_unregistered_scheme_is_recorded_as_unsupported_not_read_from_disk(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from rlcleanup.models.events import JobEvent
    from rlcleanup.models.vocab import RecordStatus
    from rlcleanup.runtime.embedded import EmbeddedStack

    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))
    run_uri = "az://marin-us-east-02a/iris/rl-job/v1"  # s3 is registered (adapters/s3_storage.py); az is not
    event = JobEvent(source="iris", job_id="j", run_uri=run_uri, state="FAILED", observed_at=datetime.now(UTC))
    stack.emit(event)
    records = [r for r in stack.ports.records.list_runs() if r.run_uri == run_uri]
    assert len(records) == 1 and records[0].status is RecordStatus.failed
    error = records[0].errors[0]
    assert error.code == "unsupported_scheme" and "'az'" in error.message and "file, gs, s3" in error.message
    assert not (tmp_path / "preserved").exists() or not any((tmp_path / "preserved").iterdir())


def test_sample_upload_goes_through_the_port_for_any_registered_scheme(tmp_path: Path) -> None:
    """The uploader writes through Storage (write-once), so a new scheme needs no uploader of its own."""
    from rlcleanup.samples.generator import write_sample_run
    from rlcleanup.samples.upload import upload_sample_run_to
    from rlcleanup.steps.layout import discover

    src = tmp_path / "src"
    write_sample_run(src, "completed-resumed")
    dest = tmp_path / "bucket" / "prefix"
    router = RoutingStorage()
    run_uri = upload_sample_run_to(router, src, str(dest), rename="renamed-run")
    assert run_uri.startswith(str(dest)) and "renamed-run" in run_uri
    layout = discover(router, run_uri)
    assert layout.marker_step == 20 and layout.export_steps == [5, 10, 15, 20]
    texts = [p.read_text(errors="replace") for p in dest.rglob("*.json")]
    assert texts and not any(str(src) in text for text in texts)  # every local path was rewritten
    assert upload_sample_run_to(router, src, str(dest), rename="renamed-run") == run_uri  # a replay is identical
    config = next(src.rglob("resolved-skyrl.json"))
    config.write_text(config.read_text().replace("{", '{"edited": 1, ', 1))
    with pytest.raises(FileExistsError, match=r"resolved-skyrl\.json"):  # write-once: different bytes are refused
        upload_sample_run_to(router, src, str(dest), rename="renamed-run")


def test_a_pinned_copy_is_server_side_only_within_one_versioned_backend(tmp_path: Path) -> None:
    """authority/pinning.py asks the port whether both ends share a versioned backend (versions_of of each), never
    the router's registry: within it the copy is the backend's version-pinned one, to another backend it streams."""
    from rlcleanup.authority.pinning import pinned_copy

    calls: list[tuple[str, str, int]] = []

    class Versioned(LocalStorage):  # a versioned object store, kept on the local disk under `ver://`
        @staticmethod
        def _path(uri: str) -> Path:
            return Path(uri.removeprefix("ver://"))

        def copy_version_if_absent(self, src_uri: str, dst_uri: str, source_generation: int) -> WriteOutcome:
            calls.append((src_uri, dst_uri, source_generation))
            return self.copy_if_absent(src_uri, dst_uri)

        def delete_version(self, uri: str, generation: int) -> bool:
            return self.delete(uri)

        def read_generation(self, uri: str, generation: int | None, max_bytes: int = 1 << 20) -> bytes | None:
            return self.read_bytes(uri, max_bytes)

    caps = dataclasses.replace(LOCAL.capabilities, visibility_readback=False, object_version=True)
    router = RoutingStorage(registry=StorageRegistry([LOCAL, StorageBackend("ver", caps, adapter=Versioned)]))
    (tmp_path / "a").write_bytes(b"pinned bytes")
    src = router.stat(f"ver://{tmp_path / 'a'}")
    assert src is not None
    src = dataclasses.replace(src, generation=7)
    assert pinned_copy(router, src, f"ver://{tmp_path / 'b'}").outcome == "created"
    assert calls == [(f"ver://{tmp_path / 'a'}", f"ver://{tmp_path / 'b'}", 7)]  # the backend's pinned copy
    assert pinned_copy(router, src, str(tmp_path / "c")).outcome == "created" and len(calls) == 1  # streamed
    assert (tmp_path / "c").read_bytes() == b"pinned bytes"
