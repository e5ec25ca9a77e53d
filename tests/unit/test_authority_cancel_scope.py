"""Cancellation authority (issue 37 item 4): a cancel applies only to a live run, and a recorded cause must name a
reproducing failure that a pre-cancel capture of that very run observed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from authority_support import World, cancel_grant, cleared, make_world
from typer.testing import CliRunner

from rlcleanup.authority.precancel import causes
from rlcleanup.cli.main import app
from rlcleanup.errors import PermanentError
from rlcleanup.models.events import JobEvent
from rlcleanup.runtime.authority_handlers import record_cause
from rlcleanup.runtime.embedded import manual_event


@pytest.fixture(autouse=True)
def _sqlite_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI picks Firestore when an emulator variable is set (another test's stack in this worker): these
    tests read the SQLite file they name."""
    for var in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "RLCLEANUP_DB"):
        monkeypatch.delenv(var, raising=False)


TRACEBACK = """Traceback (most recent call last):
  File "/app/skyrl-train/skyrl_train/trainer.py", line 412, in train
    rewards = self.reward_fn(batch)
ValueError: reward function returned NaN for row {row}
"""


def _pre_cancel(w: World, run_uri: str | None = None) -> JobEvent:
    return JobEvent(
        source="manual",
        job_id="job-1",
        run_uri=run_uri or w.run_uri,
        state="RUNNING",
        observed_at=datetime.now(UTC),
        intent="pre_cancel",
    )


def _reproducing(w: World) -> None:
    """Two attempts fail the same way: the capture lists one reproducing signature and withholds clearance."""
    for row, log in enumerate(sorted((w.tmp / "runs").rglob("attempts/*/logs/finelog.log"))[:2]):
        log.write_text(log.read_text() + TRACEBACK.format(row=1000 + row))


def test_a_cancel_grant_for_a_finished_run_is_refused_as_run_ended(tmp_path: Path) -> None:
    w = make_world(tmp_path, "partial-checkpoint")  # the pipeline ran: the run's end was classified
    grant = cancel_grant(w)
    w.deliver(w.message(grant))
    doc = w.grant_doc(grant.grant_id)
    assert doc["state"] == "refused" and doc["refusal"] == "run_ended"
    assert cleared(w) == []


def test_a_pre_cancel_event_sent_after_the_end_does_not_make_the_run_live_again(tmp_path: Path) -> None:
    w = make_world(tmp_path, "partial-checkpoint")
    w.stack.emit(_pre_cancel(w))  # anyone who can publish a job event can ask for a capture of a finished run
    assert w.record.pre_cancel is not None
    grant = cancel_grant(w)
    w.deliver(w.message(grant))
    assert w.grant_doc(grant.grant_id)["refusal"] == "run_ended" and cleared(w) == []


def test_a_cancel_waiting_for_its_capture_is_refused_once_the_run_ends(tmp_path: Path) -> None:
    w = make_world(tmp_path, "partial-checkpoint", run=False)
    grant = cancel_grant(w)
    w.deliver(w.message(grant))
    assert w.grant_doc(grant.grant_id)["state"] == "pending"
    w.stack.emit(manual_event(w.run_uri))  # the run ends on its own; record-ready retries the waiting grant
    doc = w.grant_doc(grant.grant_id)
    assert doc["state"] == "refused" and doc["refusal"] == "run_ended"
    w.stack.emit(_pre_cancel(w))  # a late capture retries the grant again: still nothing cleared
    assert cleared(w) == []


def test_a_cancel_of_a_live_run_is_still_cleared(tmp_path: Path) -> None:
    w = make_world(tmp_path, "partial-checkpoint", run=False)
    w.stack.emit(_pre_cancel(w))
    grant = cancel_grant(w)
    w.deliver(w.message(grant))
    assert w.grant_doc(grant.grant_id)["state"] == "used" and len(cleared(w)) == 1


@pytest.mark.parametrize(
    "fingerprint",
    [
        "0000000000000000",  # well-formed, matches nothing
        "ffffffffffffffff",
        "",  # empty
        "../../causes/x",  # a path
        "\x1b]0;pwned\x07",  # a terminal escape
    ],
)
def test_a_cause_naming_no_observed_failure_is_refused_and_nothing_is_recorded(
    tmp_path: Path, fingerprint: str
) -> None:
    w = make_world(tmp_path, "completed-resumed", run=False)
    _reproducing(w)
    w.stack.emit(_pre_cancel(w))
    grant = cancel_grant(w)
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "withheld"
    with pytest.raises(PermanentError) as err:
        record_cause(w.stack.ports, w.run_id, fingerprint, "whatever", "mallory", datetime.now(UTC))
    assert err.value.code == "unknown_signature"
    assert causes(w.stack.ports.records, w.run_id).get(fingerprint) is None
    w.stack.bus.drain()
    assert cleared(w) == [] and w.action(grant.grant_id)["state"] == "withheld"


def test_a_cause_for_a_failure_of_another_run_is_refused(tmp_path: Path) -> None:
    """The signature id is the other run's real one: it names an observed failure, but not of this run."""
    other = make_world(tmp_path / "other", "completed-resumed", run=False)
    _reproducing(other)
    other.stack.emit(_pre_cancel(other))
    pre = other.record.pre_cancel
    assert pre is not None
    sig = json.loads(Path(pre.capture_uri).read_text())["reproducing"][0]["signature_id"]

    w = make_world(tmp_path / "mine", "partial-checkpoint", run=False)
    w.stack.emit(_pre_cancel(w))  # this run's capture saw no reproducing failure
    with pytest.raises(PermanentError, match="names no reproducing failure"):
        record_cause(w.stack.ports, w.run_id, sig, "borrowed", "mallory", datetime.now(UTC))


def test_a_cause_before_any_capture_is_refused(tmp_path: Path) -> None:
    w = make_world(tmp_path, "completed-resumed", run=False)
    with pytest.raises(PermanentError, match="no pre-cancel capture"):
        record_cause(w.stack.ports, w.run_id, "3f2a9c0d1e2b4a5c", "early", "mallory", datetime.now(UTC))


def test_the_cause_command_exits_3_for_an_unknown_fingerprint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCLEANUP_PRESERVE_ROOT", str(tmp_path / "preserved"))
    db = tmp_path / "records.db"
    result = CliRunner().invoke(app, ["cause", "some-run", "0000000000000000", "--note", "x", "--db", str(db)])
    assert result.exit_code == 3
    assert "unknown_signature" in result.output
