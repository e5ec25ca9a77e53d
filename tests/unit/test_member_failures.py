"""Barriers count completions, not successes: one failing fan-out member (a validation, a capture part, a log-scan
part) is completed as failed and the run still finishes; a failing stage outside a fan-out fails the run.

Each case injects a failure into exactly one member of a real embedded run (SQLite, local files, in-process bus)
— a typed bad-input error (permanent at once) or a plain defect (RuntimeError/KeyError/ValueError: retried
DEFECT_DELIVERY_BUDGET times, then completed as failed) — and asserts the finished record against a clean run.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sample_runs import clean_record, resumed_sample, run_embedded

from rlcleanup.errors import INTERNAL_ERROR, RecordStoreLost, UnreadableRunFile
from rlcleanup.models.record import UNKNOWN_RUN_URI, CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.storage import UnsafePathError
from rlcleanup.runtime import poison
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event, resolve_run_id
from rlcleanup.runtime.failures import DEFECT_DELIVERY_BUDGET
from rlcleanup.runtime.stages import select as select_stage
from rlcleanup.runtime.stages import terminal as terminal_stage
from rlcleanup.runtime.stages import validate as validate_stage
from rlcleanup.steps import capture as capture_step
from rlcleanup.steps import logscan

FINISHED = (RecordStatus.complete, RecordStatus.awaiting_authority)


_run = run_embedded


@pytest.fixture
def run_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    return resumed_sample(tmp_path, monkeypatch)


@pytest.fixture
def clean(tmp_path: Path, run_uri: str) -> CompletionRecord:
    return clean_record(tmp_path, run_uri)


def _failing_once_per_match(
    original: Callable[..., Any], matches: Callable[..., bool], error: Callable[[], Exception], calls: Counter[str]
) -> Callable[..., Any]:
    """`original`, except that every call whose arguments match raises `error()` (counted in calls["failed"])."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if matches(*args, **kwargs):
            calls["failed"] += 1
            raise error()
        calls["ok"] += 1
        return original(*args, **kwargs)

    return wrapper


def _batch_tries(monkeypatch: pytest.MonkeyPatch, step: int) -> Counter[str]:
    """How often `step` was validated inside a batch (the first try of every candidate; a failure there sends
    it on as its own message, whose deliveries the retry budget counts)."""
    tries: Counter[str] = Counter()
    original = validate_stage.validate_many

    def spy(storage: Any, layout: Any, steps: Any, **kwargs: Any) -> Any:
        tries["batch"] += step in steps
        return original(storage, layout, steps, **kwargs)

    monkeypatch.setattr(validate_stage, "validate_many", spy)
    return tries


BAD_INPUT = ("bad input", lambda: UnsafePathError("refusing symlink /x/model.safetensors"), "unsafe_path", 1)
ERRORS = [
    BAD_INPUT,
    ("RuntimeError", lambda: RuntimeError("injected defect"), INTERNAL_ERROR, DEFECT_DELIVERY_BUDGET),
    ("KeyError", lambda: KeyError("step"), INTERNAL_ERROR, DEFECT_DELIVERY_BUDGET),
    ("ValueError", lambda: ValueError("our own bug, not bad input"), INTERNAL_ERROR, DEFECT_DELIVERY_BUDGET),
]


def _dead_lettered(stack: EmbeddedStack, topic: str) -> list[str]:
    return [m.attributes["rlcleanup_error"] for m in stack.bus.published if m.topic == topic]


