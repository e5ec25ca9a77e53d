"""A run that ends more than once (a resubmitted step): each end is one pass of the pipeline, scoped claims.

On the embedded stack (the real handlers, SQLite claims, local files): a failed run is finished; its step is
resubmitted (`.executor_status` overwritten by RUNNING, a new attempt record) and ends again. The RUNNING phase
and duplicate events change nothing; the new terminal token re-drives every stage under a new scope and the
record's chain gains the attempt, while the record never goes back to in_progress.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore
from rlcleanup.errors import RetryLater
from rlcleanup.models.events import RunMessage
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.attempt_scope import EndMarks, StatusMark, choose_scope, is_new_end, unscoped
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import VERSION, write_sample_run

NAME = "math-rl-failed-first-link"
RUN_ID = f"{NAME}-{VERSION}"
NEW_ATTEMPT = "0a1b2c3d4e5f"


def _marks(*statuses: tuple[str, str], attempts: tuple[str, ...] = ("a",)) -> EndMarks:
    return EndMarks(
        statuses=[
            StatusMark(uri=f"gs://b/r{i}/.executor_status", token=t, version=v) for i, (t, v) in enumerate(statuses)
        ],
        attempts=list(attempts),
    )


def test_a_new_end_needs_every_token_terminal_and_one_rewritten_over_a_terminal_token() -> None:
    first = _marks(("FAILED", "gen:1"))
    assert not is_new_end(first, _marks(("RUNNING", "gen:2")))  # resubmitted, still running
    assert is_new_end(first, _marks(("SUCCESS", "gen:3")))
    assert not is_new_end(first, _marks(("FAILED", "gen:1")))  # the same end
    early = _marks(("RUNNING", "gen:1"))  # a controller's event landed before Marin's token
    assert not is_new_end(early, _marks(("SUCCESS", "gen:2")))  # ... its token is the same end
    assert is_new_end(early, _marks(("SUCCESS", "gen:4"), attempts=("a", "b")))  # a new attempt did end
    multi = _marks(("SUCCESS", "gen:1"), ("FAILED", "gen:1"))
    assert not is_new_end(multi, _marks(("SUCCESS", "gen:1"), ("RUNNING", "gen:2")))  # export step still runs
    assert is_new_end(multi, _marks(("SUCCESS", "gen:1"), ("SUCCESS", "gen:3")))
    assert is_new_end(_marks(), _marks(attempts=("a", "b"))) and not is_new_end(_marks(), _marks())  # Layout C


def test_choose_scope_ledgers_a_new_pass_once(tmp_path: Path) -> None:
    claims = SqliteIdempotencyStore(tmp_path / "c.db")
    first = _marks(("FAILED", "gen:1"))
    assert choose_scope(claims, "r", first) == ""  # nothing classified yet
    claims.complete("r", "classify", {"kind": "standard", "end": first.model_dump(mode="json")})
    assert choose_scope(claims, "r", first) == ""  # a duplicate: the first pass's claims say done
    assert choose_scope(claims, "r", _marks(("RUNNING", "gen:2"))) is None
    second = _marks(("SUCCESS", "gen:3"), attempts=("a", "b"))
    scope = choose_scope(claims, "r", second)
    assert scope == f"{second.key}/" and choose_scope(claims, "r", second) == scope
    assert claims.result("r", f"pass:{second.key}") == {"end": second.model_dump(mode="json"), "n": 1}
    assert choose_scope(claims, "r", first) == ""  # durable state decides; marks equal to the first pass'
    legacy = SqliteIdempotencyStore(tmp_path / "l.db")
    legacy.complete("old", "classify", {"kind": "standard"})  # classified before marks were kept
    assert choose_scope(legacy, "old", second) is None
    assert unscoped(f"{second.key}/log-scan:p1") == "log-scan:p1" and unscoped("log-scan:p1") == "log-scan:p1"
    with pytest.raises(ValueError):
        RunMessage(run_id="r", run_uri="u", preserve_root="p", scope="../x/")


def test_a_new_pass_is_opened_only_on_two_observations_that_agree(tmp_path: Path) -> None:
    """The token and attempts come from discovery, the version from a later stat: `confirm` looks again before a
    pass is ledgered, and a run that changed in between is retried later, never given a pass."""
    claims = SqliteIdempotencyStore(tmp_path / "c.db")
    first = _marks(("FAILED", "gen:1"))
    claims.complete("r", "classify", {"kind": "standard", "end": first.model_dump(mode="json")})
    torn = _marks(("FAILED", "gen:2"))  # the old token read, then RUNNING written (gen 2), then the stat
    with pytest.raises(RetryLater):
        choose_scope(claims, "r", torn, confirm=lambda: _marks(("RUNNING", "gen:2")))
    assert claims.results("r", "pass:") == {}
    second = _marks(("SUCCESS", "gen:3"), attempts=("a", "b"))
    assert choose_scope(claims, "r", second, confirm=lambda: second) == f"{second.key}/"


def test_a_status_rewritten_while_the_run_is_read_opens_no_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI race, reproduced: an event's discovery reads the old FAILED token, then the resubmission's RUNNING
    lands before the status file is stat'ed. No pass may open for that torn reading; the resubmitted step's own
    end later opens exactly one, and the chain gains the new attempt."""
    from rlcleanup.runtime.stages import classify as handlers
    from rlcleanup.steps.layout import discover

    write_sample_run(tmp_path / "runs", "failed-first-link")
    run = tmp_path / "runs" / "durable" / NAME / VERSION
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    stack.emit(manual_event(str(run)))
    torn = {"armed": True}

    def racing_discover(*args: object, **kwargs: object) -> object:
        layout = discover(*args, **kwargs)  # type: ignore[arg-type]
        if torn.pop("armed", False):
            _resubmit(run, b"RUNNING\n")  # lands between the token read and the stat
        return layout

    monkeypatch.setattr(handlers, "discover", racing_discover)
    with contextlib.suppress(RetryLater):  # the embedded bus hands a retry back; a deployment redelivers it
        stack.emit(manual_event(str(run)))
    assert stack.ports.claims.results(RUN_ID, "pass:") == {}
    stack.emit(manual_event(str(run)))  # the redelivery: RUNNING now, not a new end
    assert stack.ports.claims.results(RUN_ID, "pass:") == {}
    (run / ".executor_status").write_bytes(b"FAILED\n")
    stack.emit(manual_event(str(run)))
    assert len(stack.ports.claims.results(RUN_ID, "pass:")) == 1
    after = stack.ports.records.get(RUN_ID)
    assert after is not None and [a.attempt_id for a in after.chain.attempts][-1] == NEW_ATTEMPT


