"""Record-store outages: classified transient (500 → redelivery), logged once at ERROR naming run, step and cause;
a database that came back empty is a permanent, explained error; every Firestore call has a bounded deadline."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from google.api_core import exceptions as gexc

from rlcleanup.adapters.firestore_claims import FirestoreIdempotencyStore
from rlcleanup.adapters.firestore_client import timeout_seconds
from rlcleanup.adapters.firestore_records import FirestoreRunRecords
from rlcleanup.errors import (
    ErrorKind,
    PermanentError,
    RecordStoreLost,
    RecordStoreUnavailable,
    RetryLater,
    error_kind,
)
from rlcleanup.runtime.logging_setup import CloudLoggingFormatter, set_context
from rlcleanup.settings import SettingsError


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter())
    logger = logging.getLogger("rlcleanup.adapters")  # firestore_client (outages) and firestore_claims (lost data)
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    set_context(run_id=None, step="capture_part", event_id="m-1")
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        set_context()


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line]


def test_unavailable_is_transient_and_names_run_step_and_cause() -> None:
    err = RecordStoreUnavailable("run-1", "capture_part", "claim capture-part:run-0", gexc.ServiceUnavailable("down"))
    assert error_kind(err) is ErrorKind.transient  # transient: re-raised → HTTP 500 → Pub/Sub redelivers
    assert not isinstance(err, RetryLater | PermanentError)
    text = str(err)
    assert "run run-1" in text and "step capture_part" in text and "claim capture-part:run-0" in text
    assert "ServiceUnavailable" in text and "down" in text
    assert err.cause.startswith("ServiceUnavailable")


def test_unavailable_cause_is_one_bounded_line() -> None:
    err = RecordStoreUnavailable(None, None, "get record", RuntimeError("x" * 1000 + "\nsecond line"))
    assert "\n" not in err.cause and len(err.cause) <= 300
    assert "run ?" in str(err) and "step ?" in str(err)


@pytest.mark.parametrize(
    "exc",
    [
        gexc.ServiceUnavailable("x"),
        gexc.DeadlineExceeded("x"),
        gexc.RetryError("Timeout of 10.0s exceeded", None),
        requests.ConnectionError("reset"),
        requests.Timeout("read timed out"),
    ],
)
def test_raw_client_unavailability_is_transient_too(exc: Exception) -> None:
    assert error_kind(exc) is ErrorKind.transient


def test_lost_database_is_permanent_and_says_what_remains() -> None:
    err = RecordStoreLost("run-1", "establish_terminal_state", "2026-12-02T17:20:37+00:00")
    assert error_kind(err) is ErrorKind.domain and err.code == "record_store_lost"
    text = str(err)
    assert "run run-1" in text and "establish_terminal_state" in text and "2026-12-02T17:20:37" in text
    assert "`rlcleanup recover run-1`" in text and "when the database was created again" in text


class _Ref:
    """A document/collection/batch stand-in: each call records its kwargs, then runs `behaviour`."""

    def __init__(self, behaviour: Any, calls: list[dict[str, Any]]) -> None:
        self.behaviour = behaviour
        self.calls = calls

    def __getattr__(self, name: str) -> Any:
        if name in ("collection", "document", "where", "order_by", "limit", "batch"):
            return lambda *a, **k: self

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append({"method": name, **kwargs})
            return self.behaviour(name)

        return call


def _store(behaviour: Any, calls: list[dict[str, Any]], timeout: float = 2.5) -> FirestoreIdempotencyStore:
    records = FirestoreRunRecords(project="p", client=_Ref(behaviour, calls), timeout=timeout)
    records._client.write_option = lambda **k: None
    return FirestoreIdempotencyStore(records)


def test_every_call_has_a_bounded_retry_and_timeout() -> None:
    calls: list[dict[str, Any]] = []

    class Snap:
        exists = False

        def to_dict(self) -> None:
            return None

    store = _store(lambda name: Snap() if name == "get" else [], calls)
    assert store.records.get("run-1") is None
    store.results("run-1", "validate:")
    store.result("run-1", "select")
    rpc = [c for c in calls if c["method"] in ("get", "stream")]
    assert rpc and all(c["timeout"] in (2.5, 7.5) for c in rpc)
    assert all(c["retry"]._timeout == 2.5 for c in rpc)  # retries end with the deadline, not after 60-300 s


def test_outage_raises_unavailable_and_logs_error_with_run_step_cause(json_log: io.StringIO) -> None:
    def down(name: str) -> Any:
        raise gexc.RetryError("Timeout of 2.5s exceeded", gexc.ServiceUnavailable("connection refused"))

    store = _store(down, [])
    with pytest.raises(RecordStoreUnavailable) as info:
        store.result("run-7", "capture-plan")
    assert info.value.run_id == "run-7" and info.value.step == "capture_part"
    assert error_kind(info.value) is ErrorKind.transient
    (line,) = _lines(json_log)
    assert line["severity"] == "ERROR"
    assert line["run_id"] == "run-7" and line["step"] == "capture_part"
    assert "record store unavailable" in line["message"] and "Timeout of 2.5s exceeded" in line["message"]
    assert line["error"]["type"] == "RecordStoreUnavailable"
    assert line["error"]["operation"] == "read claim capture-plan"


def test_claim_during_outage_raises_unavailable(json_log: io.StringIO) -> None:
    def down(name: str) -> Any:
        raise gexc.ServiceUnavailable("failed to connect to all addresses")

    from datetime import UTC, datetime

    with pytest.raises(RecordStoreUnavailable, match="run run-8, step capture_part"):
        _store(down, []).claim("run-8", "capture-part:run-0", 60, datetime.now(UTC))


def test_not_found_and_conflicts_are_not_outages() -> None:
    def missing(name: str) -> Any:
        if name == "commit":
            raise gexc.NotFound("no document")

    with pytest.raises(KeyError):  # updating a missing record stays the SQLite contract's KeyError
        _store(missing, []).records.update("run-9", {"status": "failed"})


class _EpochSnap:
    def __init__(self, exists: bool, data: dict[str, Any] | None = None) -> None:
        self.exists, self.data = exists, data

    def to_dict(self) -> dict[str, Any] | None:
        return self.data


class _EpochRef:
    """The few Firestore client calls the epoch check makes: the meta document reads the next of `meta`, a run's
    document exists when its id is in `runs`."""

    def __init__(self, meta: Iterator[dict[str, Any]], runs: set[str], path: str = "") -> None:
        self.meta, self.runs, self.path = meta, runs, path

    def collection(self, name: str) -> _EpochRef:
        return _EpochRef(self.meta, self.runs, name)

    def document(self, doc_id: str) -> _EpochRef:
        return _EpochRef(self.meta, self.runs, f"{self.path}/{doc_id}")

    def get(self, **kwargs: Any) -> _EpochSnap:
        if self.path.startswith("rlcleanup_meta/"):
            return _EpochSnap(True, next(self.meta))
        return _EpochSnap(self.path.removeprefix("runs/") in self.runs)


def _epoch_store(meta: Iterator[dict[str, Any]], runs: set[str]) -> FirestoreIdempotencyStore:
    return FirestoreIdempotencyStore(FirestoreRunRecords(project="p", client=_EpochRef(meta, runs), timeout=1))


def test_changed_epoch_raises_lost_for_runs_whose_record_is_gone(json_log: io.StringIO) -> None:
    epochs = iter(["a", "a", "b", "b", "b", "b"])
    records = {"run-new"}  # created after the reset (e.g. by a re-emitted terminal event)

    store = _epoch_store(({"epoch": epoch} for epoch in epochs), records)
    store.check_epoch("run-1", "terminal")
    store.check_epoch("run-1", "terminal")  # unchanged epoch: no extra read, no error
    with pytest.raises(RecordStoreLost) as info:
        store.check_epoch("run-1", "capture-part:run-0")  # the database came back empty under this run
    assert info.value.code == "record_store_lost" and "run run-1, step capture_part" in str(info.value)
    store.check_epoch("run-2", "classify")  # a run starting now has nothing to lose
    store.check_epoch("run-new", "terminal")  # a run recreated since the reset carries on
    with pytest.raises(RecordStoreLost):
        store.check_epoch("run-1", "select")  # still gone: every later step of it says so
    (line, _) = _lines(json_log)
    assert line["severity"] == "ERROR" and line["error"] == {"type": "RecordStoreLost", "claim": "capture-part:run-0"}
    assert line["run_id"] == "run-1" and line["step"] == "capture_part"


def test_lost_since_is_when_the_database_was_created_again_not_when_the_worker_first_looked() -> None:
    """Issue 48: the error said the worker's first look at the database (possibly hours before the reset)."""
    from datetime import UTC, datetime

    reset_at = datetime(2026, 12, 2, 17, 20, 37, tzinfo=UTC)
    docs = iter(
        [
            {"epoch": "a", "created_at": datetime(2026, 12, 1, 9, 0, tzinfo=UTC)},
            {"epoch": "b", "created_at": reset_at},
        ]
    )

    store = _epoch_store(docs, set())
    store.check_epoch("run-1", "terminal")
    with pytest.raises(RecordStoreLost) as info:
        store.check_epoch("run-1", "capture-part:run-0")
    assert "written before 2026-12-02T17:20:37+00:00 (when the database was created again" in str(info.value)
    assert store.database_created_at() == reset_at


