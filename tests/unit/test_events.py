"""Job-state events in: validation, envelope decoding, and the handlers' permanent-error and no-op paths."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from rlcleanup.errors import PermanentError
from rlcleanup.models.events import JobEvent
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.embedded import EmbeddedStack
from rlcleanup.runtime.envelope import decode_cloud_event
from rlcleanup.samples.generator import write_sample_run

NOW = datetime.now(UTC)


class _FixedClock:
    def __init__(self, now: datetime) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now


DLQ = "on-job-event-dlq"
RUN_ID = "math-rl-completed-resumed-2026.11.30"


def _event(**kw: Any) -> JobEvent:
    fields: dict[str, Any] = {
        "source": "iris",
        "job_id": "/marin/job",
        "run_uri": "gs://b/r/v1",
        "state": "SUCCEEDED",
        "observed_at": NOW,
    }
    return JobEvent.model_validate(fields | kw)


# ---------------------------------------------------------------- JobEvent


@pytest.mark.parametrize(
    ("state", "name", "terminal"),
    [
        (1, "PENDING", False),
        (2, "BUILDING", False),
        (3, "RUNNING", False),
        (4, "SUCCEEDED", True),
        (5, "FAILED", True),
        (6, "KILLED", True),
        (7, "WORKER_FAILED", True),
        (8, "UNSCHEDULABLE", True),
    ],
)
def test_iris_int_states_become_names(state: int, name: str, terminal: bool) -> None:
    event = _event(state=state)
    assert (event.state, event.is_terminal) == (name, terminal)


@pytest.mark.parametrize(
    ("source", "state", "terminal"),
    [
        ("ray", "STOPPED", True),
        ("ray", "PENDING", False),
        ("skypilot", "FAILED_SETUP", True),
        ("skypilot", "CANCELLED", True),
        ("skypilot", "RECOVERING", False),
        ("k8s", "Complete", True),
        ("k8s", "Running", False),
        ("marin", "DEP_FAILED", True),
        ("marin", "RUNNING", False),
        ("iris", "failed", True),  # spelled in lower case by a hand-written event
        ("iris", "CANCELLED", False),  # not an Iris state
        ("ray", "ABSENT", True),  # the job vanished: terminal without a verdict
        ("slurm", "FAILED", True),  # unknown source: any known terminal spelling
        ("slurm", "5", False),  # ...but bare Iris numbers only mean something from Iris
        ("manual", "ENDED", True),
    ],
)
def test_terminal_detection_per_source(source: str, state: str, terminal: bool) -> None:
    assert _event(source=source, state=state).is_terminal is terminal


def test_vanished_controller_and_manual_events() -> None:
    assert _event(state="RUNNING", pods_alive=0).controller_absent is True
    assert _event(state="RUNNING", pods_alive=2).controller_absent is False
    assert _event(state="GONE").controller_absent is True
    assert _event(source="manual", state="ENDED").controller_state is None
    assert _event(state=5).controller_state == "FAILED"


@pytest.mark.parametrize("run_uri", ["gs://b/runs/../secrets", "../etc", "/runs/x/..", "/runs/a\x00b"])
def test_path_traversal_in_run_uri_is_rejected(run_uri: str) -> None:
    with pytest.raises(ValidationError, match="must not contain"):
        _event(run_uri=run_uri)


def test_dots_inside_names_are_fine() -> None:
    assert _event(run_uri="gs://b/math-rl/2026.11.30/..hidden").run_uri == "gs://b/math-rl/2026.11.30/..hidden"


def test_pre_cancel_intent() -> None:
    event = _event(state="RUNNING", intent="pre_cancel")
    assert event.intent == "pre_cancel"
    assert event.event_key != _event(state="RUNNING").event_key
    with pytest.raises(ValidationError):
        _event(intent="cancel_now")


def test_event_key_is_the_domain_identity() -> None:
    a = _event(extra_field="ignored", exit_code=1)
    assert a.event_key == _event(exit_code=0).event_key  # a publisher retry is the same event
    assert a.event_key != _event(state="FAILED").event_key
    assert a.event_key != _event(observed_at=NOW + timedelta(seconds=1)).event_key


# ---------------------------------------------------------------- envelope


def _envelope(data: bytes, **message: Any) -> dict[str, Any]:
    return {"message": {"data": base64.b64encode(data).decode(), **message}, "subscription": "projects/p/subs/s"}


def test_envelope_decodes_base64_and_attributes() -> None:
    raw = _envelope(b'{"x": 1}', attributes={"source": "iris", "n": 3}, messageId="42")
    msg = decode_cloud_event(raw, source="//pubsub.googleapis.com/projects/p/topics/job-events")
    assert (msg.data, msg.attributes, msg.message_id, msg.topic) == (
        b'{"x": 1}',
        {"source": "iris", "n": "3"},
        "42",
        "job-events",
    )
    as_text = decode_cloud_event(json.dumps(_envelope(b"hi", message_id="7")))
    assert (as_text.data, as_text.attributes, as_text.message_id, as_text.topic) == (b"hi", {}, "7", None)


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({"subscription": "s"}, "no Pub/Sub `message`"),
        ({"message": "not a dict"}, "no Pub/Sub `message`"),
        ({"message": {"data": "%%% not base64 %%%"}}, "not base64"),
        ({"message": {"data": 12}}, "not a base64 string"),
        (b"{not json", "not JSON"),
        ("[1, 2]", "no Pub/Sub `message`"),
    ],
)
def test_envelope_rejects_bad_input_permanently(payload: Any, match: str) -> None:
    with pytest.raises(PermanentError, match=match) as info:
        decode_cloud_event(payload)
    assert info.value.code == "undecodable"


# ---------------------------------------------------------------- handlers over the embedded stack


@pytest.fixture()
def stack(tmp_path: Path) -> EmbeddedStack:
    return EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))


def _publish(stack: EmbeddedStack, data: bytes) -> None:
    stack.bus.publish("job-events", data, {"source": "test"})
    stack.bus.drain()


def _ledger(db: Path) -> list[tuple[str, str, dict[str, Any]]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT run_id, event_id, outcome FROM events ORDER BY rowid").fetchall()
    return [(run_id, event_id, json.loads(outcome)) for run_id, event_id, outcome in rows]


def _topics(stack: EmbeddedStack) -> list[str]:
    return [m.topic for m in stack.bus.published]


@pytest.mark.parametrize(
    "data",
    [b"\xff\xfe not json at all", b'{"source": "iris", "state": "FAILED"}', b"[]"],
)
def test_malformed_event_is_parked_and_dead_lettered(stack: EmbeddedStack, data: bytes) -> None:
    _publish(stack, data)
    key = hashlib.sha256(data).hexdigest()[:32]
    docs = stack.ports.records.list_docs("poison_messages")
    assert [doc_id for doc_id, _ in docs] == [key]
    doc = docs[0][1]
    assert (doc["step"], doc["code"], doc["size"]) == ("on_job_event", "invalid_message", len(data))
    dead = [m for m in stack.bus.published if m.topic == DLQ]
    assert len(dead) == 1
    assert dead[0].data == data
    assert dead[0].attributes == {
        "source": "test",
        "rlcleanup_error": "invalid_message",
        "rlcleanup_step": "on_job_event",
    }
    assert stack.bus.dead_letters == []  # acked after recording: no redelivery loop
    assert list(stack.ports.records.list_runs()) == []


def test_malformed_event_naming_a_run_is_filed_never_on_a_record_it_only_names(stack: EmbeddedStack) -> None:
    """A malformed event binds nothing: the run it names may be another's (docs/authority.md §8 P11). It is filed
    with its error and dead-lettered; no record is created under the id it names."""
    data = json.dumps({"run_uri": "/runs/math-rl/v1", "state": "FAILED"}).encode()
    _publish(stack, data)
    assert stack.ports.records.get("math-rl-v1") is None
    [(_, filed)] = stack.ports.records.list_docs("poison_messages")
    assert (filed["step"], filed["code"]) == ("on_job_event", "invalid_message")
    assert _topics(stack) == ["job-events", DLQ]


def test_event_for_a_run_without_config_is_an_unreadable_run(stack: EmbeddedStack, tmp_path: Path) -> None:
    root = tmp_path / "runs" / "math-rl" / "v1"
    root.mkdir(parents=True)
    (root / ".executor_status").write_text("FAILED\n")
    stack.emit(_event(run_uri=str(root), state="FAILED"))
    # Filed under its own location's id (hashed: never an id a real run could declare, docs/authority.md §8 P11).
    [record] = [r for r in stack.ports.records.list_runs() if r.run_uri == str(root)]
    assert record.run_id.startswith("math-rl-v1-") and record.run_id != "math-rl-v1"
    assert (record.status, record.run_uri) == (RecordStatus.failed, str(root))
    assert len(record.errors) == 1
    error = record.errors[0]
    assert (error.step, error.code) == ("on_job_event", "unreadable_run")
    assert error.message.startswith(f"no resolved configuration under {root}")
    assert "(looked for resolved-skyrl.json" in error.message
    assert _topics(stack) == ["job-events", DLQ]


def test_stale_event_is_dropped_and_ledgered(stack: EmbeddedStack, tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    stack.ports.settings = stack.ports.settings.model_copy(update={"max_event_age_seconds": 3600})
    stack.ports.clock = _FixedClock(NOW)  # the age is then exact, however long the suite has been running
    event = _event(run_uri=str(root), state="SUCCEEDED", observed_at=NOW - timedelta(hours=2))
    stack.emit(event)
    assert stack.ports.records.get(RUN_ID) is None
    assert _topics(stack) == ["job-events"]
    [(run_id, event_id, outcome)] = _ledger(tmp_path / "r.db")
    assert (run_id, event_id, outcome["state"]) == (RUN_ID, event.event_key, "SUCCEEDED")
    assert outcome["outcome"].startswith("dropped: ") and outcome["outcome"].endswith("s old")
    assert outcome["outcome"] == "dropped: 7200s old"


def test_non_terminal_event_changes_nothing(stack: EmbeddedStack, tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    event = _event(run_uri=str(root), state=3)
    stack.emit(event)
    assert stack.ports.records.get(RUN_ID) is None
    assert not (tmp_path / "preserved").exists()
    assert _topics(stack) == ["job-events"]
    assert _ledger(tmp_path / "r.db") == [
        (RUN_ID, event.event_key, {"state": "RUNNING", "outcome": "ignored: non-terminal"})
    ]


def test_pre_cancel_is_routed_not_cleaned_up(stack: EmbeddedStack, tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    event = _event(run_uri=str(root), state="RUNNING", intent="pre_cancel")
    stack.emit(event)
    # Routed to the pre-cancel capture; the cleanup pipeline (classify, terminal state, capture) never starts.
    assert _topics(stack)[:2] == ["job-events", "pre-cancel"]
    assert stack.bus.published[1].attributes == {"run_id": RUN_ID}
    assert "run-classified" not in _topics(stack)
    record = stack.ports.records.get(RUN_ID)
    assert record is None or (record.classification, record.terminal_state, record.candidates) == (None, None, [])
    assert _ledger(tmp_path / "r.db")[0] == (
        RUN_ID,
        event.event_key,
        {"state": "RUNNING", "outcome": "pre_cancel requested"},
    )


def test_duplicate_terminal_event_is_a_no_op(stack: EmbeddedStack, tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    event = _event(run_uri=str(root), state="SUCCEEDED")
    stack.emit(event)
    first = stack.ports.records.get(RUN_ID)
    assert first is not None and first.status is RecordStatus.awaiting_authority
    published = len(stack.bus.published)
    manifest = (tmp_path / "preserved" / RUN_ID / "manifest.json").read_bytes()

    stack.emit(event)  # a publisher retry
    stack.emit(_event(run_uri=str(root), state="SUCCEEDED", observed_at=NOW + timedelta(minutes=1)))  # a re-poll
    assert stack.ports.records.get(RUN_ID) == first  # not even updated_at moved
    assert _topics(stack)[published:] == ["job-events", "job-events"]
    assert (tmp_path / "preserved" / RUN_ID / "manifest.json").read_bytes() == manifest
    assert [o["outcome"] for _, _, o in _ledger(tmp_path / "r.db")] == ["terminal", "terminal"]
