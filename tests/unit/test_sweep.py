"""The reconciling sweep on the embedded stack (the same handlers, an in-process bus, SQLite, local runs): a run
whose event was never sent, a run whose controller vanished, a stalled record re-driven, a stalled record that
cannot be re-driven marked `stalled` with exactly what is missing, bounded pages with continuations."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.models.events import JobEvent
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.settings import DeploymentSettings
from rlcleanup.sources.sweep import SweepConfig, SweepPage, SweepRoot, parse_sweep_message, tick

LATER = datetime.now(UTC) + timedelta(hours=2)  # past the stall deadline and the lock staleness


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.value = now

    def now(self) -> datetime:
        return self.value


class DroppingBus(InProcessBus):
    """Loses the first `drop` messages published to `topic` (a lost publish, a dead-lettered delivery)."""

    def __init__(self, topic: str, drop: int) -> None:
        super().__init__()
        self.topic, self.drop = topic, drop

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        if topic == self.topic and self.drop > 0:
            self.drop -= 1
            return "dropped"
        return super().publish(topic, data, attributes)


def _stack(tmp_path: Path, bus: InProcessBus | None = None) -> EmbeddedStack:
    return EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"), bus=bus or InProcessBus())


def _tick(stack: EmbeddedStack, at: datetime) -> None:
    stack.ports.clock = _Clock(at)
    stack.bus.publish("sweep", b"{}", {})  # Cloud Scheduler's body: anything that is not a continuation
    stack.bus.drain()


def _job_events(bus: InProcessBus) -> list[JobEvent]:
    return [JobEvent.model_validate_json(m.data) for m in bus.published if m.topic == "job-events"]


def test_tick_fans_out_one_message_per_root_records_and_controllers() -> None:
    config = SweepConfig(roots=[SweepRoot(uri="gs://a/x"), SweepRoot(uri="gs://b", depth=1)], stall_seconds=60)
    kinds = [m.kind for m in tick(config.model_copy(update={"controllers": ["iris"]}))]
    assert kinds == ["page", "page", "records", "controller"]
    assert parse_sweep_message(b"{}") is None and parse_sweep_message(b"not json") is None
    page = tick(config)[0]
    assert parse_sweep_message(page.model_dump_json().encode()) == page


def test_config_from_settings_defaults_to_twice_the_slowest_timeout() -> None:
    def config(controllers: tuple[str, ...] = (), **env: Any) -> SweepConfig:
        settings = DeploymentSettings(**env)
        return SweepConfig.from_settings(settings, slowest_timeout_seconds=540, controllers=controllers)

    parsed = config(sweep_roots="gs://a/x, gs://b/y")
    assert [r.uri for r in parsed.roots] == ["gs://a/x", "gs://b/y"] and parsed.roots[0].depth == 2
    assert parsed.stall_seconds == 1080 and parsed.page_size == 100 and parsed.controllers == []
    as_json = config(sweep_roots='[{"uri": "gs://c", "depth": 1}]', stall_seconds=30, controllers=("iris",))
    assert as_json.roots[0].depth == 1 and as_json.stall_seconds == 30 and as_json.controllers == ["iris"]
    with pytest.raises(ValueError, match="RLCLEANUP_SWEEP_"):
        config(sweep_roots='[{"uri": "gs://c", "depth": 9}]')
    with pytest.raises(ValueError, match="RLCLEANUP_SWEEP_"):
        config(sweep_roots="[not json")


def test_sweep_finds_a_run_whose_event_was_never_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    write_sample_run(runs, "completed-resumed")
    write_sample_run(runs, "vanished-controller")  # stale RUNNING status, no lock, no terminal.json
    monkeypatch.setenv("RLCLEANUP_SWEEP_ROOTS", str(runs / "durable"))
    stack = _stack(tmp_path)
    _tick(stack, LATER)

    events = {e.run_uri.rsplit("/", 2)[-2]: e for e in _job_events(stack.bus)}
    assert set(events) == {"math-rl-completed-resumed", "math-rl-vanished-controller"}
    done, vanished = events["math-rl-completed-resumed"], events["math-rl-vanished-controller"]
    assert (done.source, done.state) == ("sweep", "SUCCESS")
    assert (vanished.state, vanished.controller_absent) == ("ABSENT", True)
    assert vanished.error and "controller vanished" in vanished.error
    for name in events:
        record = stack.ports.records.get(f"{name}-{VERSION}")
        assert record is not None and record.status in (RecordStatus.awaiting_authority, RecordStatus.complete)
        assert record.terminal_state is not None and record.terminal_state.value == "completed"

    _tick(stack, LATER + timedelta(minutes=15))  # the next sweep: both have finished records, nothing is emitted
    assert len(_job_events(stack.bus)) == 2


def test_a_running_run_with_a_fresh_lock_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    write_sample_run(runs, "vanished-controller")
    monkeypatch.setenv("RLCLEANUP_SWEEP_ROOTS", str(runs / "durable"))
    stack = _stack(tmp_path)
    _tick(stack, datetime.now(UTC))  # the status file was just written: not stale yet
    assert _job_events(stack.bus) == []


def test_pages_are_bounded_and_continue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "roots"
    for i in range(5):
        (root / f"exp-{i}" / "v1").mkdir(parents=True)
        (root / f"exp-{i}" / "v1" / ".executor_status").write_text("FAILED\n")
    monkeypatch.setenv("RLCLEANUP_SWEEP_ROOTS", str(root))
    monkeypatch.setenv("RLCLEANUP_SWEEP_PAGE_SIZE", "2")
    stack = _stack(tmp_path)
    stack.bus.subscribers.pop("job-events")  # look at the sweep alone
    _tick(stack, LATER)
    pages = [SweepPage.model_validate_json(m.data) for m in stack.bus.published if b'"kind":"page"' in m.data]
    level0 = [p for p in pages if p.level == 0]
    assert [p.page_token for p in level0] == [None, "exp-1", "exp-3"]  # 5 names, 2 a page: 3 pages
    assert sorted(e.run_uri.rsplit("/", 2)[-2] for e in _job_events(stack.bus)) == [f"exp-{i}" for i in range(5)]


def test_a_lost_stage_message_is_redriven_to_a_finished_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLCLEANUP_SWEEP_ROOTS", raising=False)
    write_sample_run(tmp_path / "run", "completed-resumed")
    run_uri = str(next((tmp_path / "run" / "durable").glob("*/*")))
    stack = _stack(tmp_path, DroppingBus("run-classified", drop=1))
    stack.emit(manual_event(run_uri, "SUCCEEDED"))
    run_id = f"math-rl-completed-resumed-{VERSION}"
    assert (stack.ports.records.get(run_id) or pytest.fail("no record")).status is RecordStatus.in_progress

    _tick(stack, datetime.now(UTC) + timedelta(seconds=30))  # before the stall deadline: nothing happens
    assert stack.ports.records.get(run_id).status is RecordStatus.in_progress  # type: ignore[union-attr]
    _tick(stack, LATER)
    record = stack.ports.records.get(run_id)
    assert record is not None and record.status in (RecordStatus.awaiting_authority, RecordStatus.complete)
    assert record.controller_state and "SUCCEEDED" in record.controller_state  # the event's verdict was kept
    redriven = [m for m in stack.bus.published if m.attributes.get("redrive") == "sweep"]
    assert [m.topic for m in redriven] == ["run-classified"]


def test_a_stall_that_cannot_be_redriven_is_marked_with_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLCLEANUP_SWEEP_ROOTS", raising=False)
    write_sample_run(tmp_path / "run", "completed-resumed")
    run_uri = str(next((tmp_path / "run" / "durable").glob("*/*")))
    # A capture part's message is lost, and again when the sweep's re-drive has its plan publish it once more
    # (issue 36: the sweep used to mark it stalled at once, telling a person to re-emit an event that did nothing).
    bus = DroppingBus("capture-parts", drop=1)
    stack = _stack(tmp_path, bus)
    stack.emit(manual_event(run_uri, "SUCCEEDED"))
    run_id = f"math-rl-completed-resumed-{VERSION}"
    plan: dict[str, Any] = stack.ports.claims.result(run_id, "capture-plan") or {}
    lost = [pid for pid in plan["parts"] if stack.ports.claims.result(run_id, f"capture-part:{pid}") is None]
    assert len(lost) == 1

    bus.drop = 1
    _tick(stack, LATER)  # re-driven once: the plan publishes the lost part again (lost again here)
    assert stack.ports.records.get(run_id).status is RecordStatus.in_progress  # type: ignore[union-attr]
    _tick(stack, LATER + timedelta(minutes=5))  # still missing after its re-drive: marked, with what is missing
    record = stack.ports.records.get(run_id)
    assert record is not None and record.status is RecordStatus.stalled
    assert record.remaining_work and f"capture part {lost[0]}" in record.remaining_work[0]
    errors = [e for e in record.errors if e.code == "stalled"]
    assert len(errors) == 1 and errors[0].message == f"stalled: missing capture part {lost[0]}"
    assert [m.topic for m in stack.bus.published if m.attributes.get("redrive") == "sweep"] == ["run-classified"]


def test_a_malformed_continuation_is_dead_lettered(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    stack.bus.publish("sweep", json.dumps({"kind": "page", "root": {"uri": "x"}}).encode(), {})
    stack.bus.drain()
    dead = [m for m in stack.bus.published if m.topic == "sweep-dlq"]
    assert len(dead) == 1 and dead[0].attributes["rlcleanup_error"] == "bad_sweep_message"


def test_a_quiet_layout_c_run_is_settled_from_its_artifacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    write_sample_run(tmp_path / "slurm", "legacy-metrics")  # Layout C: no status file, no terminal.json
    root = tmp_path / "slurm" / "rl_ckpts"
    monkeypatch.setenv("RLCLEANUP_SWEEP_ROOTS", json.dumps([{"uri": str(root), "depth": 1}]))
    stack = _stack(tmp_path)
    _tick(stack, datetime.now(UTC) + timedelta(hours=1))  # written just now: still writing, left alone
    assert _job_events(stack.bus) == []
    day_ago = (datetime.now(UTC) - timedelta(days=2)).timestamp()
    for path in root.rglob("*"):
        os.utime(path, (day_ago, day_ago))
    _tick(stack, datetime.now(UTC))
    events = _job_events(stack.bus)
    assert [(e.source, e.state) for e in events] == [("sweep", "ABSENT")]
    assert events[0].error and "Layout C run quiet since" in events[0].error
    records = list(stack.ports.records.list_runs())
    assert len(records) == 1 and records[0].run_uri == str(root / "math-grpo-tiny-llama-legacy")
    assert records[0].status in (RecordStatus.awaiting_authority, RecordStatus.complete)
    _tick(stack, datetime.now(UTC) + timedelta(minutes=15))  # recorded now: the next sweep emits nothing
    assert len(_job_events(stack.bus)) == 1, records[0].run_id


def test_a_root_on_storage_without_child_listing_is_dead_lettered_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class NoChildren:
        def list_children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> Any:
            raise NotImplementedError(f"{prefix_uri}: this storage cannot list a prefix's children page by page")

    monkeypatch.setenv("RLCLEANUP_SWEEP_ROOTS", "s3://bucket/runs")
    stack = _stack(tmp_path)
    stack.ports.storage = NoChildren()  # type: ignore[assignment]
    _tick(stack, LATER)
    dead = [m for m in stack.bus.published if m.topic == "sweep-dlq"]
    assert [m.attributes["rlcleanup_error"] for m in dead] == ["sweep_unsupported_storage"]