@pytest.mark.parametrize(("label", "error", "code", "deliveries"), ERRORS, ids=[e[0] for e in ERRORS])
def test_one_failing_validation_makes_an_invalid_candidate_and_the_run_finishes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    run_uri: str,
    clean: CompletionRecord,
    label: str,
    error: Callable[[], Exception],
    code: str,
    deliveries: int,
) -> None:
    calls: Counter[str] = Counter()
    fail = _failing_once_per_match(
        validate_stage.validate_candidate, lambda s, layout, step, **k: step == 10, error, calls
    )
    monkeypatch.setattr(validate_stage, "validate_candidate", fail)
    tries = _batch_tries(monkeypatch, 10)
    caplog.set_level(logging.ERROR, logger="rlcleanup")

    stack, record = _run(tmp_path / "faulty", run_uri)

    assert record.status in FINISHED  # not in_progress: the fan-in counted the failed member
    assert tries["batch"] == 1  # its batch tried it once, then sent it on alone
    # in its own message: bad input once; a defect retried up to its budget, then finished
    assert calls["failed"] == tries["batch"] + deliveries
    by_step = {c.step: c for c in record.candidates}
    assert sorted(by_step) == [5, 10, 15, 20]
    failed = by_step[10]
    assert not failed.valid and failed.problems[0].startswith(f"{code}: validation could not finish")
    assert failed.uri == next(c.uri for c in clean.candidates if c.step == 10)
    others = [c.model_dump(exclude={"checked_at"}) for c in record.candidates if c.step != 10]
    assert others == [c.model_dump(exclude={"checked_at"}) for c in clean.candidates if c.step != 10]
    assert record.resume_safety == clean.resume_safety
    assert [e.code for e in record.errors] == [code]  # recorded once, however many deliveries
    assert record.errors[0].step == "validate_candidate"
    assert _dead_lettered(stack, "validate-candidate-dlq") == [code]
    assert stack.bus.dead_letters == []  # the bus never gave up on a message: each delivery ended in an ack
    if code == INTERNAL_ERROR:
        defect_logs = [r for r in caplog.records if r.getMessage().startswith("defect in validate_candidate")]
        assert len(defect_logs) == deliveries and all(r.exc_info for r in defect_logs)  # with the traceback


@pytest.mark.parametrize(("label", "error", "code", "deliveries"), ERRORS[:2], ids=[e[0] for e in ERRORS[:2]])
def test_a_failing_resume_check_is_unsafe_and_the_run_finishes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_uri: str,
    clean: CompletionRecord,
    label: str,
    error: Callable[[], Exception],
    code: str,
    deliveries: int,
) -> None:
    calls: Counter[str] = Counter()
    monkeypatch.setattr(
        validate_stage,
        "check_resume_safety",
        _failing_once_per_match(validate_stage.check_resume_safety, lambda *a: True, error, calls),
    )
    _, record = _run(tmp_path / "faulty", run_uri)
    assert record.status in FINISHED and calls["failed"] == deliveries
    assert record.resume_safety is not None and not record.resume_safety.safe
    assert record.resume_safety.reasons[0].startswith(f"{code}: ")
    assert [c.model_dump(exclude={"checked_at"}) for c in record.candidates] == [
        c.model_dump(exclude={"checked_at"}) for c in clean.candidates
    ]


@pytest.mark.parametrize(("label", "error", "code", "deliveries"), ERRORS[:3], ids=[e[0] for e in ERRORS[:3]])
def test_one_failing_capture_part_lists_what_it_could_not_preserve_and_the_run_finishes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_uri: str,
    clean: CompletionRecord,
    label: str,
    error: Callable[[], Exception],
    code: str,
    deliveries: int,
) -> None:
    calls: Counter[str] = Counter()
    original = capture_step.copy_part
    monkeypatch.setattr(
        capture_step,
        "copy_part",
        _failing_once_per_match(original, lambda storage, dest, part: part.part_id == "temp-0", error, calls),
    )
    stack, record = _run(tmp_path / "faulty", run_uri)

    assert record.status in FINISHED and calls["failed"] == deliveries
    outcome = stack.ports.claims.result(record.run_id, "capture-part:temp-0")
    assert outcome is not None and outcome["ok"] is False and outcome["error"]["code"] == code
    assert outcome["unpreserved"] and all("/tmp/" in uri or "tmp" in uri for uri in outcome["unpreserved"])
    part_errors = [e for e in record.errors if e.code == "capture_part_failed"]
    assert len(part_errors) == 1 and "temp-0" in part_errors[0].message
    assert f"could not preserve {len(outcome['unpreserved'])} objects" in part_errors[0].message
    # The other three parts are preserved and in the manifest; the failed part's objects are not.
    assert record.preserved_object_count == clean.preserved_object_count - len(outcome["unpreserved"])
    assert [c.step for c in record.candidates] == [5, 10, 15, 20]
    assert _dead_lettered(stack, "capture-part-dlq") == [code]


