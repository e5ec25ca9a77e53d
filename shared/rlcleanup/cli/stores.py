"""Opening the record store for read commands, with errors that name the fix; run look-up with close matches;
and the per-step claim states `watch` polls (SQLite claims table, or Firestore `runs/{id}/steps`)."""

from __future__ import annotations

import difflib
import json
import socket
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.records import IdempotencyStore, RunRecords
from rlcleanup.settings import platform

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_FAILURE = 0, 1, 2, 3


class OperatorError(Exception):
    """A one-line, actionable error and the exit code it maps to."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class OpenStore:
    store: RunRecords
    claims: IdempotencyStore
    where: str  # for messages: "SQLite .rlcleanup/records.db" / "Firestore project p (emulator localhost:8080)"
    backend: str
    db_path: Path | None = None


def _emulator_reachable(host: str, timeout: float = 1.5) -> bool:
    name, _, port = host.rpartition(":")
    try:
        with socket.create_connection((name or "localhost", int(port or 8080)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _check_credentials(project: str) -> None:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        google.auth.default()
    except DefaultCredentialsError as exc:
        raise OperatorError(
            f"no Google Cloud credentials to read Firestore project {project}: set GOOGLE_APPLICATION_CREDENTIALS "
            "to a service-account key file (or run `gcloud auth application-default login`); for the local stack "
            "set FIRESTORE_EMULATOR_HOST instead (`eval $(rlcleanup stack up)`)"
        ) from exc


def open_store(backend: str | None, db: Path, project: str | None) -> OpenStore:
    emulator = platform().firestore_emulator_host
    chosen = backend or ("firestore" if emulator else "sqlite")
    if chosen == "sqlite":
        if not db.exists():
            raise OperatorError(
                f"no records database at {db}: process a run first (`rlcleanup run RUN_ROOT --db {db}`), pass --db "
                "PATH, or use --backend firestore",
                EXIT_NOT_FOUND,
            )
        from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords

        return OpenStore(SqliteRunRecords(db), SqliteIdempotencyStore(db), f"SQLite {db}", "sqlite", db)
    if chosen != "firestore":
        raise OperatorError(f"unknown backend {chosen!r}: use sqlite or firestore", EXIT_USAGE)
    project = project or platform().project
    if not project:
        raise OperatorError(
            "Firestore needs a project: set GOOGLE_CLOUD_PROJECT (`eval $(rlcleanup stack up)` does) or pass --project",
            EXIT_USAGE,
        )
    if emulator:
        if not _emulator_reachable(emulator):
            raise OperatorError(
                f"the Firestore emulator at {emulator} (FIRESTORE_EMULATOR_HOST) is not reachable: start it with "
                "`rlcleanup stack up`, or unset FIRESTORE_EMULATOR_HOST to read the SQLite records"
            )
        where = f"Firestore project {project} (emulator {emulator})"
    else:
        _check_credentials(project)
        where = f"Firestore project {project}"
    from rlcleanup.adapters.firestore_records import firestore_stores

    return OpenStore(*firestore_stores(project), where, "firestore")


def close_matches(wanted: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Substring hits first (people type a distinctive fragment), then difflib's nearest spellings."""
    ids = list(known)
    hits = [k for k in ids if wanted.lower() in k.lower()]
    for k in difflib.get_close_matches(wanted, ids, n=n, cutoff=0.5):
        if k not in hits:
            hits.append(k)
    return hits[:n]


def not_found(opened: OpenStore, run_id: str, message: str | None = None, code: int = EXIT_NOT_FOUND) -> OperatorError:
    """ "no record for run X" with the close matches every read command offers."""
    matches = close_matches(run_id, (r.run_id for r in opened.store.list_runs(limit=1000)))
    hint = f"; did you mean {', '.join(matches)}?" if matches else "; `rlcleanup status` lists the runs"
    return OperatorError((message or f"no record for run {run_id!r} in {opened.where}") + hint, code)


def get_record(opened: OpenStore, run_id: str) -> CompletionRecord:
    record = opened.store.get(run_id)
    if record is not None:
        return record
    raise not_found(opened, run_id)


def step_states(opened: OpenStore, run_id: str) -> dict[str, dict[str, Any]]:
    """key -> {"state": running|done, "result": {...}} for every claim of the run (done and in flight)."""
    if opened.backend == "sqlite" and opened.db_path is not None:
        # Read-only and outside the adapter: the port exposes only finished results, watch also shows leases.
        uri = f"file:{opened.db_path.resolve()}?mode=ro"
        with sqlite3.connect(uri, uri=True, timeout=10) as conn:
            rows = conn.execute("SELECT key, state, result FROM claims WHERE run_id = ?", (run_id,)).fetchall()
        return {k: {"state": s, "result": json.loads(res) if res else {}} for k, s, res in rows}
    db = getattr(opened.store, "db", None)
    if opened.backend == "firestore" and db is not None:
        out: dict[str, dict[str, Any]] = {}
        for snap in db.collection("runs").document(run_id).collection("steps").stream():
            data = snap.to_dict() or {}
            out[str(data.get("key", snap.id))] = {"state": data.get("state"), "result": data.get("result") or {}}
        return out
    return {k: {"state": "done", "result": v} for k, v in opened.claims.results(run_id, "").items()}
