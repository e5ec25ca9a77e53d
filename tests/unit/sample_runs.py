"""Shared setup for the tests that run the sample through the embedded stack and compare with a clean run."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event, resolve_run_id
from rlcleanup.runtime.embedded import run_embedded as run_embedded_once
from rlcleanup.samples.generator import write_sample_run


def run_embedded(base: Path, run_uri: str) -> tuple[EmbeddedStack, CompletionRecord]:
    """One run of `run_uri` on a fresh embedded stack under `base`: the stack and the run's record."""
    stack = EmbeddedStack.create(base / "records.db", str(base / "preserved"))
    event = manual_event(run_uri)
    stack.emit(event)
    record = stack.ports.records.get(resolve_run_id(stack.ports, event))
    assert record is not None
    return stack, record


def resumed_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The completed-resumed sample (4 export candidates), without report charts (not under test there)."""
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
    return str(write_sample_run(tmp_path / "runs", "completed-resumed"))


def clean_record(tmp_path: Path, run_uri: str) -> CompletionRecord:
    """The record of an undisturbed run, to compare a faulty one against."""
    _, record = run_embedded(tmp_path / "clean", run_uri)
    assert record.status is RecordStatus.awaiting_authority and len(record.candidates) == 4 and not record.errors
    return record


def scenario_records(base: Path, names: Iterable[str]) -> dict[str, CompletionRecord]:
    """Each named sample scenario through the embedded pipeline, in one record store (report charts skipped: no
    field of the record depends on them)."""
    out: dict[str, CompletionRecord] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
        for name in names:
            record = run_embedded_once(
                str(write_sample_run(base / name, name)), db_path=base / "r.db", preserve_root=str(base / "p")
            )
            assert record is not None, name
            out[name] = record
    return out