def test_timeout_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS", "3")
    assert timeout_seconds() == 3.0
    monkeypatch.delenv("RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS")
    assert timeout_seconds() == 30.0
    monkeypatch.setenv("RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS", "nonsense")
    with pytest.raises(SettingsError, match="RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS='nonsense'"):
        timeout_seconds()


def test_redelivery_of_the_same_message_takes_its_own_lease_over() -> None:
    """An attempt that failed during an outage could not release its claim; its redelivery (same Pub/Sub message
    id) takes the lease over instead of answering "busy" until the lease runs out. Another message still waits."""
    from datetime import UTC, datetime, timedelta

    from rlcleanup.ports.records import Claim

    now = datetime.now(UTC)
    updates: list[dict[str, Any]] = []

    class Snap:
        exists = True
        update_time = now

        def to_dict(self) -> dict[str, Any]:
            return {"state": "running", "lease_until": now + timedelta(seconds=540), "owner": "msg-1"}

    class Ref:
        def collection(self, name: str) -> Ref:
            return self

        def document(self, doc_id: str) -> Ref:
            return self

        def create(self, data: dict[str, Any], **kwargs: Any) -> None:
            raise gexc.AlreadyExists("claimed")

        def get(self, **kwargs: Any) -> Snap:
            return Snap()

        def update(self, data: dict[str, Any], **kwargs: Any) -> None:
            updates.append(data)

        def write_option(self, **kwargs: Any) -> None:
            return None

    store = FirestoreIdempotencyStore(FirestoreRunRecords(project="p", client=Ref(), timeout=1))
    store.check_epoch = lambda run_id, key: None  # type: ignore[method-assign]
    # The owner is passed explicitly: the logging context's event id no longer matters.
    set_context(step="capture_part", event_id="msg-1")
    try:
        assert store.claim("run-1", "capture-part:run-0", 540, now, owner="msg-2") is Claim.busy
        assert store.claim("run-1", "capture-part:run-0", 540, now) is Claim.busy
        assert store.claim("run-1", "capture-part:run-0", 540, now, owner="msg-1") is Claim.acquired
    finally:
        set_context()
    assert [u["owner"] for u in updates] == ["msg-1"]
