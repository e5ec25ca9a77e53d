"""The job-state controller registry: a controller added through the registry alone is polled by the sweep and
asked by the pre-cancel capture; a name nobody registered fails closed, naming the known ones."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlcleanup.adapters.controllers.registry import BUILTIN, ControllerKind, ControllerRegistry
from rlcleanup.models.events import JobEvent
from rlcleanup.ports.controllers import ControllerSnapshot, FinishedJob, Seen, UnknownControllerError
from rlcleanup.runtime.embedded import EmbeddedStack
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.settings import DeploymentSettings, unconfigured

RUN_ID = f"math-rl-completed-resumed-{VERSION}"


@dataclass
class DummySky:
    """A controller for SkyPilot (a source of the state table with no controller of its own): one finished job."""

    run_uri: str
    name: str = "skypilot"
    polls: bool = True
    snapshots: list[str] = field(default_factory=list)

    def list_finished(self, seen: Seen, now: datetime) -> list[FinishedJob]:
        key = "skypilot-job-7"
        if seen(key):
            return []
        event = JobEvent(source="skypilot", job_id="sky/7", run_uri=self.run_uri, state="SUCCEEDED", observed_at=now)
        return [FinishedJob(key=key, event=event, reason="sky/7 SUCCEEDED")]

    def snapshot(self, job_id: str) -> ControllerSnapshot:
        self.snapshots.append(job_id)
        return ControllerSnapshot(source="skypilot", job_id=job_id, state="RUNNING", raw={"cluster": "sky-a"})


def _stack(tmp_path: Path, registry: ControllerRegistry) -> EmbeddedStack:
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"), settings=unconfigured())
    stack.ports.controllers = registry  # the wiring hands the registry in; nothing else knows the controller
    return stack


def _pre_cancel(run_uri: str) -> JobEvent:
    return JobEvent(
        source="skypilot",
        job_id="sky/7",
        run_uri=run_uri,
        state="RUNNING",
        observed_at=datetime.now(UTC),
        intent="pre_cancel",
    )


def _with(controller: DummySky) -> ControllerRegistry:
    return ControllerRegistry([*BUILTIN.kinds, ControllerKind("skypilot", lambda settings: controller)])


def test_a_controller_added_to_the_registry_is_polled_by_the_sweep(tmp_path: Path) -> None:
    run_uri = str(write_sample_run(tmp_path / "runs", "completed-resumed"))
    stack = _stack(tmp_path, _with(DummySky(run_uri)))
    for _ in range(2):  # a tick fans out a poll per polling controller; the second finds the job seen
        stack.bus.publish("sweep", b"", {})
        stack.bus.drain()
    polls = [json.loads(m.data) for m in stack.bus.published if m.topic == "sweep" and m.data]
    assert [p["source"] for p in polls if p["kind"] == "controller"] == ["skypilot", "skypilot"]  # iris, ray: unset
    events = [JobEvent.model_validate_json(m.data) for m in stack.bus.published if m.topic == "job-events"]
    assert [(e.source, e.job_id, e.state) for e in events] == [("skypilot", "sky/7", "SUCCEEDED")]
    record = stack.ports.records.get(RUN_ID)
    assert record is not None and record.controller_state is not None  # the pipeline ran on the event
    assert "skypilot" in record.controller_state and "SUCCEEDED" in record.controller_state


def test_a_controller_added_to_the_registry_is_asked_by_the_pre_cancel_capture(tmp_path: Path) -> None:
    run_uri = str(write_sample_run(tmp_path / "runs", "completed-resumed"))
    controller = DummySky(run_uri)
    stack = _stack(tmp_path, _with(controller))
    stack.emit(_pre_cancel(run_uri))
    assert controller.snapshots == ["sky/7"]
    record = stack.ports.records.get(RUN_ID)
    assert record is not None and record.pre_cancel is not None
    assert record.pre_cancel.controller_state == "skypilot:RUNNING"
    written = json.loads((Path(record.pre_cancel.capture_uri).parent / "controller.json").read_text())
    assert written["raw"] == {"cluster": "sky-a"} and written["state"] == "RUNNING"


def test_without_a_registered_controller_the_capture_reads_files_only(tmp_path: Path) -> None:
    run_uri = str(write_sample_run(tmp_path / "runs", "completed-resumed"))
    stack = _stack(tmp_path, BUILTIN)
    stack.emit(_pre_cancel(run_uri))
    record = stack.ports.records.get(RUN_ID)
    assert record is not None and record.pre_cancel is not None and record.pre_cancel.controller_state is None
    assert any("no controller adapter" in problem for problem in record.pre_cancel.problems)


def test_an_unknown_controller_fails_closed_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UnknownControllerError, match=r"'nomad' \(known: iris, ray\)") as refused:
        BUILTIN.build("nomad", unconfigured())
    assert refused.value.code == "unknown_controller"
    stack = _stack(tmp_path, BUILTIN)
    stack.bus.publish("sweep", json.dumps({"kind": "controller", "source": "nomad"}).encode(), {})
    stack.bus.drain()
    dead = [m for m in stack.bus.published if m.topic == "sweep-dlq"]
    assert [m.attributes["rlcleanup_error"] for m in dead] == ["unknown_controller"]
    assert [m for m in stack.bus.published if m.topic == "job-events"] == []


def test_a_controller_must_serve_a_known_source_once() -> None:
    with pytest.raises(ValueError, match="serve no known source"):
        ControllerRegistry([ControllerKind("nomad", lambda settings: None)])
    with pytest.raises(ValueError, match="registered twice: iris, ray"):
        ControllerRegistry([*BUILTIN.kinds, *BUILTIN.kinds])


def test_the_builtin_controllers_follow_their_settings_groups() -> None:
    assert BUILTIN.polling(unconfigured()) == []  # Iris snapshots through its CLI but polls only with a URL
    assert BUILTIN.for_source("iris", unconfigured()) is not None
    assert BUILTIN.for_source("ray", unconfigured()) is None and BUILTIN.for_source("manual", unconfigured()) is None
    groups = {"iris": {"url": "http://iris:8080"}, "ray": {"dashboard": "http://head:8265"}}
    both = DeploymentSettings.model_validate(groups)
    assert BUILTIN.polling(both) == ["iris", "ray"]
