"""One suite for the two records ports (run records, idempotency store), run against SQLite and against Firestore
(the emulator); plus the 1 MiB guard."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.firestore_client import MAX_DOC_BYTES, approx_size
from rlcleanup.adapters.firestore_records import MAX_INLINE_ERRORS, FirestoreRunRecords, firestore_stores
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.models.record import CompletionRecord, RunError
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.records import Claim, IdempotencyStore, RunRecords
from rlcleanup.settings import DeploymentSettings
from rlcleanup.stack import StackState

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "firestore"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RunRecords, IdempotencyStore]]:
    if request.param == "sqlite":
        yield SqliteRunRecords(tmp_path / "records.db"), SqliteIdempotencyStore(tmp_path / "records.db")
    else:
        stack = request.getfixturevalue("stack")
        yield firestore_stores(project=stack.project)


@pytest.fixture
def store(stores: tuple[RunRecords, IdempotencyStore]) -> RunRecords:
    return stores[0]


@pytest.fixture
def claims(stores: tuple[RunRecords, IdempotencyStore]) -> IdempotencyStore:
    return stores[1]


def _record(run_id: str) -> CompletionRecord:
    return CompletionRecord(run_id=run_id, run_uri=f"gs://runs/{run_id}")


def test_create_get_update_merges(store: RunRecords, uid: str) -> None:
    run_id = f"rec-{uid}"
    assert store.get(run_id) is None
    assert store.create_if_absent(_record(run_id)) is True
    assert store.create_if_absent(_record(run_id)) is False
    store.update(run_id, {"terminal_state": "completed", "step_budget": 20})
    store.update(run_id, {"status": "awaiting_authority", "manifest_uri": "gs://p/m.json"})
    got = store.get(run_id)
    assert got is not None
    assert (got.terminal_state, got.step_budget) == ("completed", 20)  # the first update survived the second
    assert got.status is RecordStatus.awaiting_authority and got.manifest_uri == "gs://p/m.json"
    assert got.updated_at >= got.created_at
    with pytest.raises(KeyError):
        store.update(f"absent-{uid}", {"step_budget": 1})
    with pytest.raises(ValueError):  # never store what the model would reject
        store.update(run_id, {"status": "not-a-status"})


def test_add_errors_dedupes_and_keeps_all(store: RunRecords, uid: str) -> None:
    run_id = f"err-{uid}"
    store.create_if_absent(_record(run_id))
    e1, e2, e3 = (RunError(step="capture", code=f"c{i}", message=f"m{i}") for i in range(3))
    store.add_errors(run_id, [e1, e2])
    store.add_errors(run_id, [e1, e3])  # e1 replayed: recorded once
    got = store.get(run_id)
    assert got is not None and sorted(e.code for e in got.errors) == ["c0", "c1", "c2"]
    many = [RunError(step="validate", code="bad", message=f"candidate {i}") for i in range(MAX_INLINE_ERRORS + 5)]
    store.add_errors(run_id, many)
    got = store.get(run_id)
    assert got is not None and len(got.errors) == 3 + len(many)  # beyond the inline ones too
    with pytest.raises(KeyError):
        store.add_errors(f"absent-{uid}", [e1])


def test_claims(claims: IdempotencyStore, uid: str) -> None:
    run_id = f"claim-{uid}"
    now = datetime.now(UTC)
    assert claims.claim(run_id, "classify", 60, now) is Claim.acquired
    assert claims.claim(run_id, "classify", 60, now) is Claim.busy
    assert claims.result(run_id, "classify") is None
    claims.complete(run_id, "classify", {"kind": "standard"})
    assert claims.claim(run_id, "classify", 60, now) is Claim.done
    assert claims.result(run_id, "classify") == {"kind": "standard"}

    # a crashed holder: its lease runs out and the next delivery takes over
    assert claims.claim(run_id, "capture-part:a-0", 1, now) is Claim.acquired
    assert claims.claim(run_id, "capture-part:a-0", 1, now + timedelta(seconds=0.5)) is Claim.busy
    assert claims.claim(run_id, "capture-part:a-0", 60, now + timedelta(seconds=2)) is Claim.acquired
    assert claims.claim(run_id, "capture-part:a-0", 60, now + timedelta(seconds=3)) is Claim.busy

    # release on failure: a redelivery runs the step again; releasing a finished step changes nothing
    claims.release(run_id, "capture-part:a-0")
    assert claims.claim(run_id, "capture-part:a-0", 60, now) is Claim.acquired
    claims.complete(run_id, "capture-part:a-0", {"objects": 3})
    claims.release(run_id, "capture-part:a-0")
    assert claims.claim(run_id, "capture-part:a-0", 60, now) is Claim.done

    claims.claim(run_id, "capture-part:b-0", 60, now)  # running, not done: not a result
    claims.complete(run_id, "capture-part/c-0", {"objects": 1})  # a key with a slash
    assert claims.results(run_id, "capture-part") == {
        "capture-part:a-0": {"objects": 3},
        "capture-part/c-0": {"objects": 1},
    }
    assert claims.results(run_id, "validate:") == {}
    # The fan-ins' gate counts the same claims server side (the running one is not done; another prefix is apart)
    claims.complete(run_id, "capture-partx", {"objects": 2})
    assert claims.done_count(run_id, "capture-part:") == 1
    assert claims.done_count(run_id, "capture-part") == 3
    assert claims.done_count(run_id, "validate:") == 0
    assert claims.done_count(run_id, "") == len(claims.results(run_id, ""))


def test_concurrent_claims_have_one_winner(claims: IdempotencyStore, uid: str) -> None:
    run_id = f"race-{uid}"
    now = datetime.now(UTC)
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(lambda _: claims.claim(run_id, "fanin:capture", 60, now), range(8)))
    assert outcomes.count(Claim.acquired) == 1 and outcomes.count(Claim.busy) == 7


def test_a_lease_held_by_the_same_delivery_is_taken_over_another_waits(claims: IdempotencyStore, uid: str) -> None:
    run_id = f"owner-{uid}"
    now = datetime.now(UTC)
    assert claims.claim(run_id, "capture-part:a-0", 540, now, owner="msg-1") is Claim.acquired
    # msg-1's attempt died without releasing (e.g. the store was unreachable): another message still waits ...
    assert claims.claim(run_id, "capture-part:a-0", 540, now, owner="msg-2") is Claim.busy
    assert claims.claim(run_id, "capture-part:a-0", 540, now) is Claim.busy  # no owner: never "the same"
    # ... while msg-1's own redelivery takes its lease over at once instead of waiting 540 s
    assert claims.claim(run_id, "capture-part:a-0", 540, now, owner="msg-1") is Claim.acquired
    claims.complete(run_id, "capture-part:a-0", {"objects": 2})
    assert claims.claim(run_id, "capture-part:a-0", 540, now, owner="msg-1") is Claim.done
    assert claims.result(run_id, "capture-part:a-0") == {"objects": 2}


def test_complete_without_a_claim_and_twice_keeps_the_last_result(claims: IdempotencyStore, uid: str) -> None:
    run_id = f"done-{uid}"
    claims.complete(run_id, "validate:resume", {"ok": False})  # a failed member completed by dispatch
    claims.complete(run_id, "validate:resume", {"ok": True})
    assert claims.result(run_id, "validate:resume") == {"ok": True}
    assert claims.claim(run_id, "validate:resume", 60, datetime.now(UTC)) is Claim.done
    with pytest.raises(ValueError):  # Firestore's value rules hold for SQLite too
        claims.complete(run_id, "validate:x", {"gaps": [[1, 2]]})


def test_event_ledger_dedupes(store: RunRecords, uid: str) -> None:
    run_id = f"ev-{uid}"
    assert store.record_event(run_id, "e1", {"state": "SUCCEEDED", "outcome": "terminal"}) is True
    assert store.record_event(run_id, "e1", {"state": "SUCCEEDED", "outcome": "terminal"}) is False
    assert store.record_event(run_id, "e2", {"state": "RUNNING", "outcome": "ignored"}) is True


def test_the_console_page_is_the_stores_own(stores: tuple[RunRecords, IdempotencyStore], uid: str) -> None:
    """Every store answers the port's console_url: the emulator's Firestore names its run document's page in its
    project, a SQLite file has none (tests/unit/test_records_console.py has the quoting)."""
    store, _ = stores
    url = store.console_url(f"con-{uid}")
    if isinstance(store, FirestoreRunRecords):
        assert url == (
            "https://console.cloud.google.com/firestore/databases/-default-/data/panel/runs/"
            f"con-{uid}?project={store.project}"
        )
    else:
        assert url is None


def test_aux_docs(store: RunRecords, uid: str) -> None:
    coll = f"grants_{uid}"
    assert store.put_doc(coll, "g-1", {"kind": "publish", "n": 1}) is True
    assert store.put_doc(coll, "g-1", {"kind": "publish", "n": 2}, only_if_absent=True) is False
    assert store.get_doc(coll, "g-1") == {"kind": "publish", "n": 1}
    assert store.put_doc(coll, "g-1", {"kind": "publish", "n": 3}) is True  # plain put overwrites
    store.put_doc(coll, "g-2", {"kind": "reclaim"})
    store.put_doc(coll, "h-1", {"kind": "cancel"})
    assert store.get_doc(coll, "nope") is None
    assert [d for d, _ in store.list_docs(coll, "g-")] == ["g-1", "g-2"]
    assert [d for d, _ in store.list_docs(coll)] == ["g-1", "g-2", "h-1"]


def test_list_runs(store: RunRecords, uid: str) -> None:
    store.create_if_absent(_record(f"list-{uid}"))
    assert any(r.run_id == f"list-{uid}" for r in store.list_runs(limit=1000))


# ------------------------------------------------------------------------------------------------ 1 MiB guard

N_OBJECTS = 5_000
N_WEIGHTS = 4_000  # per-rank checkpoint shards: listed (derived/*-listing.jsonl in GCS), never copied
N_EVIDENCE = N_OBJECTS - N_WEIGHTS  # small evidence files: copied, each one a manifest entry (in GCS)


def _doc_bytes(name: str, data: dict[str, object]) -> int:
    """Firestore's document size: name bytes + 16, plus the fields (strings bytes+1, maps keys+values, ...)."""
    return len(name.encode()) + 1 + 16 + approx_size(data)


