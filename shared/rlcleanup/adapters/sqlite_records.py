"""The records ports on SQLite: the embedded default (one file, no server). Safe across threads and processes.

`SqliteRunRecords` is the run-record repository; `SqliteIdempotencyStore` provides the claim primitives (the
state machine is `IdempotencyStore`'s). Both may open the same file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from rlcleanup.errors import RecordMissing
from rlcleanup.models.record import CompletionRecord, RunError, utcnow
from rlcleanup.ports.collections import RUN_KEYED, RUN_NAMED, run_prefix
from rlcleanup.ports.records import (
    INDEXED_FIELDS,
    ForgetReport,
    IdempotencyStore,
    IndexedField,
    SetAside,
    StepDoc,
    check_document_value,
    check_indexed,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (run_id TEXT PRIMARY KEY, doc TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (
  run_id TEXT NOT NULL, key TEXT NOT NULL, state TEXT NOT NULL, lease_until TEXT, result TEXT,
  PRIMARY KEY (run_id, key));
CREATE TABLE IF NOT EXISTS claim_versions (run_id TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL,
  owner TEXT, PRIMARY KEY (run_id, key));
CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, event_id TEXT NOT NULL, outcome TEXT NOT NULL,
  PRIMARY KEY (run_id, event_id));
CREATE TABLE IF NOT EXISTS docs (collection TEXT NOT NULL, doc_id TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (collection, doc_id));
"""
# One expression index per looked-up record field (ports.records.INDEXED_FIELDS), ordered by the run's end: a
# lookup (`runs_where`) is an index range scan, its cost independent of how many records the file holds. Created
# on open, so a file written before them gains them.
_LOOKUP_INDEXES = "".join(
    f"CREATE INDEX IF NOT EXISTS records_by_{name} ON records "
    f"(json_extract(doc, '$.{name}'), json_extract(doc, '$.ended_at'));\n"
    for name in INDEXED_FIELDS
)


def _owner_only(path: Path) -> None:
    """The store holds grants, approvers' public keys and records: created (and kept) mode 0600. SQLite gives its
    -wal/-shm files the database file's permissions, so they follow.

    An existing file is chmod'ed, never opened: closing any descriptor of the database file drops every POSIX
    lock this process holds on it, including those of connections already open (a second store object on the
    same file, e.g. records and claims); another process closing its connection could then reset the WAL under
    them, and they would go on reading a stale snapshot (an upload job's writes unseen by the embedded stack)."""
    if path.is_symlink():
        raise OSError(f"{path} is a symlink: the record store must be a regular file")
    if path.exists():
        os.chmod(path, 0o600)
    else:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists() and not side.is_symlink():
            os.chmod(side, 0o600)


def _json_time(at: datetime) -> str:
    """A time as the record's JSON spells it (pydantic: ISO 8601, `Z` for UTC), so stored ends compare as text."""
    return str(TypeAdapter(datetime).dump_python(at, mode="json"))


