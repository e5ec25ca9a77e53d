"""A record store that comes back empty mid-run (issue 48 item 1): what recovery needs travels in every stage
message, so a run lost at any stage is rebuilt as `failed` with its URI and the exact recover command, and
`rlcleanup recover RUN_ID` or the sweep re-drives it with nothing supplied by the operator.

The loss is made as the emulator makes it: every table of the records file is emptied the moment a stage's message
is published (the publishing stage's own later writes, such as the classify claim, land in the empty store)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.errors import ErrorKind, RecordMissing, error_kind
from rlcleanup.models.events import CapturePartMessage, JobEvent
from rlcleanup.models.record import UNKNOWN_RUN_URI
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.paths import default_preserve_root
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.recovery import LOST_RUNS
from rlcleanup.runtime.topology import load_topology
from rlcleanup.samples.generator import VERSION, write_sample_run

RUN_ID = f"math-rl-completed-resumed-{VERSION}"
STAGE_TOPICS = ["run-classified", "log-scan-parts", "capture-parts", "candidate-validation", "run-selection"]


class ResettingBus(InProcessBus):
    """Empties the records file when the first message of `topic` is published: the store's reset lands between
    a stage's publish and the next stage's delivery."""

    def __init__(self, db: Path, topic: str) -> None:
        super().__init__()
        self.db, self.topic, self.reset = db, topic, False

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        if topic == self.topic and not self.reset:
            self.reset = True
            with sqlite3.connect(self.db) as conn:
                for table in ("records", "claims", "claim_versions", "events", "docs"):
                    conn.execute(f"DELETE FROM {table}")
        return super().publish(topic, data, attributes)


def _lost_run(tmp_path: Path, topic: str, preserve: Path) -> tuple[EmbeddedStack, str]:
    write_sample_run(tmp_path / "run", "completed-resumed")
    run_uri = str(next((tmp_path / "run" / "durable").glob("*/*")))
    db = tmp_path / "records.db"
    stack = EmbeddedStack.create(db, str(preserve), bus=ResettingBus(db, topic))
    stack.emit(manual_event(run_uri, "SUCCEEDED"))
    assert stack.bus.reset, f"no {topic} message was published"
    return stack, run_uri


def _assert_lost(stack: EmbeddedStack, run_uri: str) -> None:
    """The record rebuilt from the message: failed, its URI, the exact recover command; the origin kept."""
    record = stack.ports.records.get(RUN_ID)
    assert record is not None and record.status is RecordStatus.failed, record
    assert record.run_uri == run_uri != UNKNOWN_RUN_URI
    assert any(f"`rlcleanup recover {RUN_ID}`" in item for item in record.remaining_work), record.remaining_work
    lost = [e for e in record.errors if e.code == "record_store_lost"]
    assert lost and f"`rlcleanup recover {RUN_ID}`" in lost[0].message
    assert {e.code for e in record.errors} == {"record_store_lost"}, record.errors  # no defect, no KeyError
    kept = stack.ports.records.get_doc(LOST_RUNS, RUN_ID)
    assert kept is not None and JobEvent.model_validate(kept["event"]).run_uri == run_uri


def _assert_recovered(stack: EmbeddedStack, run_uri: str) -> None:
    record = stack.ports.records.get(RUN_ID)
    assert record is not None and record.status is RecordStatus.awaiting_authority, record
    assert record.run_uri == run_uri and not [w for w in record.remaining_work if "recover" in w]
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    assert len(record.candidates) == 4
    assert {e.code for e in record.errors} <= {"record_store_lost"}  # the loss stays in the record's history


@pytest.mark.parametrize("topic", STAGE_TOPICS)
def test_a_run_lost_at_any_stage_is_redriven_by_the_sweep(
    topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLCLEANUP_SWEEP_ROOTS", raising=False)
    stack, run_uri = _lost_run(tmp_path, topic, tmp_path / "preserved")
    _assert_lost(stack, run_uri)
    stack.bus.publish("sweep", b"{}", {})  # a Cloud Scheduler tick: the records pass re-drives lost runs
    stack.bus.drain()
    _assert_recovered(stack, run_uri)
    redriven = [m for m in stack.bus.published if m.topic == "job-events"]
    assert len(redriven) == 2  # the run's own event, then the kept one (never a duplicate)
    stack.bus.publish("sweep", b"{}", {})  # recovered: nothing more to re-drive
    stack.bus.drain()
    assert len([m for m in stack.bus.published if m.topic == "job-events"]) == 2


def test_recover_redrives_a_lost_run_with_only_its_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_cli_env(tmp_path, monkeypatch)
    stack, run_uri = _lost_run(tmp_path, "capture-parts", default_preserve_root())
    _assert_lost(stack, run_uri)
    code, out, err = invoke("recover", RUN_ID, "--db", str(tmp_path / "records.db"))
    assert code == 0, err
    assert f"re-drove {RUN_ID}" in out and run_uri in out
    _assert_recovered(stack, run_uri)
    code, _, err = invoke("recover", RUN_ID, "--db", str(tmp_path / "records.db"))
    assert code == 1 and "was not lost" in err  # nothing left to re-drive


def test_every_stage_message_carries_the_event_that_started_the_run(tmp_path: Path) -> None:
    write_sample_run(tmp_path / "run", "completed-resumed")
    run_uri = str(next((tmp_path / "run" / "durable").glob("*/*")))
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    event = manual_event(run_uri, "SUCCEEDED")
    stack.emit(event)
    assert load_topology().stage_message_topics == set(STAGE_TOPICS)  # read from topology.yaml, as listed
    stage = [m for m in stack.bus.published if m.topic in STAGE_TOPICS]
    assert {m.topic for m in stage} == set(STAGE_TOPICS)
    for message in stage:
        assert JobEvent.model_validate(json.loads(message.data)["origin"]) == event, message.topic
    part = next(m for m in stage if m.topic == "capture-parts")
    assert CapturePartMessage.model_validate_json(part.data).origin == event  # the model reads it


def test_a_missing_record_is_a_typed_retried_error(tmp_path: Path) -> None:
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    with pytest.raises(RecordMissing) as info:
        stack.ports.records.update("nobody", {"status": "failed"})
    assert error_kind(info.value) is ErrorKind.transient and isinstance(info.value, KeyError)
    assert str(info.value).startswith("no record for run 'nobody'")
