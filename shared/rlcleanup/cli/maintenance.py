"""Record maintenance the operator asks for: `run --rerun` (keep the old record as history, then start over) and
`forget` (remove a record that should not exist, e.g. a wrong path).

The pipeline itself never removes anything; these are operator actions, and they go through the record-store
port like everything else (`RunRecords.forget_run`, `set_aside`, `put_back`): each backend removes what it holds
in its own way, and no face runs SQL or reaches a client.
"""

from __future__ import annotations

from rlcleanup.models.documents import KeptRecord
from rlcleanup.models.record import CompletionRecord, utcnow
from rlcleanup.ports.collections import HISTORY, Documents
from rlcleanup.ports.records import ForgetReport, RunRecords, SetAside
from rlcleanup.runtime.backends import OpenStore, StoreBackend


def _history(records: RunRecords, run_id: str) -> Documents[KeptRecord]:
    return HISTORY.bind(records, run_id, KeptRecord)


def history(opened: OpenStore, run_id: str) -> list[KeptRecord]:
    """Earlier records of the run (oldest first), as `run --rerun` kept them."""
    return [kept for _, kept in _history(opened.store, run_id).list()]


def archive(opened: OpenStore, record: CompletionRecord) -> str:
    """Keep the record as runs/{id}/history/{n}; returns the document path."""
    kept = _history(opened.store, record.run_id)
    doc_id = f"{len(kept.list()) + 1:04d}"
    kept.put(doc_id, KeptRecord(archived_at=utcnow(), record=record))
    return f"{kept.path}/{doc_id}"


def reset_for_rerun(opened: OpenStore, run_id: str) -> SetAside:
    """Take the record, its step claims and its event ledger out so the next event runs every step again, and
    return them (`put_back` restores them if the rerun cannot finish). Grants, approvers, registry rows and the
    history stay: they are the run's authority trail."""
    if opened.backend != StoreBackend.sqlite:
        raise ValueError("--rerun runs the embedded pipeline: it needs the SQLite records file")
    return opened.store.set_aside(run_id)


def forget(opened: OpenStore, run_id: str) -> ForgetReport:
    """Remove the record and everything filed under it (claims, events, grants, history, its kept configuration),
    and the id's binding to its location (`run_ids`, `run_locations`: runtime/admission.py), so the id is free for
    the run that should hold it, as the `run_id_conflict` message's fix says. The ended-grant ledger stays (a grant
    is used once)."""
    return opened.store.forget_run(run_id)