def _resubmit(run: Path, token: bytes) -> None:
    """Marin resubmits the step: RUNNING over the terminal token, a new attempt record, then the new token."""
    status = run / ".executor_status"
    status.write_bytes(b"RUNNING\n")
    attempts = next((run.parents[2] / "tmp").rglob(f"{NAME}/{VERSION}/attempts"))
    last = json.loads(next(attempts.glob("fe91ad59edb3.json")).read_text())
    last["request"]["attempt_id"] = last["response"]["attempt_id"] = NEW_ATTEMPT
    last["execution"] |= {"started_at": "2026-11-30T10:00:00Z", "ended_at": "2026-11-30T10:30:00Z"}
    (attempts / f"{NEW_ATTEMPT}.json").write_text(json.dumps(last))
    if token != b"RUNNING\n":
        status.write_bytes(token)


def test_a_resubmitted_step_ends_again_and_the_chain_gains_its_attempt(tmp_path: Path) -> None:
    write_sample_run(tmp_path / "runs", "failed-first-link")
    run = tmp_path / "runs" / "durable" / NAME / VERSION
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    stack.emit(manual_event(str(run)))
    before = stack.ports.records.get(RUN_ID)
    assert before is not None and before.status is not RecordStatus.in_progress
    assert len(before.chain.attempts) == 3 and before.chain.attempts[-1].attempt_id == "fe91ad59edb3"
    claims_before = stack.ports.claims.results(RUN_ID, "")

    stack.emit(manual_event(str(run)))  # a true duplicate (same durable end): nothing runs again
    _resubmit(run, b"RUNNING\n")
    stack.emit(manual_event(str(run)))  # an event about the old end while the new attempt runs
    during = stack.ports.records.get(RUN_ID)
    assert during is not None and during.status == before.status  # never regressed to in_progress
    assert stack.ports.claims.results(RUN_ID, "").keys() == claims_before.keys()

    (run / ".executor_status").write_bytes(b"FAILED\n")  # the resubmitted step's own end
    stack.emit(manual_event(str(run)))
    after = stack.ports.records.get(RUN_ID)
    assert after is not None and after.status is not RecordStatus.in_progress
    assert [a.attempt_id for a in after.chain.attempts][-1] == NEW_ATTEMPT and len(after.chain.attempts) == 4
    passes = stack.ports.claims.results(RUN_ID, "pass:")
    assert len(passes) == 1
    (pass_key,) = (k.removeprefix("pass:") for k in passes)
    done = stack.ports.claims.results(RUN_ID, f"{pass_key}/")
    assert {"classify", "terminal-plan", "terminal", "capture-plan", "fanin:capture", "select"} <= {
        unscoped(k) for k in done
    }
    assert after.preserved_locations[0].endswith(f"/{RUN_ID}/passes/{pass_key}")
    assert after.preserved_locations[1:] == before.preserved_locations  # the first pass's evidence is kept
    manifest = json.loads(Path(after.manifest_uri or "").read_text())
    assert any(NEW_ATTEMPT in json.dumps(obj) for obj in manifest.get("objects", manifest))

    stack.emit(manual_event(str(run)))  # the same new end again: a duplicate of the second pass
    assert stack.ports.claims.results(RUN_ID, "").keys() == done.keys() | claims_before.keys() | passes.keys()


