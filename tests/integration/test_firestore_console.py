"""The record as the Firestore console shows it, read back with the plain Firestore client from the emulator:
attempt times and the run's `ended_at` are Firestore timestamps (never strings), `problem_codes` / `error_codes`
arrays answer array-contains, and every documented console query (adapters/firestore_queries.py) runs and finds
exactly the runs it should. The SQLite embedded store keeps the same fields."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.firestore_queries import CONSOLE_QUERIES, ConsoleQuery
from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.models.record import CompletionRecord, RunError
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.samples.upload import upload_sample_run_to
from rlcleanup.stack import StackState

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, name: str, firestore_project: str | None) -> tuple[EmbeddedStack, CompletionRecord]:
    """The missing-shard sample (one attempt, candidate 10 without a shard) through the embedded pipeline, its
    records in Firestore (the emulator) or in SQLite."""
    src = tmp_path / "src"
    write_sample_run(src, "missing-shard")
    run_uri = upload_sample_run_to(RoutingStorage(), src, str(tmp_path / "runs"), rename=name)
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))
    if firestore_project is not None:
        records, claims = firestore_stores(project=firestore_project)
        stack.ports = replace(stack.ports, records=records, claims=claims)
    stack.emit(manual_event(run_uri))
    record = stack.ports.records.get(f"{name}-{VERSION}")
    assert record is not None and record.status.value == "awaiting_authority", record
    return stack, record


def _matches(query: ConsoleQuery, doc: dict[str, Any]) -> bool:
    value: Any = doc
    for part in query.field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return query.value in (value or []) if query.op == "array-contains" else value == query.value


def test_the_record_reads_well_with_the_plain_client(
    stack: StackState, firestore_client: Any, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)  # the report is not under test
    name = f"console-{uid}"
    pipeline, record = _run(tmp_path / "fs", name, stack.project)
    run_id = record.run_id
    ref = firestore_client.collection("runs").document(run_id)
    doc = ref.get().to_dict()

    # Timestamps are timestamps: the run's ended_at, and every attempt's in the run document and in attempts/.
    assert isinstance(doc["ended_at"], datetime)
    assert doc["ended_at"] == datetime(2026, 11, 30, 9, 4, 32, tzinfo=UTC)  # the attempt record's end
    (inline,) = doc["chain"]["attempts"]
    (sub,) = [s.to_dict() for s in ref.collection("attempts").stream()]
    for attempt in (inline, sub):
        assert isinstance(attempt["started_at"], datetime) and isinstance(attempt["ended_at"], datetime), attempt
        assert attempt["started_at"] == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
        assert attempt["ended_at"] == doc["ended_at"]

    # Codes beside the details: array-contains finds the run, and the candidate document.
    assert doc["problem_codes"] == ["missing_shard"] and doc["error_codes"] == []
    cand = ref.collection("candidates").document("10").get().to_dict()
    assert cand["problem_codes"] == ["missing_shard"] and cand["problems"][0].startswith("missing_shard: ")
    assert ref.collection("candidates").document("5").get().to_dict()["problem_codes"] == []
    pipeline.ports.records.add_errors(run_id, [RunError(step="capture", code="write_once_conflict", message="x")])
    doc = ref.get().to_dict()
    assert doc["error_codes"] == ["write_once_conflict"]

    # Every documented console query runs as written and returns exactly the runs it describes (this run among
    # the others the session's tests left in the emulator), newest first.
    for query in CONSOLE_QUERIES:
        found = [s.to_dict() for s in query.query(firestore_client, limit=500).stream()]
        assert all(_matches(query, d) for d in found), query
        assert (run_id in {d["run_id"] for d in found}) is _matches(query, doc), query
        # newest first; Firestore orders null before any timestamp, so descending puts records with no end (other
        # tests' runs in the same emulator, e.g. a placeholder) last
        ends = [(d.get("ended_at") is not None, d.get("ended_at")) for d in found]
        assert ends == sorted(ends, key=lambda e: (e[0], e[1] or 0), reverse=True), query
    assert _matches(CONSOLE_QUERIES[4], doc) and _matches(CONSOLE_QUERIES[5], doc)  # both code arrays were hit

    # What the adapter reads back is the model, with the same derived fields; SQLite keeps the same ones.
    back = pipeline.ports.records.get(run_id)
    assert back is not None and (back.problem_codes, back.error_codes) == (["missing_shard"], ["write_once_conflict"])
    sqlite_stack, embedded = _run(tmp_path / "sqlite", name, None)
    sqlite_stack.ports.records.add_errors(run_id, [RunError(step="capture", code="write_once_conflict", message="x")])
    embedded = sqlite_stack.ports.records.get(run_id) or embedded
    same = {"ended_at", "problem_codes", "error_codes", "status", "terminal_state"}
    assert embedded.model_dump(include=same) == back.model_dump(include=same)
    assert embedded.chain.attempts[0].started_at == back.chain.attempts[0].started_at
    assert [c.problem_codes for c in embedded.candidates] == [c.problem_codes for c in back.candidates]