def test_capture_of_5000_objects_keeps_every_document_small(stack, gcs_client, firestore_client, uid, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The whole pipeline on Firestore + GCS for a run of 5,000 more objects than the sample: 4,000 rank shards
    over the four checkpoints and 1,000 evidence files. Listings and manifest go to GCS; documents stay small.
    (Own buckets: fake-gcs-server's memory backend slows down linearly with the objects already in a bucket.)"""
    from rlcleanup.adapters.inprocess_bus import InProcessBus
    from rlcleanup.adapters.storage_router import RoutingStorage
    from rlcleanup.cli.upload import upload_sample_run
    from rlcleanup.runtime.handlers import dispatch
    from rlcleanup.runtime.ports import Ports
    from rlcleanup.runtime.topology import load_topology
    from rlcleanup.samples.generator import write_sample_run
    from rlcleanup.stack.emit import job_event

    runs_bucket, preserve_bucket = (
        gcs_client.create_bucket(f"big-runs-{uid}"),
        gcs_client.create_bucket(f"big-pres-{uid}"),
    )
    write_sample_run(tmp_path, "completed-resumed")
    name = f"big-{uid}"
    run_uri = upload_sample_run(gcs_client, tmp_path, runs_bucket.name, "r", rename=name)
    ckpts = f"r/tmp/ttl=14d/skyrl/{name}/2026.11.30/checkpoints"
    keys = [f"{ckpts}/global_step_{5 * (1 + i % 4)}/model_world_size_1000_rank_{i // 4}.pt" for i in range(N_WEIGHTS)]
    keys += [f"{ckpts}/global_step_20/dataloader/state_{i:05d}.json" for i in range(N_EVIDENCE)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda key: runs_bucket.blob(key).upload_from_string(b"{}"), keys))

    records, claims = firestore_stores(project=stack.project)
    bus = InProcessBus()
    ports = Ports(
        storage=RoutingStorage(),
        records=records,
        claims=claims,
        bus=bus,
        settings=DeploymentSettings.model_construct(preserve_root=f"gs://{preserve_bucket.name}"),
    )
    for fn in load_topology().functions:  # every function has its stage table row
        bus.subscribe(
            fn.trigger,
            lambda data, attrs, _mid, fn=fn: dispatch(ports, fn.entry_point, fn.dead_letter_topic, data, attrs),
        )
    bus.publish("job-events", job_event(run_uri, "SUCCEEDED").model_dump_json().encode())
    t1 = time.monotonic()
    bus.drain()
    print(
        f"\nuploaded {N_OBJECTS} objects in {t1 - t0:.1f} s; pipeline (capture included) {time.monotonic() - t1:.1f} s"
    )

    run_id = f"{name}-2026.11.30"
    record = records.get(run_id)
    assert record is not None and record.status is RecordStatus.awaiting_authority, record and record.errors
    manifest = json.loads(records_manifest(gcs_client, record.manifest_uri))
    assert manifest["captured_object_count"] == record.preserved_object_count > N_EVIDENCE
    assert sum(1 for o in manifest["objects"] if "/dataloader/state_" in o["destination"]) == N_EVIDENCE
    listing = records_manifest(
        gcs_client, record.manifest_uri.replace("manifest.json", "derived/checkpoints-listing.jsonl")
    )
    assert sum(1 for line in listing.splitlines() if b"_rank_" in line) >= N_WEIGHTS
    assert sum(1 for line in listing.splitlines()) > N_OBJECTS  # every checkpoint object, weights and evidence

    run_ref = firestore_client.collection("runs").document(run_id)
    run_size = _doc_bytes(run_ref.path, run_ref.get().to_dict())
    sub_sizes = {
        f"{coll}/{snap.id}": _doc_bytes(f"{run_ref.path}/{coll}/{snap.id}", snap.to_dict())
        for coll in ("steps", "candidates", "attempts", "events", "errors")
        for snap in run_ref.collection(coll).stream()
    }
    print(f"run document ~{run_size} bytes; largest subcollection doc {max(sub_sizes.items(), key=lambda kv: kv[1])}")
    assert run_size < MAX_DOC_BYTES // 20  # far below 1 MiB: < 52 KB
    assert max(sub_sizes.values()) < MAX_DOC_BYTES // 20


def records_manifest(gcs_client, uri: str) -> bytes:  # type: ignore[no-untyped-def]
    bucket, _, key = uri.removeprefix("gs://").partition("/")
    data: bytes = gcs_client.bucket(bucket).blob(key).download_as_bytes()
    return data


def test_firestore_documents_are_counted(stack, uid: str) -> None:  # type: ignore[no-untyped-def]
    """The cost model's counter (ports/usage.py) counts billed documents: writes and deletes per document in a
    commit, a read per document returned (a missing one looked up, and an empty query, are one read each)."""
    from rlcleanup.ports import usage

    records, _ = firestore_stores(project=stack.project)
    coll = f"usage_{uid}"

    def delta(action) -> dict[str, int]:  # type: ignore[no-untyped-def]
        before = usage.totals()
        action()
        return {k: v - before[k] for k, v in usage.totals().items() if v != before[k]}

    assert delta(lambda: records.put_doc(coll, "a", {"n": 1})) == {usage.FIRESTORE_WRITES: 1}
    assert delta(lambda: records.put_doc(coll, "b", {"n": 2})) == {usage.FIRESTORE_WRITES: 1}
    assert delta(lambda: records.get_doc(coll, "a")) == {usage.FIRESTORE_READS: 1}
    assert delta(lambda: records.get_doc(coll, "nope")) == {usage.FIRESTORE_READS: 1}
    assert delta(lambda: records.list_docs(coll)) == {usage.FIRESTORE_READS: 2}
    assert delta(lambda: records.list_docs(f"empty_{uid}")) == {usage.FIRESTORE_READS: 1}
    assert delta(lambda: records.db.collection(coll).document("b").delete()) == {usage.FIRESTORE_DELETES: 1}


def test_add_errors_writes_the_run_document_once_per_call(
    stack: StackState, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture part that lost 200 objects records 200 errors: one commit, one write of the run document (every
    part of a run writes that document; one write per error made it the hottest document of a big run). A replay
    of some of them adds only the new ones, counted once."""
    from google.cloud.firestore_v1.base_batch import BaseWriteBatch

    store, _ = firestore_stores(project=stack.project)
    run_id = f"hot-{uid}"
    store.create_if_absent(_record(run_id))
    writes: list[str] = []
    update = BaseWriteBatch.update

    def counted(self: BaseWriteBatch, reference: Any, *args: Any, **kwargs: Any) -> Any:
        writes.append(reference.path)
        return update(self, reference, *args, **kwargs)

    monkeypatch.setattr(BaseWriteBatch, "update", counted)
    lost = [RunError(step="capture", code="source_vanished", message=f"gs://b/run/logs/{i}.log") for i in range(200)]
    store.add_errors(run_id, lost)
    assert writes.count(f"runs/{run_id}") == 1
    store.add_errors(run_id, [*lost[:10], RunError(step="capture", code="other", message="new")])
    assert writes.count(f"runs/{run_id}") == 2
    got = store.get(run_id)
    assert got is not None and len(got.errors) == 201
    assert sorted({e.code for e in got.errors}) == ["other", "source_vanished"]
