"""Record maintenance the operator asks for: `run --rerun` (keep the old record as history, then start over) and
`forget` (remove a record that should not exist, e.g. a wrong path).

The records ports have no delete: the pipeline itself never removes anything. These are operator actions, so
they live beside the CLI and speak to each backend directly (SQLite tables; Firestore's recursive delete).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlcleanup.models.record import CompletionRecord
from rlcleanup.runtime.admission import RUN_ID_CONFLICTS, RUN_IDS, RUN_LOCATIONS, location_key
from rlcleanup.runtime.backends import OpenStore, StoreBackend
from rlcleanup.steps.history import CONFIG_COLLECTION


def history_collection(run_id: str) -> str:
    return f"runs/{run_id}/history"


def history(opened: OpenStore, run_id: str) -> list[dict[str, Any]]:
    """Earlier records of the run (oldest first), as `run --rerun` kept them."""
    return [doc for _, doc in sorted(opened.store.list_docs(history_collection(run_id)))]


def archive(opened: OpenStore, record: CompletionRecord) -> str:
    """Keep the record as runs/{id}/history/{n}; returns the document path."""
    number = len(history(opened, record.run_id)) + 1
    doc = {"archived_at": datetime.now(UTC).isoformat(), "record": record.model_dump(mode="json")}
    doc_id = f"{number:04d}"
    opened.store.put_doc(history_collection(record.run_id), doc_id, doc)
    return f"{history_collection(record.run_id)}/{doc_id}"


def _sqlite(db_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(db_path), timeout=30)


def reset_for_rerun(opened: OpenStore, run_id: str) -> None:
    """Drop the record, its step claims and its event ledger so the next event runs every step again.
    Grants, approvers, registry rows and the history stay: they are the run's authority trail."""
    if opened.backend != StoreBackend.sqlite or opened.db_path is None:
        raise ValueError("--rerun runs the embedded pipeline: it needs the SQLite records file")
    with _sqlite(opened.db_path) as conn:
        for table in ("records", "claims", "claim_versions", "events"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))


def forget(opened: OpenStore, run_id: str) -> None:
    """Remove the record and everything filed under it (claims, events, grants, history, its kept configuration),
    and the id's binding to its location (`run_ids`, `run_locations`: runtime/admission.py), so the id is free for
    the run that should hold it, as the `run_id_conflict` message's fix says. The ended-grant ledger stays (a grant
    is used once)."""
    bound = opened.store.get_doc(RUN_IDS, run_id)
    location = location_key(bound["run_uri"]) if bound and isinstance(bound.get("run_uri"), str) else None
    if opened.backend == StoreBackend.sqlite and opened.db_path is not None:
        with _sqlite(opened.db_path) as conn:
            for table in ("records", "claims", "claim_versions", "events"):
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM docs WHERE collection LIKE ? ESCAPE '\\'", (_like_prefix(f"runs/{run_id}/"),))
            conn.execute("DELETE FROM docs WHERE collection = ? AND doc_id = ?", (RUN_IDS, run_id))
            for collection in (CONFIG_COLLECTION, RUN_ID_CONFLICTS):
                conn.execute("DELETE FROM docs WHERE collection = ? AND doc_id = ?", (collection, run_id))
            if location is not None:
                conn.execute("DELETE FROM docs WHERE collection = ? AND doc_id = ?", (RUN_LOCATIONS, location))
        return
    db = getattr(opened.store, "db", None)
    if db is None:
        raise ValueError(f"forget is not supported on {opened.where}")
    db.recursive_delete(db.collection("runs").document(run_id))
    db.collection(RUN_IDS).document(run_id).delete()
    db.collection(CONFIG_COLLECTION).document(run_id).delete()  # its kept configuration (steps/history.py)
    db.collection(RUN_ID_CONFLICTS).document(run_id).delete()  # the id it declared and was not given
    if location is not None:
        db.collection(RUN_LOCATIONS).document(location).delete()


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"
