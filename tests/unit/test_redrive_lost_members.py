"""Lost fan-out members are redone (issue 36 item 5): a capture part's message lost for good (dead-lettered while
its function was down) used to leave the run `in_progress`; re-emitting its job event did nothing (the run was
classified) and the sweep marked it `stalled`, telling a person to re-emit the event, which did nothing either.
Now the capture plan lists the page again from its stored cursor and publishes the parts with no outcome when its
run message comes again: a re-emitted event or the sweep's re-drive finishes the run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_sweep import DroppingBus, _Clock  # the sweep suite's lossy bus and clock (tests/unit is on sys.path)

from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import VERSION, write_sample_run

RUN_ID = f"math-rl-completed-resumed-{VERSION}"


def _stuck_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drop: int) -> tuple[EmbeddedStack, str, list[str]]:
    monkeypatch.delenv("RLCLEANUP_SWEEP_ROOTS", raising=False)
    write_sample_run(tmp_path / "run", "completed-resumed")
    run_uri = str(next((tmp_path / "run" / "durable").glob("*/*")))
    stack = EmbeddedStack.create(
        tmp_path / "records.db", str(tmp_path / "preserved"), bus=DroppingBus("capture-parts", drop)
    )
    stack.emit(manual_event(run_uri, "SUCCEEDED"))
    plan: dict[str, Any] = stack.ports.claims.result(RUN_ID, "capture-plan") or {}
    lost = [pid for pid in plan["parts"] if stack.ports.claims.result(RUN_ID, f"capture-part:{pid}") is None]
    assert len(lost) == 1
    assert (stack.ports.records.get(RUN_ID) or pytest.fail("no record")).status is RecordStatus.in_progress
    return stack, run_uri, lost


def _finished(stack: EmbeddedStack) -> None:
    record = stack.ports.records.get(RUN_ID)
    assert record is not None and record.status is RecordStatus.awaiting_authority, record
    assert record.errors == []
    plan: dict[str, Any] = stack.ports.claims.result(RUN_ID, "capture-plan") or {}
    assert all(stack.ports.claims.result(RUN_ID, f"capture-part:{pid}") for pid in plan["parts"])


def test_a_reemitted_event_redoes_a_lost_capture_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stack, run_uri, _ = _stuck_run(tmp_path, monkeypatch, drop=1)
    stack.ports.clock = _Clock(datetime.now(UTC) + timedelta(hours=1))  # quiet for longer than a lease
    stack.emit(manual_event(run_uri, "SUCCEEDED"))
    _finished(stack)
    again = [m for m in stack.bus.published if m.attributes.get("redrive") == "job-event"]
    assert [m.topic for m in again] == ["run-classified"]


def test_a_duplicate_event_while_the_run_moves_redrives_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, run_uri, lost = _stuck_run(tmp_path, monkeypatch, drop=1)
    stack.emit(manual_event(run_uri, "SUCCEEDED"))  # within the lease: another hint of the same end
    assert not [m for m in stack.bus.published if m.attributes.get("redrive") == "job-event"]
    assert stack.ports.claims.result(RUN_ID, f"capture-part:{lost[0]}") is None


def test_the_sweep_redrives_a_lost_capture_part_before_marking_a_stall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, _, _ = _stuck_run(tmp_path, monkeypatch, drop=1)
    stack.ports.clock = _Clock(datetime.now(UTC) + timedelta(hours=2))  # past the stall deadline
    stack.bus.publish("sweep", b"{}", {})
    stack.bus.drain()
    _finished(stack)
    assert [m.topic for m in stack.bus.published if m.attributes.get("redrive") == "sweep"] == ["run-classified"]
