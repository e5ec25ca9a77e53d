"""Forgetting a run and setting one aside on SQLite, through the port (the Firestore emulator runs the same
scenario: tests/integration/test_forget_run_firestore.py)."""

from __future__ import annotations

from pathlib import Path

from forget_scenario import check_forget, check_set_aside_and_put_back
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords


def test_forget_removes_exactly_the_runs_documents_on_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "records.db"
    check_forget(SqliteRunRecords(db), SqliteIdempotencyStore(db), "wrong-path", "neighbour")


def test_a_run_set_aside_is_put_back_as_it_was_on_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "records.db"
    check_set_aside_and_put_back(SqliteRunRecords(db), SqliteIdempotencyStore(db), "redone")
