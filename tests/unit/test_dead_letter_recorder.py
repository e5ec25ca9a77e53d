"""Issue 47 item 2 in the deployed modes: a message Pub/Sub dead-lettered (its function never recorded anything: a
transient error that never cleared, a push that timed out, a server that was down) lands on the run's record through
the dead-letter recorder (runtime/dead_letters.py), and its step ends as the function's own permanent error would.

Pub/Sub is modelled by the in-process bus with its dead-letter hook doing what Pub/Sub does after
max_delivery_attempts: forward the message, unchanged and without the exception, to the `<function>-dlq` topic,
whose `<function>-dlq-record` push delivers it to record_dead_letter through the same dispatch a push would take.
The storage is a real one (the local files) that always fails one copy transiently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.inprocess_bus import Delivered, InProcessBus
from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.storage import StorageError, WriteOutcome
from rlcleanup.runtime.dead_letters import DEAD_LETTER_TOPIC, PUBSUB_DELIVERY_COUNT
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.handlers import dispatch
from rlcleanup.runtime.poison import RECORDED_ERROR
from rlcleanup.runtime.topology import load_topology
from rlcleanup.samples.generator import write_sample_run

RUN_ID = "math-rl-completed-resumed-2026.11.30"
RECORDER = "record_dead_letter"


class FailingCopies(RoutingStorage):
    """Local storage where copying a file whose name ends with `suffix` always fails transiently."""

    def __init__(self, suffix: str) -> None:
        super().__init__()
        self.suffix = suffix

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        if src_uri.endswith(self.suffix):
            raise StorageError(f"{src_uri}: connection reset by peer")
        return super().copy_if_absent(src_uri, dst_uri)


def _pubsub_stack(
    tmp_path: Path, storage: RoutingStorage, forwarded: list[Delivered], failing: str | None = None
) -> EmbeddedStack:
    """An embedded stack whose give-ups are Pub/Sub's: the message goes to the recorder, the exception nowhere.
    `failing`: the function whose messages are given up on, where its trigger feeds more than one."""
    bus = InProcessBus()
    topology = load_topology()
    stack: EmbeddedStack | None = None

    def forward(msg: Delivered, exc: Exception) -> None:
        fn = topology.function(failing) if failing else topology.subscribers(msg.topic)[0]
        forwarded.append(msg)
        assert stack is not None
        attributes = {**msg.attributes, DEAD_LETTER_TOPIC: fn.dead_letter_topic, PUBSUB_DELIVERY_COUNT: "10"}
        deliver_to_recorder(stack, msg.data, attributes)

    bus.on_dead_letter = forward
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "p"), bus=bus, storage=storage)
    return stack


def deliver_to_recorder(stack: EmbeddedStack, data: bytes, attributes: dict[str, str]) -> str:
    recorder = stack.ports.topology.function(RECORDER)
    return dispatch(stack.ports, RECORDER, recorder.dead_letter_topic, data, attributes, message_id="dl-1")


def _record(tmp_path: Path) -> Any:
    record = SqliteRunRecords(tmp_path / "r.db").get(RUN_ID)
    assert record is not None
    return record


def test_a_member_pubsub_gave_up_on_is_recorded_and_completed_as_failed(tmp_path: Path) -> None:
    forwarded: list[Delivered] = []
    stack = _pubsub_stack(tmp_path, FailingCopies("/terminal.json"), forwarded)
    stack.emit(manual_event(str(write_sample_run(tmp_path / "src", "completed-resumed"))))
    assert [m.topic for m in forwarded] == ["capture-parts"]
    record = _record(tmp_path)
    # The run finished (its fan-in fired: validation and selection ran), the failed part on its record.
    assert record.status is not RecordStatus.in_progress, record.status
    assert record.candidates, "the capture fan-in never fired after the member was completed as failed"
    [error] = [e for e in record.errors if e.code == "retries_exhausted"]
    assert error.step == "capture_part"
    assert "all 10 deliveries" in error.message
    assert "connection reset by peer" in error.message and "terminal.json" in error.message  # the last error noted
    assert "fix:" in error.message and "capture-part-dlq-sub" in error.message and "rlcleanup emit" in error.message
    unpreserved = [e for e in record.errors if e.step == "capture"]
    assert any("could not preserve" in e.message and "retries_exhausted" in e.message for e in unpreserved)

    # At-least-once: the same dead letter again changes nothing (one error, the finished record kept).
    again = {**forwarded[0].attributes, DEAD_LETTER_TOPIC: "capture-part-dlq", PUBSUB_DELIVERY_COUNT: "10"}
    deliver_to_recorder(stack, forwarded[0].data, again)
    after = _record(tmp_path)
    assert after.errors == record.errors and after.status is record.status


def test_a_pipeline_stage_pubsub_gave_up_on_fails_the_run(tmp_path: Path) -> None:
    forwarded: list[Delivered] = []
    stack = _pubsub_stack(tmp_path, RoutingStorage(), forwarded, failing="plan-capture")
    plan = stack.ports.topology.function("plan-capture")
    handlers = stack.bus.subscribers[stack.ports.topology.trigger_of(plan.name)]
    assert len(handlers) == 2  # run-classified feeds the terminal-state planner, then the capture planner

    def every_delivery_fails(data: bytes, attributes: dict[str, str], message_id: str) -> None:
        raise StorageError("listing timed out")  # as a store that never answers within its deadline

    handlers[1] = every_delivery_fails
    stack.emit(manual_event(str(write_sample_run(tmp_path / "src", "completed-resumed"))))
    assert [m.topic for m in forwarded] == ["run-classified"]
    record = _record(tmp_path)
    assert record.status is RecordStatus.failed, record.status
    [error] = [e for e in record.errors if e.code == "retries_exhausted"]
    assert error.step == "plan_capture" and "fix:" in error.message
    assert "a server that was down" in error.message  # this handler never ran dispatch: no last error was noted
    assert any("could not finish step plan_capture (retries_exhausted)" in w for w in record.remaining_work)


def test_a_member_stored_before_its_dead_letter_arrived_fails_nothing(tmp_path: Path) -> None:
    """At-least-once: a dead letter of a member whose outcome is stored (a duplicate forwarded late, a delivery that
    stored its work but never got its ack through) records nothing, fails nothing and leaves the member as it is."""
    stack = _pubsub_stack(tmp_path, RoutingStorage(), [])
    parts: list[bytes] = []
    stack.bus.subscribe("capture-parts", lambda data, attributes, message_id: parts.append(data))
    stack.emit(manual_event(str(write_sample_run(tmp_path / "src", "completed-resumed"))))
    assert parts
    stack.ports.records.update(RUN_ID, {"status": RecordStatus.in_progress.value})  # as while its fan-in still runs
    outcome = deliver_to_recorder(stack, parts[0], {DEAD_LETTER_TOPIC: "capture-part-dlq"})
    assert "stored already" in outcome
    record = _record(tmp_path)
    assert record.status is RecordStatus.in_progress and record.errors == []


def test_a_pipeline_step_stored_before_its_dead_letter_arrived_fails_nothing(tmp_path: Path) -> None:
    stack = _pubsub_stack(tmp_path, RoutingStorage(), [])
    classified: list[bytes] = []
    stack.bus.subscribe("run-classified", lambda data, attributes, message_id: classified.append(data))
    stack.emit(manual_event(str(write_sample_run(tmp_path / "src", "completed-resumed"))))
    stack.ports.records.update(RUN_ID, {"status": RecordStatus.in_progress.value})
    outcome = deliver_to_recorder(stack, classified[0], {DEAD_LETTER_TOPIC: "plan-capture-dlq"})
    assert "stored already" in outcome  # plan-capture's claim (capture-plan) is done for this run and pass
    record = _record(tmp_path)
    assert record.status is RecordStatus.in_progress and record.errors == []


def test_a_copy_the_function_parked_after_recording_is_not_recorded_twice(tmp_path: Path) -> None:
    stack = _pubsub_stack(tmp_path, RoutingStorage(), [])
    stack.emit(manual_event(str(write_sample_run(tmp_path / "src", "completed-resumed"))))
    before = _record(tmp_path)
    data = b'{"run_id": "' + RUN_ID.encode() + b'", "scope": "", "run_uri": "x", "preserve_root": "y"}'
    parked = {DEAD_LETTER_TOPIC: "plan-capture-dlq", RECORDED_ERROR: "invalid_message"}
    assert "recorded it already" in deliver_to_recorder(stack, data, parked)
    after = _record(tmp_path)
    assert after.errors == before.errors and after.status is before.status


@pytest.mark.parametrize("topic", ["", "record-dead-letter-dlq", "job-events"])
def test_only_another_functions_dead_letter_topic_is_recorded(tmp_path: Path, topic: str) -> None:
    """The recorder's own dead letters (and anything not a dead-letter topic) are refused, never looped."""
    stack = _pubsub_stack(tmp_path, RoutingStorage(), [])
    outcome = deliver_to_recorder(stack, b"{}", {DEAD_LETTER_TOPIC: topic})
    assert "unknown_dead_letter_topic" in outcome
