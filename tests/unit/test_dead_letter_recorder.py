"""Issue 47 item 2 in the deployed modes: a message Pub/Sub dead-lettered (its function never recorded anything: a
transient error that never cleared, a push that timed out, a server that was down) lands on the run's record through
the dead-letter recorder (runtime/dead_letters.py), and its step ends as the function's own permanent error would.

Pub/Sub is modelled by the in-process bus with its dead-letter hook doing what Pub/Sub does after
max_delivery_attempts: forward the message, unchanged and without the exception, to the `<function>-dlq` topic,
whose `<function>-dlq-record` push delivers it to record_dead_letter through the same dispatch a push would take.
The storage is a real one (the local files) that always fails one copy transiently."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import safety_eval_stage  # the development stage (tests/unit is on sys.path)

from rlcleanup.adapters.inprocess_bus import Delivered, InProcessBus
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.models.events import CandidateMessage
from rlcleanup.models.outcomes import ValidationOutcome
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.storage import StorageError, WriteOutcome
from rlcleanup.runtime.dead_letters import DEAD_LETTER_TOPIC, PUBSUB_DELIVERY_COUNT
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.handlers import dispatch
from rlcleanup.runtime.poison import RECORDED_ERROR
from rlcleanup.runtime.stage_table import StageTable
from rlcleanup.runtime.stages.barrier import member_key
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
    tmp_path: Path, storage: RoutingStorage, failing: str | None = None, table: StageTable | None = None
) -> tuple[EmbeddedStack, list[Delivered]]:
    """An embedded stack whose give-ups are Pub/Sub's: the message goes to the recorder, the exception nowhere;
    returned with the list of the messages forwarded so far. `failing`: the function whose messages are given up
    on, where its trigger feeds more than one. `table`: the stage table served (a development stack's,
    `stack up --stages`; None: the packaged one)."""
    bus = InProcessBus()
    forwarded: list[Delivered] = []
    topology = table.topology if table else load_topology()
    stack: EmbeddedStack | None = None

    def forward(msg: Delivered, exc: Exception) -> None:
        fn = topology.function(failing) if failing else topology.subscribers(msg.topic)[0]
        forwarded.append(msg)
        assert stack is not None
        attributes = {**msg.attributes, DEAD_LETTER_TOPIC: fn.dead_letter_topic, PUBSUB_DELIVERY_COUNT: "10"}
        deliver_to_recorder(stack, msg.data, attributes)

    bus.on_dead_letter = forward
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "p"), bus=bus, storage=storage, table=table)
    return stack, forwarded


def deliver_to_recorder(stack: EmbeddedStack, data: bytes, attributes: dict[str, str]) -> str:
    """The recorder's push, dispatched through the table the stack serves (as runtime/functions.py dispatches a
    development stack's deliveries through the table `serve_table` gave it)."""
    recorder = stack.ports.topology.function(RECORDER)
    return dispatch(
        stack.ports, RECORDER, recorder.dead_letter_topic, data, attributes, message_id="dl-1", table=stack.table
    )


def _record(tmp_path: Path) -> Any:
    record = SqliteRunRecords(tmp_path / "r.db").get(RUN_ID)
    assert record is not None
    return record


def test_a_member_pubsub_gave_up_on_is_recorded_and_completed_as_failed(tmp_path: Path) -> None:
    stack, forwarded = _pubsub_stack(tmp_path, FailingCopies("/terminal.json"))
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
    stack, forwarded = _pubsub_stack(tmp_path, RoutingStorage(), failing="plan-capture")
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
    stack, _ = _pubsub_stack(tmp_path, RoutingStorage())
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
    stack, _ = _pubsub_stack(tmp_path, RoutingStorage())
    classified: list[bytes] = []
    stack.bus.subscribe("run-classified", lambda data, attributes, message_id: classified.append(data))
    stack.emit(manual_event(str(write_sample_run(tmp_path / "src", "completed-resumed"))))
    stack.ports.records.update(RUN_ID, {"status": RecordStatus.in_progress.value})
    outcome = deliver_to_recorder(stack, classified[0], {DEAD_LETTER_TOPIC: "plan-capture-dlq"})
    assert "stored already" in outcome  # plan-capture's claim (capture-plan) is done for this run and pass
    record = _record(tmp_path)
    assert record.status is RecordStatus.in_progress and record.errors == []


