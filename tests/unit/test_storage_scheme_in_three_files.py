"""A storage scheme is added through the registry alone (docs/architecture.md, "Add a storage scheme"): an adapter
module (here `MemoryStorage`, written below as a real adapter would be), one `StorageBackend` in the registry,
and this test. Nothing else changes: the embedded default captures, validates, selects and measures a sample run
uploaded to `mem://`; the ledger prices it only when the backend declares a price (`unpriced_scheme` otherwise,
never another store's price); a scheme nobody registered still fails closed."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import google_crc32c
import pytest

from rlcleanup.adapters.storage_registry import GCS, LOCAL, S3, StorageBackend, StorageRegistry
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.authority import storage_ledger
from rlcleanup.errors import ObjectTooLarge, PermanentError
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.lines import bounded_lines
from rlcleanup.ports.storage import (
    ObjectInfo,
    SchemeFacts,
    StorageCapabilities,
    StoragePrice,
    UnknownSchemeError,
    WriteOutcome,
    child_names,
)
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.samples.upload import upload_sample_run_to


class MemoryStorage:
    """An object store held in this process: `mem://<bucket>/<key>` -> bytes. The port's minimum and nothing
    more (no streaming, no versions, no children listing): what the registry declares for it below."""

    def __init__(self) -> None:
        self._objects: dict[str, tuple[bytes, datetime, int]] = {}
        self._lock = threading.Lock()
        self._writes = 0

    def _info(self, uri: str, data: bytes, at: datetime, serial: int) -> ObjectInfo:
        crc = base64.b64encode(google_crc32c.Checksum(data).digest()).decode()
        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        return ObjectInfo(uri, len(data), crc, md5, updated=at, created=at, fingerprint=f"mem:{serial}:{md5}")

    def stat(self, uri: str) -> ObjectInfo | None:
        with self._lock:
            held = self._objects.get(uri)
        return self._info(uri, *held) if held else None

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        base = prefix_uri.rstrip("/") + "/"
        with self._lock:
            held = sorted((uri, v) for uri, v in self._objects.items() if uri.startswith(base))
        return iter([self._info(uri, *v) for uri, v in held])

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        return self._data(uri)[start : start + length]

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        data = self._data(uri)
        if len(data) > max_bytes:
            raise ObjectTooLarge(f"{uri} is {len(data)} bytes, more than {max_bytes}")
        return data

    def iter_lines(self, uri: str) -> Iterator[str]:
        text = io.TextIOWrapper(io.BytesIO(self._data(uri)), encoding="utf-8", errors="replace", newline=None)
        return bounded_lines(text)

    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> WriteOutcome:
        with self._lock:
            held = self._objects.get(uri)
            if held is not None:
                return WriteOutcome.identical if held[0] == data else WriteOutcome.conflict
            self._writes += 1
            self._objects[uri] = (bytes(data), datetime.now(UTC), self._writes)
            return WriteOutcome.created

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        return self.write_if_absent(dst_uri, self._data(src_uri))

    def delete(self, uri: str) -> bool:
        with self._lock:
            return self._objects.pop(uri, None) is not None

    def _data(self, uri: str) -> bytes:
        with self._lock:
            held = self._objects.get(uri)
        if held is None:
            raise FileNotFoundError(uri)
        return held[0]


MEM_CAPABILITIES = StorageCapabilities(
    ranged_read=True,
    listing=True,
    server_side_copy=True,  # a copy within the process moves no byte over a network
    streaming_copy=False,
    visibility_readback=False,  # nobody but this process can read it, but it cannot say so: a publish reads unknown
    object_version=False,
    strong_checksum=True,  # crc32c and md5 on every listing
)
# The registry entry a new scheme adds (in adapters/storage_registry.py, one StorageBackend beside LOCAL/GCS/S3).
MEM = StorageBackend(scheme="mem", capabilities=MEM_CAPABILITIES, adapter=MemoryStorage)
MEM_PRICED = dataclasses.replace(
    MEM, facts=SchemeFacts(price=StoragePrice(0.5, "a made-up $0.50/GiB-month for the test"))
)


def _uploaded(tmp_path: Path, backend: StorageBackend) -> tuple[RoutingStorage, str]:
    storage = RoutingStorage(registry=StorageRegistry([LOCAL, GCS, S3, backend]))
    local = write_sample_run(tmp_path / "sample", "completed-resumed")
    run_uri = upload_sample_run_to(storage, tmp_path / "sample", "mem://runs/iris")
    assert run_uri.startswith("mem://runs/iris/") and local.name in run_uri
    return storage, run_uri


def test_the_embedded_pipeline_runs_on_a_scheme_added_through_the_registry(tmp_path: Path) -> None:
    """The embedded default (`rlcleanup run`'s stack) over a router whose registry has `mem` besides the built-in
    schemes: capture, validation, selection and the ledger at completion, on a run that lives on `mem://`."""
    storage, run_uri = _uploaded(tmp_path, MEM)
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"), storage=storage)
    stack.emit(manual_event(run_uri, "SUCCEEDED"))

    (record,) = [r for r in stack.ports.records.list_runs() if r.run_uri == run_uri]
    assert record.status is RecordStatus.awaiting_authority and record.errors == []  # finished, a grant to decide
    assert [c.step for c in record.candidates] == [5, 10, 15, 20]  # validated where they lie, on mem://
    assert all(c.uri.startswith(run_uri) and c.valid for c in record.candidates)
    assert record.selection is not None and record.selection.status == "unresolved"  # as on disk: no declared policy
    preserved = [p for p in (tmp_path / "preserved").rglob("*") if p.is_file()]
    assert any(p.name == "terminal.json" for p in preserved)  # captured from mem:// to the local preserve root
    # The backend declares no price: the ledger is refused as unpriced, never priced as GCS or S3.
    assert record.storage_ledger is None and record.storage_ledger_note is not None
    assert "unpriced_scheme" in record.storage_ledger_note and "'mem'" in record.storage_ledger_note

    # The same objects, the backend now declaring a price: the ledger prices them at it, and the local
    # preserve root at its own (0).
    priced = RoutingStorage({"mem": storage.backend("mem")}, registry=StorageRegistry([LOCAL, MEM_PRICED]))
    ledger = storage_ledger.measure(priced, record, "test", datetime.now(UTC))
    held = sum(o.size for o in storage.list("mem://runs/iris"))  # the run root and its temp root
    assert sum(c.bytes for c in ledger.classes if c.name != "preserved_evidence") == held > 0  # each byte once
    assert ledger.monthly_usd == pytest.approx(held / 2**30 * 0.5, abs=1e-6)
    assert ledger.prices == "file: local disk $0 (the host's own disk); mem: a made-up $0.50/GiB-month for the test"


def test_an_unregistered_scheme_still_fails_closed(tmp_path: Path) -> None:
    storage = RoutingStorage(registry=StorageRegistry([LOCAL, MEM]))
    with pytest.raises(UnknownSchemeError, match="known schemes: file, mem"):
        storage.list("az://container/run")
    with pytest.raises(PermanentError, match="no list price for scheme 'az'") as caught:
        storage_ledger.Prices(storage).monthly_usd("az://container/run/x", 1)
    assert caught.value.code == "unpriced_scheme"
    with pytest.raises(UnknownSchemeError):
        RoutingStorage().list("mem://runs/iris")  # registered in this test's registry only, not the built-in one


def test_protection_and_the_visibility_fix_are_what_the_backend_declares(tmp_path: Path) -> None:
    """The reclaim preview's protection and a publish refusal's fix come from the scheme's SchemeFacts: a new
    scheme states its own, an undescribed one gets the safe generic text, never GCS's or S3's."""
    from rlcleanup.authority import publish, quarantine

    facts = SchemeFacts(protection="mem: nothing outlives the process", visibility_fix="mem: keep it in-process")
    described = dataclasses.replace(MEM, facts=facts)
    storage = RoutingStorage(registry=StorageRegistry([LOCAL, GCS, described]))
    assert quarantine.protection(storage, "mem://runs/x") == "mem: nothing outlives the process"
    assert publish.visibility_fix(storage, "mem://models/m", "no credentials here") == "mem: keep it in-process"
    undescribed = RoutingStorage(registry=StorageRegistry([LOCAL, GCS, MEM]))
    for uri in ("mem://runs/x", "az://c/x"):  # declared without facts, and not registered at all
        assert quarantine.protection(undescribed, uri) == SchemeFacts().protection
        assert publish.visibility_fix(undescribed, uri, "no credentials") == SchemeFacts().visibility_fix
    assert "soft delete" in quarantine.protection(storage, "gs://b/x")  # GCS's own, from its registration
    assert "GOOGLE_APPLICATION_CREDENTIALS" in publish.visibility_fix(storage, "gs://b/m", "DefaultCredentialsError")
    assert publish.visibility_fix(storage, "gs://b/m", "allUsers can read") == GCS.facts.visibility_fix


def test_a_backend_without_a_children_listing_is_listed_whole_by_discovery_and_refused_by_the_sweep() -> None:
    """Discovery cuts a whole listing at the first component (ports.storage.children reads `children_listing`);
    the sweep's paged children listing is refused (its `sweep_unsupported_storage`), never an unbounded listing."""
    storage = RoutingStorage(registry=StorageRegistry([LOCAL, MEM]))
    for key in ("a/x.json", "a/b/y.json", "c.json"):
        storage.write_if_absent(f"mem://runs/{key}", b"{}")
    assert child_names(storage, "mem://runs") == ["mem://runs/a", "mem://runs/c.json"]
    with pytest.raises(NotImplementedError, match="cannot list a prefix's children page by page"):
        storage.list_children("mem://runs")
