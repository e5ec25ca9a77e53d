"""RecordStore on SQLite: the embedded default (one file, no server). Safe across threads and processes."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rlcleanup.models.record import CompletionRecord, RunError, utcnow
from rlcleanup.ports.records import Claim, check_document_value

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (run_id TEXT PRIMARY KEY, doc TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (
  run_id TEXT NOT NULL, key TEXT NOT NULL, state TEXT NOT NULL, lease_until TEXT, result TEXT,
  PRIMARY KEY (run_id, key));
CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, event_id TEXT NOT NULL, outcome TEXT NOT NULL,
  PRIMARY KEY (run_id, event_id));
CREATE TABLE IF NOT EXISTS docs (collection TEXT NOT NULL, doc_id TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (collection, doc_id));
"""


class SqliteRecordStore:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._conn().executescript(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            self._local.conn = conn
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")  # take the write lock up front: read-modify-write stays atomic
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def get(self, run_id: str) -> CompletionRecord | None:
        row = self._conn().execute("SELECT doc FROM records WHERE run_id = ?", (run_id,)).fetchone()
        return CompletionRecord.model_validate_json(row[0]) if row else None

    def create_if_absent(self, record: CompletionRecord) -> bool:
        with self._tx() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO records (run_id, doc, updated_at) VALUES (?, ?, ?)",
                (record.run_id, record.model_dump_json(), record.updated_at.isoformat()),
            )
            return cur.rowcount == 1

    def update(self, run_id: str, fields: dict[str, Any]) -> None:
        # No Firestore value check here: record fields are the model's, which the Firestore adapter encodes itself
        # (coverage gaps become maps). Free-form dicts (step results, events, docs) are checked.
        with self._tx() as db:
            row = db.execute("SELECT doc FROM records WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise KeyError(f"no record for run {run_id!r}")
            doc = json.loads(row[0])
            doc.update(fields)
            doc["updated_at"] = utcnow().isoformat()
            record = CompletionRecord.model_validate(doc)  # never store what the model would reject
            db.execute(
                "UPDATE records SET doc = ?, updated_at = ? WHERE run_id = ?",
                (record.model_dump_json(), record.updated_at.isoformat(), run_id),
            )

    def add_errors(self, run_id: str, errors: list[RunError]) -> None:
        if not errors:
            return
        with self._tx() as db:
            row = db.execute("SELECT doc FROM records WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise KeyError(f"no record for run {run_id!r}")
            record = CompletionRecord.model_validate_json(row[0])
            known = {(e.step, e.code, e.message) for e in record.errors}
            record.errors.extend(e for e in errors if (e.step, e.code, e.message) not in known)
            record.updated_at = utcnow()
            db.execute(
                "UPDATE records SET doc = ?, updated_at = ? WHERE run_id = ?",
                (record.model_dump_json(), record.updated_at.isoformat(), run_id),
            )

    def list_runs(self, limit: int = 100) -> Iterator[CompletionRecord]:
        rows = self._conn().execute("SELECT doc FROM records ORDER BY updated_at DESC LIMIT ?", (limit,)).fetchall()
        for (doc,) in rows:
            yield CompletionRecord.model_validate_json(doc)

    def claim(self, run_id: str, key: str, lease_seconds: float, now: datetime) -> Claim:
        until = (now + timedelta(seconds=lease_seconds)).isoformat()
        with self._tx() as db:
            row = db.execute(
                "SELECT state, lease_until FROM claims WHERE run_id = ? AND key = ?", (run_id, key)
            ).fetchone()
            if row is not None:
                state, lease_until = row
                if state == "done":
                    return Claim.done
                if lease_until and datetime.fromisoformat(lease_until) > now:
                    return Claim.busy
            db.execute(
                "INSERT OR REPLACE INTO claims (run_id, key, state, lease_until, result) VALUES (?, ?, 'running', ?, NULL)",
                (run_id, key, until),
            )
            return Claim.acquired

    def complete(self, run_id: str, key: str, result: dict[str, Any]) -> None:
        check_document_value(result, f"runs/{run_id}/steps/{key}")
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO claims (run_id, key, state, lease_until, result) VALUES (?, ?, 'done', NULL, ?)",
                (run_id, key, json.dumps(result, default=str)),
            )

    def release(self, run_id: str, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM claims WHERE run_id = ? AND key = ? AND state = 'running'", (run_id, key))

    def result(self, run_id: str, key: str) -> dict[str, Any] | None:
        row = (
            self._conn()
            .execute("SELECT result FROM claims WHERE run_id = ? AND key = ? AND state = 'done'", (run_id, key))
            .fetchone()
        )
        return json.loads(row[0]) if row and row[0] else None

    def results(self, run_id: str, prefix: str) -> dict[str, dict[str, Any]]:
        rows = (
            self._conn()
            .execute(
                "SELECT key, result FROM claims WHERE run_id = ? AND state = 'done' AND substr(key, 1, ?) = ?",
                (run_id, len(prefix), prefix),
            )
            .fetchall()
        )
        return {key: json.loads(res) if res else {} for key, res in rows}

    def record_event(self, run_id: str, event_id: str, outcome: dict[str, Any]) -> bool:
        check_document_value(outcome, f"runs/{run_id}/events/{event_id}")
        with self._tx() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO events (run_id, event_id, outcome) VALUES (?, ?, ?)",
                (run_id, event_id, json.dumps(outcome, default=str)),
            )
            return cur.rowcount == 1

    def put_doc(self, collection: str, doc_id: str, data: dict[str, Any], *, only_if_absent: bool = False) -> bool:
        check_document_value(data, f"{collection}/{doc_id}")
        verb = "INSERT OR IGNORE" if only_if_absent else "INSERT OR REPLACE"
        with self._tx() as db:
            cur = db.execute(
                f"{verb} INTO docs (collection, doc_id, data) VALUES (?, ?, ?)",
                (collection, doc_id, json.dumps(data, default=str)),
            )
            return cur.rowcount == 1

    def get_doc(self, collection: str, doc_id: str) -> dict[str, Any] | None:
        row = (
            self._conn()
            .execute("SELECT data FROM docs WHERE collection = ? AND doc_id = ?", (collection, doc_id))
            .fetchone()
        )
        return json.loads(row[0]) if row else None

    def list_docs(self, collection: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        rows = (
            self._conn()
            .execute(
                "SELECT doc_id, data FROM docs WHERE collection = ? AND substr(doc_id, 1, ?) = ? ORDER BY doc_id",
                (collection, len(prefix), prefix),
            )
            .fetchall()
        )
        return [(doc_id, json.loads(data)) for doc_id, data in rows]