def test_a_later_pass_member_failure_is_completed_as_a_member(tmp_path: Path) -> None:
    """A fan-out member of a later pass (its claim key carries the scope) fails like any member: completed as
    failed with what it could not do, so its fan-in still happens."""
    from rlcleanup.errors import PermanentError
    from rlcleanup.models.events import LogScanPartMessage, LogScanPartsMessage
    from rlcleanup.models.parts import LogScanPart
    from rlcleanup.runtime.stages.terminal import failed_scan

    scope = "0123456789ab/"
    msg = LogScanPartMessage(
        run_id="r", scope=scope, dest_root="/d", part=LogScanPart(part_id="a001-p0001", attempt_id="x", uris=["/l"])
    )
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    error = PermanentError("unreadable_log", "gone")
    [(key, outcome)] = failed_scan(stack.ports, f"{scope}log-scan:a001-p0001", LogScanPartsMessage(msg), error)
    assert key == f"{scope}log-scan:a001-p0001"
    assert outcome.model_dump()["ok"] is False and outcome.model_dump()["unread"] == ["/l"]


def test_the_sweep_hints_a_recorded_run_whose_status_was_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs without storage notifications (S3, local): the sweep stats a recorded run's status file; rewritten after
    the record and terminal, it is a hint, and on-job-event's end marks decide it is a new end. The RUNNING phase
    is looked at once; the new end is hinted once."""
    write_sample_run(tmp_path / "runs", "failed-first-link")
    run = tmp_path / "runs" / "durable" / NAME / VERSION
    monkeypatch.setenv("RLCLEANUP_SWEEP_ROOTS", str(run.parents[1]))
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))

    def tick() -> list[str]:
        before = len(stack.bus.published)
        stack.bus.publish("sweep", b"{}", {})
        stack.bus.drain()
        return [m.topic for m in stack.bus.published[before:] if m.topic == "job-events"]

    assert tick() == ["job-events"]  # never sent: found, first pass
    first = stack.ports.records.get(RUN_ID)
    assert first is not None and len(first.chain.attempts) == 3
    assert tick() == []  # recorded, status older than the record: one stat, nothing emitted
    _resubmit(run, b"RUNNING\n")
    assert tick() == [] and tick() == []  # RUNNING again: read once, then remembered
    (run / ".executor_status").write_bytes(b"FAILED\n")
    assert tick() == ["job-events"]
    after = stack.ports.records.get(RUN_ID)
    assert after is not None and len(after.chain.attempts) == 4 and after.status is not RecordStatus.in_progress
    assert len(stack.ports.claims.results(RUN_ID, "pass:")) == 1
    assert tick() == []  # the record is newer than the token now


# --- a later pass that stops short is found by the sweep (its record keeps a finished status)


class _LosingBus(InProcessBus):
    """Loses the next `lose` publishes to `topic` once armed (a lost publish or a dead-lettered delivery)."""

    def __init__(self, topic: str) -> None:
        super().__init__()
        self.topic, self.lose = topic, 0

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        if topic == self.topic and self.lose > 0:
            self.lose -= 1
            return "lost"
        return super().publish(topic, data, attributes)


class _At:
    def __init__(self, now: datetime) -> None:
        self.value = now

    def now(self) -> datetime:
        return self.value


def _later_pass_with_a_lost(topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> EmbeddedStack:
    monkeypatch.delenv("RLCLEANUP_SWEEP_ROOTS", raising=False)
    write_sample_run(tmp_path / "runs", "failed-first-link")
    run = tmp_path / "runs" / "durable" / NAME / VERSION
    bus = _LosingBus(topic)
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"), bus=bus)
    stack.emit(manual_event(str(run)))
    _resubmit(run, b"FAILED\n")
    bus.lose = 1  # the second pass loses one message on `topic`
    stack.emit(manual_event(str(run)))
    return stack


def _sweep_at(stack: EmbeddedStack, at: datetime) -> None:
    stack.ports.clock = _At(at)
    stack.bus.publish("sweep", b"{}", {})
    stack.bus.drain()


def test_the_sweep_redrives_a_later_pass_that_lost_a_stage_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = _later_pass_with_a_lost("run-classified", tmp_path, monkeypatch)
    stuck = stack.ports.records.get(RUN_ID)
    assert stuck is not None and stuck.status is not RecordStatus.in_progress  # status alone cannot find it
    assert len(stuck.chain.attempts) == 3  # the new pass stopped right after classification
    (pass_key,) = (k.removeprefix("pass:") for k in stack.ports.claims.results(RUN_ID, "pass:"))
    assert stack.ports.claims.result(RUN_ID, f"{pass_key}/select") is None

    _sweep_at(stack, datetime.now(UTC) + timedelta(seconds=30))  # before the stall deadline: nothing happens
    assert not [m for m in stack.bus.published if m.attributes.get("redrive") == "sweep"]
    _sweep_at(stack, datetime.now(UTC) + timedelta(hours=2))
    redriven = [m for m in stack.bus.published if m.attributes.get("redrive") == "sweep"]
    assert [m.topic for m in redriven] == ["run-classified"]
    assert RunMessage.model_validate_json(redriven[0].data).scope == f"{pass_key}/"
    after = stack.ports.records.get(RUN_ID)
    assert after is not None and len(after.chain.attempts) == 4 and after.chain.attempts[-1].attempt_id == NEW_ATTEMPT
    assert stack.ports.claims.result(RUN_ID, f"{pass_key}/select") is not None
    _sweep_at(stack, datetime.now(UTC) + timedelta(hours=4))  # finished now: never re-driven again
    assert len([m for m in stack.bus.published if m.attributes.get("redrive") == "sweep"]) == 1


def test_a_later_pass_that_cannot_be_redriven_is_reported_beside_the_finished_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = _later_pass_with_a_lost("capture-parts", tmp_path, monkeypatch)
    before = stack.ports.records.get(RUN_ID)
    assert before is not None
    # The first sweep re-drives the lost part once (its plan publishes it again: issue 36); lost again here, so the
    # next sweeps report it.
    assert isinstance(stack.bus, _LosingBus)
    stack.bus.lose = 1
    for hours in (2, 4, 6):  # reported once, however many sweeps see it
        _sweep_at(stack, datetime.now(UTC) + timedelta(hours=hours))
    after = stack.ports.records.get(RUN_ID)
    assert after is not None and after.status is before.status  # the finished outcome is not regressed
    (pass_key,) = (k.removeprefix("pass:") for k in stack.ports.claims.results(RUN_ID, "pass:"))
    stalls = [e for e in after.errors if e.code == "stalled"]
    assert len(stalls) == 1 and stalls[0].message.startswith(f"stalled (later pass {pass_key}): missing capture part")
    assert after.remaining_work[: len(before.remaining_work)] == before.remaining_work
    assert "re-emit the run's terminal event" in after.remaining_work[-1]