def test_a_copy_the_function_parked_after_recording_is_not_recorded_twice(tmp_path: Path) -> None:
    stack, _ = _pubsub_stack(tmp_path, RoutingStorage())
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
    stack, _ = _pubsub_stack(tmp_path, RoutingStorage())
    outcome = deliver_to_recorder(stack, b"{}", {DEAD_LETTER_TOPIC: topic})
    assert "unknown_dead_letter_topic" in outcome


def test_a_development_stages_dead_letter_finds_its_row_in_the_served_table(tmp_path: Path) -> None:
    """Issue 46: the recorder reads the failed function's row from the stage table dispatch serves (`Ports.stages`),
    not the packaged one. On a `stack up --stages safety_eval_stage:TABLE` stack the new stage's dead letter is
    recorded on the run under its name and fails the run, as a packaged stage's does (the packaged table has no row
    for it: the recorder used to fail on it as a defect, and the run stayed in progress)."""
    table = safety_eval_stage.TABLE
    stack, forwarded = _pubsub_stack(tmp_path, RoutingStorage(), table=table)
    [handlers] = [stack.bus.subscribers[safety_eval_stage.TOPIC]]

    def every_delivery_fails(data: bytes, attributes: dict[str, str], message_id: str) -> None:
        raise StorageError("the safety model's endpoint timed out")

    handlers[0] = every_delivery_fails
    stack.emit(manual_event(str(write_sample_run(tmp_path / "src", "completed-resumed"))))
    assert [m.topic for m in forwarded] == [safety_eval_stage.TOPIC]
    record = _record(tmp_path)
    [error] = [e for e in record.errors if e.code == "retries_exhausted"]
    assert error.step == "safety_eval" and "safety-eval-dlq-sub" in error.message
    assert record.status is RecordStatus.failed, record.status
    assert any("could not finish step safety_eval (retries_exhausted)" in w for w in record.remaining_work)


class CountingClaims(SqliteIdempotencyStore):
    """The stack's own claims store, noting the prefix of every done-key read."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.done_key_reads: list[str] = []

    def done_keys(self, run_id: str, prefix: str) -> set[str]:
        self.done_key_reads.append(prefix)
        return super().done_keys(run_id, prefix)


def test_a_dead_letter_of_a_batch_reads_its_members_outcomes_once(tmp_path: Path) -> None:
    """Issue 46: a validation batch of several members is one dead letter: the recorder reads which of them are
    stored once, not once per member, and still fails only those not stored."""
    stack, _ = _pubsub_stack(tmp_path, RoutingStorage())
    batches: list[CandidateMessage] = []
    stack.bus.subscribe(
        "candidate-validation",
        lambda data, attributes, message_id: batches.append(CandidateMessage.model_validate_json(data)),
    )
    stack.emit(manual_event(str(write_sample_run(tmp_path / "src", "completed-resumed"))))
    [batch] = [b for b in batches if len(b.members) > 1]  # a batch, or the count below proves nothing
    keys = {member: member_key(stack.ports, batch.scope, "validation", member) for member in batch.members}
    kept, *lost = batch.members
    before = stack.ports.claims.result(RUN_ID, keys[kept])
    for member in lost:  # as if these members' deliveries had died before storing their outcomes
        found = stack.ports.claims._get(RUN_ID, keys[member])
        assert found is not None and stack.ports.claims._delete(RUN_ID, keys[member], found[1])
    stack.ports.records.update(RUN_ID, {"status": RecordStatus.in_progress.value})
    counting = CountingClaims(tmp_path / "r.db")
    stack.ports = replace(stack.ports, claims=counting)

    deliver_to_recorder(stack, batch.model_dump_json().encode(), {DEAD_LETTER_TOPIC: "validate-candidate-dlq"})
    member_reads = [prefix for prefix in counting.done_key_reads if prefix.startswith("validate:")]
    assert len(member_reads) == 1, counting.done_key_reads  # was one per member
    assert counting.result(RUN_ID, keys[kept]) == before  # the stored member is left as it was
    for member in lost:  # the others are completed as failed, each with its own error
        outcome = counting.result_as(RUN_ID, keys[member], ValidationOutcome)
        assert outcome is not None and "retries_exhausted" in outcome.model_dump_json(), member