@pytest.mark.parametrize(("label", "error", "code", "deliveries"), ERRORS[:3], ids=[e[0] for e in ERRORS[:3]])
def test_one_failing_log_scan_part_lists_the_unread_files_and_the_run_finishes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_uri: str,
    clean: CompletionRecord,
    label: str,
    error: Callable[[], Exception],
    code: str,
    deliveries: int,
) -> None:
    calls: Counter[str] = Counter()
    original = logscan.scan_part
    monkeypatch.setattr(
        logscan,
        "scan_part",
        _failing_once_per_match(original, lambda storage, dest, part: part.part_id == "a001-p0000", error, calls),
    )
    stack, record = _run(tmp_path / "faulty", run_uri)

    assert record.status in FINISHED and calls["failed"] == deliveries
    assert record.terminal_state is not None
    outcome = stack.ports.claims.result(record.run_id, "log-scan:a001-p0000")
    assert outcome is not None and outcome["ok"] is False and outcome["error"]["code"] == code
    assert outcome["unread"] and outcome["files"] == len(outcome["unread"])
    unread = [e for e in record.errors if e.code == "unreadable_log"]
    assert sorted(e.message.split(" ")[1] for e in unread) == sorted(outcome["unread"])
    assert stack.ports.claims.result(record.run_id, "log-scan:a000-p0000")["ok"] is True  # type: ignore[index]
    # Every export is still judged. Without the second attempt's logs its steps lose metric coverage: a
    # consequence of the unread files, said as such, never an internal error of the validation.
    assert [c.step for c in record.candidates] == [5, 10, 15, 20]
    assert not any(p.startswith(INTERNAL_ERROR) for c in record.candidates for p in c.problems)
    for candidate in (c for c in record.candidates if not c.valid):
        assert all(p.startswith(("metric_coverage_gap", "beyond_last_saved_step")) for p in candidate.problems)


def test_a_failing_segment_of_a_cut_log_ends_its_chain_and_the_run_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_uri: str
) -> None:
    """Logs over 1,500 bytes cut into segments, each published by the one before: when the second segment of a file
    fails, the segments after it will never be published, so they are completed as failed with it; the fan-in still
    settles the run and the file is named unread once."""
    page = logscan.plan_log_scan_page
    monkeypatch.setattr(logscan, "plan_log_scan_page", lambda *args: page(*args, max_bytes=1500))
    calls: Counter[str] = Counter()
    victim: list[str] = []

    def matches(storage: Any, dest: str, part: Any) -> bool:
        hit = part.segment is not None and part.segment.index == 1 and part.segment.count >= 3
        if hit and not victim:
            victim.append(part.uris[0])
        return hit and part.uris[0] == victim[0]

    monkeypatch.setattr(logscan, "scan_part", _failing_once_per_match(logscan.scan_part, matches, BAD_INPUT[1], calls))
    stack, record = _run(tmp_path / "faulty", run_uri)

    assert record.status in FINISHED and calls["failed"] == 1 and record.terminal_state is not None
    terminal_plan = next(v for k, v in _results(stack, record.run_id).items() if k.endswith("terminal-plan"))
    outcomes = {
        k.rsplit(":", 1)[1]: v
        for k, v in _results(stack, record.run_id).items()
        if k.split("/")[-1].startswith("log-scan:")
    }
    assert sorted(outcomes) == sorted(p["part_id"] for p in terminal_plan["parts"])  # every member completed
    failed = [pid for pid, o in outcomes.items() if not o["ok"]]
    assert len(failed) >= 2 and all(outcomes[pid]["error"]["code"] == "unsafe_path" for pid in failed)
    unread = [e.message for e in record.errors if e.code == "unreadable_log"]
    assert len(unread) == 1 and victim[0] in unread[0]


def _results(stack: EmbeddedStack, run_id: str) -> dict[str, Any]:
    return stack.ports.claims.results(run_id, "")


@pytest.mark.parametrize(
    ("label", "error", "code"),
    [
        ("bad input", lambda: UnreadableRunFile("metrics.jsonl is not JSON"), "unreadable_run"),
        ("defect", lambda: TypeError("unsupported operand"), INTERNAL_ERROR),
    ],
)
def test_a_failing_stage_outside_a_fan_out_fails_the_run_with_the_reason(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_uri: str,
    label: str,
    error: Callable[[], Exception],
    code: str,
) -> None:
    def finish(*args: Any) -> Any:
        raise error()

    monkeypatch.setattr(select_stage, "finish_record", finish)
    stack, record = _run(tmp_path / "faulty", run_uri)
    assert record.status is RecordStatus.failed
    assert record.errors and {e.code for e in record.errors} == {code}
    assert any(e.step == "select_candidate" for e in record.errors)
    assert any("could not finish step select_candidate" in w for w in record.remaining_work)
    assert _dead_lettered(stack, "select-candidate-dlq") == [code]