class _SqliteFile:
    """One SQLite file, one connection per thread, BEGIN IMMEDIATE transactions."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            _owner_only(Path(self.path))
        self._local = threading.local()
        self._conn().executescript(_SCHEMA + _LOOKUP_INDEXES)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            self._local.conn = conn
        return conn

    def _one(self, sql: str, args: tuple[Any, ...]) -> Any:
        """One row, with the statement closed at once: a half-read statement keeps its WAL read snapshot open,
        and this connection would go on seeing the database as it was (a job process's writes unseen)."""
        cur = self._conn().execute(sql, args)
        try:
            return cur.fetchone()
        finally:
            cur.close()

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


# The tables holding a run's record, its claims and its event ledger (by run_id): what a rerun sets aside.
_RUN_TABLES = ("records", "claims", "claim_versions", "events")


class SqliteRunRecords(_SqliteFile):
    """Completion records, the event ledger and auxiliary documents."""

    def get(self, run_id: str) -> CompletionRecord | None:
        row = self._one("SELECT doc FROM records WHERE run_id = ?", (run_id,))
        return CompletionRecord.model_validate_json(row[0]) if row else None

    def console_url(self, run_id: str) -> None:
        """A records file has no console to link: the report names the run by its id and files instead."""
        return None

    def has_record(self, run_id: str) -> bool:
        return self._one("SELECT 1 FROM records WHERE run_id = ?", (run_id,)) is not None

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
                raise RecordMissing(run_id)
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
                raise RecordMissing(run_id)
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

    def runs_where(
        self, field: IndexedField, value: str, *, ended_before: datetime | None = None, limit: int = 20
    ) -> list[CompletionRecord]:
        bounded = check_indexed(field, limit)
        # The same expressions as the index (records_by_<field>), so SQLite's planner uses it.
        where = f"json_extract(doc, '$.{field}') = ?"
        args: list[Any] = [value]
        if ended_before is not None:
            where += " AND json_extract(doc, '$.ended_at') < ?"
            args.append(_json_time(ended_before))
        sql = f"SELECT doc FROM records WHERE {where} ORDER BY json_extract(doc, '$.ended_at') DESC LIMIT ?"
        rows = self._conn().execute(sql, (*args, bounded)).fetchall()
        return [CompletionRecord.model_validate_json(doc) for (doc,) in rows]

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
        row = self._one("SELECT data FROM docs WHERE collection = ? AND doc_id = ?", (collection, doc_id))
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

    # ----------------------------------------------------------- operator maintenance

    def forget_run(self, run_id: str) -> ForgetReport:
        prefix = run_prefix(run_id)
        with self._tx() as db:
            had = db.execute("SELECT 1 FROM records WHERE run_id = ?", (run_id,)).fetchone() is not None
            removed = sum(db.execute(f"DELETE FROM {t} WHERE run_id = ?", (run_id,)).rowcount for t in _RUN_TABLES)
            removed += db.execute("DELETE FROM docs WHERE substr(collection, 1, ?) = ?", (len(prefix), prefix)).rowcount
            for keyed in RUN_KEYED:
                removed += db.execute(
                    "DELETE FROM docs WHERE collection = ? AND doc_id = ?", (keyed.name, run_id)
                ).rowcount
            for named, field in RUN_NAMED:
                removed += db.execute(
                    "DELETE FROM docs WHERE collection = ? AND json_extract(data, ?) = ?",
                    (named.name, f"$.{field}", run_id),
                ).rowcount
        return ForgetReport(run_id=run_id, had_record=had, removed=removed)

    def set_aside(self, run_id: str) -> SetAside:
        with self._tx() as db:
            rows = {t: db.execute(f"SELECT * FROM {t} WHERE run_id = ?", (run_id,)).fetchall() for t in _RUN_TABLES}
            for table in _RUN_TABLES:
                db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        return SetAside(run_id=run_id, backend="sqlite", rows=rows)

    def put_back(self, kept: SetAside) -> None:
        if kept.backend != "sqlite":
            raise ValueError(f"{kept.run_id}: rows set aside by {kept.backend}, not SQLite")
        with self._tx() as db:
            for table in _RUN_TABLES:
                db.execute(f"DELETE FROM {table} WHERE run_id = ?", (kept.run_id,))
                for row in kept.rows.get(table, []):
                    db.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", tuple(row))


class SqliteIdempotencyStore(_SqliteFile, IdempotencyStore):
    """Claim primitives: a row per claim plus its version (bumped by every compare-and-set)."""

    def _create(self, run_id: str, key: str, doc: StepDoc) -> bool:
        with self._tx() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO claims (run_id, key, state, lease_until, result) VALUES (?, ?, ?, ?, ?)",
                (run_id, key, *_row(doc)),
            )
            if cur.rowcount != 1:
                return False
            db.execute(
                "INSERT OR REPLACE INTO claim_versions (run_id, key, version, owner) VALUES (?, ?, 1, ?)",
                (run_id, key, doc.owner),
            )
            return True

    def _get(self, run_id: str, key: str) -> tuple[StepDoc, Any] | None:
        row = self._one(
            "SELECT c.state, c.lease_until, c.result, v.version, v.owner FROM claims c LEFT JOIN claim_versions v"
            " ON v.run_id = c.run_id AND v.key = c.key WHERE c.run_id = ? AND c.key = ?",
            (run_id, key),
        )
        if row is None:
            return None
        state, lease_until, result, version, owner = row
        until = datetime.fromisoformat(lease_until) if lease_until else None
        doc = StepDoc(state=state, lease_until=until, owner=owner, result=json.loads(result) if result else None)
        return doc, version or 0

    def _compare_and_set(self, run_id: str, key: str, version: Any, doc: StepDoc) -> bool:
        with self._tx() as db:
            if self._version(db, run_id, key) != version:
                return False
            db.execute(
                "UPDATE claims SET state = ?, lease_until = ?, result = ? WHERE run_id = ? AND key = ?",
                (*_row(doc), run_id, key),
            )
            db.execute(
                "INSERT OR REPLACE INTO claim_versions (run_id, key, version, owner) VALUES (?, ?, ?, ?)",
                (run_id, key, int(version) + 1, doc.owner),
            )
            return True

    def _delete(self, run_id: str, key: str, version: Any) -> bool:
        with self._tx() as db:
            if self._version(db, run_id, key) != version:
                return False
            db.execute("DELETE FROM claims WHERE run_id = ? AND key = ?", (run_id, key))
            db.execute("DELETE FROM claim_versions WHERE run_id = ? AND key = ?", (run_id, key))
            return True

    def forget_claims(self, run_id: str) -> int:
        with self._tx() as db:
            count = db.execute("DELETE FROM claims WHERE run_id = ?", (run_id,)).rowcount
            db.execute("DELETE FROM claim_versions WHERE run_id = ?", (run_id,))
            return int(count)

    def _done_results(self, run_id: str, prefix: str) -> dict[str, dict[str, Any]]:
        rows = (
            self._conn()
            .execute(
                "SELECT key, result FROM claims WHERE run_id = ? AND state = 'done' AND substr(key, 1, ?) = ?",
                (run_id, len(prefix), prefix),
            )
            .fetchall()
        )
        return {key: json.loads(res) if res else {} for key, res in rows}

    def _done_count(self, run_id: str, prefix: str) -> int:
        row = (
            self._conn()
            .execute(
                "SELECT COUNT(*) FROM claims WHERE run_id = ? AND state = 'done' AND substr(key, 1, ?) = ?",
                (run_id, len(prefix), prefix),
            )
            .fetchone()
        )
        return int(row[0])

    def claims_of(self, run_id: str) -> dict[str, StepDoc]:
        rows = (
            self._conn()
            .execute(
                "SELECT c.key, c.state, c.lease_until, c.result, v.owner FROM claims c LEFT JOIN claim_versions v"
                " ON v.run_id = c.run_id AND v.key = c.key WHERE c.run_id = ? ORDER BY c.key",
                (run_id,),
            )
            .fetchall()
        )
        return {
            key: StepDoc(
                state=state,
                lease_until=datetime.fromisoformat(until) if until else None,
                owner=owner,
                result=json.loads(result) if result else None,
            )
            for key, state, until, result, owner in rows
        }

    def running(self, run_id: str) -> list[tuple[str, StepDoc]]:
        """The run's unfinished claims with their leases and owners (key order): what `run` reads to resume an
        interrupted pass, or to say which live process holds it (runtime/resume.py)."""
        rows = (
            self._conn()
            .execute(
                "SELECT c.key, c.lease_until, v.owner FROM claims c LEFT JOIN claim_versions v"
                " ON v.run_id = c.run_id AND v.key = c.key WHERE c.run_id = ? AND c.state != 'done' ORDER BY c.key",
                (run_id,),
            )
            .fetchall()
        )
        return [
            (key, StepDoc(state="running", lease_until=datetime.fromisoformat(until) if until else None, owner=owner))
            for key, until, owner in rows
        ]

    @staticmethod
    def _version(db: sqlite3.Connection, run_id: str, key: str) -> int | None:
        exists = db.execute("SELECT 1 FROM claims WHERE run_id = ? AND key = ?", (run_id, key)).fetchone()
        if exists is None:
            return None
        row = db.execute("SELECT version FROM claim_versions WHERE run_id = ? AND key = ?", (run_id, key)).fetchone()
        return int(row[0]) if row else 0  # a claim written before versions existed


def _row(doc: StepDoc) -> tuple[str, str | None, str | None]:
    until = doc.lease_until.isoformat() if doc.lease_until else None
    return doc.state, until, json.dumps(doc.result, default=str) if doc.result is not None else None
