"""Candidates are validated in batches (one candidate-validation message per CANDIDATES_PER_BATCH candidates), yet
each candidate stays its own fan-out member: its own claim, its own outcome, its own failure.

Real embedded runs (SQLite, local files, in-process bus) against a clean run of the same sample.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sample_runs import clean_record, resumed_sample, run_embedded

from rlcleanup.errors import TransientError
from rlcleanup.models.events import CandidateMessage
from rlcleanup.models.record import CompletionRecord
from rlcleanup.runtime import handlers
from rlcleanup.runtime.embedded import EmbeddedStack
from rlcleanup.runtime.stages import capture as capture_stage
from rlcleanup.runtime.stages import validate as validate_stage

_run = run_embedded


def _validation_messages(stack: EmbeddedStack) -> list[dict[str, Any]]:
    return [json.loads(m.data) for m in stack.bus.published if m.topic == "candidate-validation"]


def _candidates(record: CompletionRecord) -> list[dict[str, Any]]:
    return [c.model_dump(exclude={"checked_at"}) for c in record.candidates]


@pytest.fixture
def sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, CompletionRecord]:
    """The sample's run URI and its clean record."""
    run_uri = resumed_sample(tmp_path, monkeypatch)
    return run_uri, clean_record(tmp_path, run_uri)


def test_the_fan_in_publishes_one_message_per_batch_and_one_for_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: tuple[str, CompletionRecord]
) -> None:
    run_uri, clean = sample
    monkeypatch.setattr(capture_stage, "CANDIDATES_PER_BATCH", 3)
    stack, record = _run(tmp_path / "batched", run_uri)
    shapes = [(m.get("targets") or [], m.get("target")) for m in _validation_messages(stack)]
    assert shapes == [
        (["candidate:5", "candidate:10", "candidate:15"], None),
        (["candidate:20"], None),
        ([], "resume"),
    ]
    assert _candidates(record) == _candidates(clean) and record.status is clean.status
    assert record.resume_safety == clean.resume_safety


def test_a_transient_error_in_a_batch_redoes_only_the_candidates_not_yet_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: tuple[str, CompletionRecord]
) -> None:
    run_uri, clean = sample
    calls: Counter[int] = Counter()
    original = validate_stage.validate_candidate

    def flaky(storage: Any, layout: Any, step: int, **kwargs: Any) -> Any:
        calls[step] += 1
        if step == 10 and calls[step] == 1:
            raise TransientError("storage busy")
        return original(storage, layout, step, **kwargs)

    monkeypatch.setattr(validate_stage, "validate_candidate", flaky)
    stack, record = _run(tmp_path / "flaky", run_uri)
    assert calls == {5: 1, 10: 2, 15: 1, 20: 1}  # the redelivery validated only step 10 again
    assert not any(m.get("target") == "candidate:10" for m in _validation_messages(stack))  # retried, not sent on
    assert _candidates(record) == _candidates(clean) and not record.errors
    assert stack.bus.dead_letters == []


def test_a_redelivered_batch_whose_members_are_done_validates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: tuple[str, CompletionRecord]
) -> None:
    run_uri, clean = sample
    stack, _ = _run(tmp_path / "again", run_uri)
    batch = next(m for m in stack.bus.published if m.topic == "candidate-validation" and b'"targets"' in m.data)
    asked: list[list[int]] = []
    original = validate_stage.validate_many

    def spy(storage: Any, layout: Any, steps: Any, **kwargs: Any) -> Any:
        asked.append(list(steps))
        return original(storage, layout, steps, **kwargs)

    monkeypatch.setattr(validate_stage, "validate_many", spy)
    answer = handlers.dispatch(stack.ports, "validate_candidate", "validate-candidate-dlq", batch.data, {})
    assert asked == [[]] and answer == "fan-in already done"
    record = stack.ports.records.get(clean.run_id)
    assert record is not None and _candidates(record) == _candidates(clean)


@pytest.mark.parametrize(
    "members",
    [
        {},
        {"target": "resume", "targets": ["candidate:5"]},
        {"targets": ["resume"]},
        {"targets": ["candidate:5", "candidate:5"]},
        {"targets": [f"candidate:{i}" for i in range(65)]},
    ],
    ids=["neither", "both", "resume-in-a-batch", "twice", "too-many"],
)
def test_a_message_names_one_target_or_a_batch_of_distinct_candidates(members: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CandidateMessage(run_id="r", run_uri="/runs/r", preserve_root="/p", **members)