def test_a_failing_terminal_fan_in_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_uri: str) -> None:
    def settle(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("attempt_id")

    monkeypatch.setattr(terminal_stage, "settle_terminal_state", settle)
    _, record = _run(tmp_path / "faulty", run_uri)
    assert record.status is RecordStatus.failed
    assert record.terminal_state is None and record.candidates == []
    assert {e.code for e in record.errors} == {INTERNAL_ERROR} and "KeyError" in record.errors[0].message


@pytest.mark.parametrize("seed", [5, 6])
def test_a_failing_member_under_chaotic_redelivery_still_finishes_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_uri: str, clean: CompletionRecord, seed: int
) -> None:
    """At-least-once delivery (duplicates, any order, nacks) with one validation hitting a defect: its duplicates
    count towards the same retry budget, the member is completed as failed once, and the run finishes once."""
    from test_redelivery import ChaosBus  # the adversarial bus of the redelivery suite (tests/unit is on sys.path)

    calls: Counter[str] = Counter()
    fail = _failing_once_per_match(
        validate_stage.validate_candidate, lambda s, layout, step, **k: step == 15, lambda: RuntimeError("boom"), calls
    )
    monkeypatch.setattr(validate_stage, "validate_candidate", fail)
    tries = _batch_tries(monkeypatch, 15)
    bus = ChaosBus(rng=random.Random(seed))
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"), bus=bus)
    event = manual_event(run_uri)
    stack.emit(event)

    assert [r.run_id for r in stack.ports.records.list_runs()] == [clean.run_id]  # exactly one record
    record = stack.ports.records.get(clean.run_id)
    assert record is not None and record.status in FINISHED
    # each delivery of its batch tried it once; its own message's duplicates share one id, hence one budget
    assert tries["batch"] >= 1 and calls["failed"] == tries["batch"] + DEFECT_DELIVERY_BUDGET
    failed = next(c for c in record.candidates if c.step == 15)
    assert not failed.valid and failed.problems[0].startswith(INTERNAL_ERROR)
    others = [c.model_dump(exclude={"checked_at"}) for c in record.candidates if c.step != 15]
    assert others == [c.model_dump(exclude={"checked_at"}) for c in clean.candidates if c.step != 15]
    assert [m.topic for m in bus.published].count("record-ready") == 1
    assert bus.dead_letters == [] and sum(bus.deliveries.values()) > len(bus.published)


@pytest.mark.parametrize("names_location", [False, True], ids=["log-scan-part", "capture-part"])
def test_a_placeholder_record_binds_no_identity(tmp_path: Path, run_uri: str, names_location: bool) -> None:
    """An error from one of our stage messages after the record store lost the run files a placeholder record,
    whether the message names the run id alone (a log-scan part) or its location too (a capture part: its identity
    document was lost with the rest, so the location is bound to nothing); the run's re-emitted event must take
    it over, not be refused as a conflict. (The capture-part case went to poison_messages: the e2e
    test_firestore_restarted_mid_run failed whenever only capture parts were left to redeliver.)"""
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    event = manual_event(run_uri)
    run_id = resolve_run_id(stack.ports, event)
    lost = RecordStoreLost(run_id, "scan_log_part", "2026-12-03T00:00:00+00:00")
    payload = {"run_id": run_id, **({"run_uri": run_uri} if names_location else {})}
    poison.record_poison(stack.ports, "scan_log_part", "scan-log-part-dlq", json.dumps(payload).encode(), {}, lost)
    placeholder = stack.ports.records.get(run_id)
    # The URI the message carries is kept on it (issue 48: "unknown" left the operator nothing to re-emit).
    assert placeholder is not None and placeholder.run_uri == (run_uri if names_location else UNKNOWN_RUN_URI)
    stack.emit(event)
    record = stack.ports.records.get(run_id)
    assert record is not None and record.status is RecordStatus.awaiting_authority and record.run_uri == run_uri
    assert {e.code for e in record.errors} == {"record_store_lost"}
