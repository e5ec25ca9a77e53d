"""The publish guard: a function may publish only to the topics topology.yaml declares for it (Terraform grants
exactly those), and it is on wherever `dispatch` runs a handler."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.inprocess_bus import Delivered, InProcessBus
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime import evidence, guard, handlers
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.guard import GuardedBus, UndeclaredPublish, guarded_bus
from rlcleanup.runtime.handlers import resolve_run_id
from rlcleanup.runtime.stage_table import stage_table
from rlcleanup.runtime.topology import load_topology
from rlcleanup.samples.generator import write_sample_run


def test_guard_passes_declared_topics_and_refuses_the_rest(undeclared_publishes: list[str]) -> None:
    bus = InProcessBus()
    spec = load_topology().function("validate-candidate")
    guarded = guarded_bus(bus, spec)
    guarded.publish("run-selection", b"{}")
    guarded.publish("validate-candidate-dlq", b"{}")
    with pytest.raises(UndeclaredPublish, match="validate-candidate published to 'record-ready'"):
        guarded.publish("record-ready", b"{}")
    assert [m.topic for m in bus.published] == ["run-selection", "validate-candidate-dlq"]
    assert undeclared_publishes == ["validate-candidate -> record-ready"]
    undeclared_publishes.clear()  # provoked on purpose


def test_reguarding_replaces_the_function_instead_of_stacking() -> None:
    bus = InProcessBus()
    topology = load_topology()
    twice = guarded_bus(guarded_bus(bus, topology.function("on-job-event")), topology.function("select-candidate"))
    assert isinstance(twice, GuardedBus) and twice.inner is bus
    twice.publish("record-ready", b"{}")  # select-candidate's topic, not on-job-event's
    assert [m.topic for m in bus.published] == ["record-ready"]


def test_dispatch_runs_every_handler_behind_the_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, undeclared_publishes: list[str]
) -> None:
    def strays(p: Any, data: bytes, attributes: dict[str, str]) -> str:
        p.bus.publish("record-ready", b"{}", {})
        return "published"

    table = stage_table()
    monkeypatch.setitem(table.rows, "on_job_event", replace(table.row("on_job_event"), handler=strays, message=bytes))
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))
    with pytest.raises(UndeclaredPublish):  # a defect, not bad input: raised (retried), never recorded as data
        handlers.dispatch(stack.ports, "on_job_event", "on-job-event-dlq", b"{}", {})
    assert [m.topic for m in stack.bus.published] == []
    undeclared_publishes.clear()


class ReentrantBus(InProcessBus):
    """Delivers each message inside `publish`, before the publisher's own result is stored: Pub/Sub may deliver a
    fan-out member before the planner finishes, so a planner can be the one to find its fan-out complete."""

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        msg = Delivered(topic, data, dict(attributes or {}), str(next(self._ids)))
        self.published.append(msg)
        for handler in self.subscribers.get(topic, []):
            try:
                handler(msg.data, msg.attributes, msg.message_id)
            except Exception:
                self._queue.append((msg, handler, 2))  # a nack: redelivered by drain()
        return msg.message_id


@pytest.mark.parametrize(
    ("first", "fan_in_in"), [("establish-terminal-state", "plan-capture"), ("plan-capture", "establish-terminal-state")]
)
def test_the_capture_fan_in_runs_inside_a_planner_and_publishes_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str, fan_in_in: str
) -> None:
    """Whichever of the two planners of run-classified stores the last piece starts validation: both must declare
    candidate-validation (before this, plan-capture did not, and would have got 403 in a deployment)."""
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
    publishes: list[tuple[str, str]] = []
    original = GuardedBus.publish

    def recording(self: GuardedBus, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        publishes.append((self.spec.name, topic))
        return original(self, topic, data, attributes)

    monkeypatch.setattr(guard.GuardedBus, "publish", recording)
    run_root = write_sample_run(tmp_path / "sample", "completed-resumed")
    bus = ReentrantBus()
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"), bus=bus)
    assert [fn.name for fn in load_topology().subscribers("run-classified")] == [
        "establish-terminal-state",
        "plan-capture",
    ]
    if first == "plan-capture":  # subscribed in topology order
        bus.subscribers["run-classified"].reverse()  # plan-capture is delivered before establish-terminal-state
    event = manual_event(str(run_root))
    stack.emit(event)
    record = stack.ports.records.get(resolve_run_id(stack.ports, event))
    assert record is not None and record.status in {RecordStatus.complete, RecordStatus.awaiting_authority}
    validation_publishers = {fn for fn, topic in publishes if topic == "candidate-validation"}
    assert validation_publishers == {fan_in_in}
    assert bus.dead_letters == []
