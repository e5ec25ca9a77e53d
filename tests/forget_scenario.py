"""One scenario for `RunRecords.forget_run`, `set_aside` and `put_back`, run on every record-store backend
(tests/unit/test_forget_run.py on SQLite, tests/integration/test_forget_run_firestore.py on the Firestore
emulator): two runs with everything a run files (record, claims, events, every run collection, the run-keyed and
run-naming documents), one forgotten; exactly its documents go."""

from __future__ import annotations

from datetime import UTC, datetime

from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.collections import (
    ENDED_GRANTS,
    GRANTS,
    HISTORY,
    QUARANTINE,
    RUN_CONFIGS,
    RUN_ID_CONFLICTS,
    RUN_IDS,
    RUN_LOCATIONS,
    reclaim_results,
)
from rlcleanup.ports.records import IdempotencyStore, RunRecords

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def file_a_run(records: RunRecords, claims: IdempotencyStore, run_id: str) -> None:
    """Everything the pipeline and the authority file for one run."""
    records.create_if_absent(CompletionRecord(run_id=run_id, run_uri=f"/runs/{run_id}"))
    claims.claim(run_id, "classify", 60, NOW)
    claims.complete(run_id, "classify", {"snapshot": f"/p/{run_id}.json"})
    claims.claim(run_id, "capture:0", 60, NOW, owner="m1")  # one in flight
    records.record_event(run_id, "e1", {"outcome": "started"})
    for collection in (GRANTS, QUARANTINE, HISTORY, reclaim_results("g1")):
        records.put_doc(collection.path(run_id), "d1", {"run_id": run_id})
    for keyed in (RUN_IDS, RUN_ID_CONFLICTS, RUN_CONFIGS):
        records.put_doc(keyed.name, run_id, {"run_uri": f"/runs/{run_id}"})
    records.put_doc(RUN_LOCATIONS.name, f"loc-{run_id}", {"run_id": run_id, "run_uri": f"/runs/{run_id}"})
    records.put_doc(ENDED_GRANTS.name, f"g-{run_id}", {"run_id": run_id, "state": "used", "at": NOW.isoformat()})


def what_is_filed(records: RunRecords, claims: IdempotencyStore, run_id: str) -> dict[str, object]:
    """The run's record, claims and documents, read back through the ports (its events: record_event)."""
    return {
        "record": records.has_record(run_id),
        "claims": sorted(claims.claims_of(run_id)),
        **{c.name: records.list_docs(c.path(run_id)) for c in (GRANTS, QUARANTINE, HISTORY, reclaim_results("g1"))},
        **{k.name: records.get_doc(k.name, run_id) for k in (RUN_IDS, RUN_ID_CONFLICTS, RUN_CONFIGS)},
        "location": records.get_doc(RUN_LOCATIONS.name, f"loc-{run_id}"),
    }


def check_forget(records: RunRecords, claims: IdempotencyStore, gone: str, kept: str) -> None:
    file_a_run(records, claims, gone)
    file_a_run(records, claims, kept)
    kept_before = what_is_filed(records, claims, kept)
    assert kept_before["record"] and kept_before["claims"] == ["capture:0", "classify"]

    report = records.forget_run(gone)

    assert report.run_id == gone and report.had_record
    # record, run doc, 2 claims, 1 event, 4 run collection docs, 3 run-keyed, 1 location (Firestore adds none: a
    # claim and an event are one document each there too; the run's id binding is one document).
    assert report.removed >= 1 + 2 + 1 + 4 + 3 + 1
    assert records.get(gone) is None and claims.claims_of(gone) == {}
    assert records.record_event(gone, "e1", {}) is True  # the event ledger is empty: e1 is new again
    for collection in (GRANTS, QUARANTINE, HISTORY, reclaim_results("g1")):
        assert records.list_docs(collection.path(gone)) == [], collection
    for keyed in (RUN_IDS, RUN_ID_CONFLICTS, RUN_CONFIGS):
        assert records.get_doc(keyed.name, gone) is None, keyed
    assert records.get_doc(RUN_LOCATIONS.name, f"loc-{gone}") is None
    assert records.get_doc(ENDED_GRANTS.name, f"g-{gone}") is not None  # a grant is used once, forgotten or not
    # The other run: every document as it was, its event ledger too.
    assert what_is_filed(records, claims, kept) == kept_before
    assert records.record_event(kept, "e1", {}) is False
    assert records.forget_run(gone).had_record is False  # twice: nothing left, no error


def check_set_aside_and_put_back(records: RunRecords, claims: IdempotencyStore, run_id: str) -> None:
    file_a_run(records, claims, run_id)
    before = (records.get(run_id), claims.claims_of(run_id))

    kept = records.set_aside(run_id)

    assert records.get(run_id) is None and claims.claims_of(run_id) == {}
    assert records.record_event(run_id, "e1", {}) is True  # the ledger went with it
    assert records.list_docs(GRANTS.path(run_id)) != [] and records.list_docs(HISTORY.path(run_id)) != []
    assert records.get_doc(RUN_IDS.name, run_id) is not None  # the authority trail and the id's binding stay
    records.create_if_absent(CompletionRecord(run_id=run_id, run_uri="/elsewhere", status="failed"))  # a rerun

    records.put_back(kept)

    assert (records.get(run_id), claims.claims_of(run_id)) == before
    assert records.record_event(run_id, "e1", {}) is False  # its ledger is back
