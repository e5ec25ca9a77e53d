"""Learning across runs on a history of records (samples/history.py): the same CUDA OOM across ranks, hosts and
dates matches; a near miss (the same error in another frame) and another failure do not; the experiment that
later completed shows what its first completed run changed; a run that failed after this one is listed as after it,
and runs that failed in the same second list each other, agreeing which came first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.authority.config_screen import screen_config
from rlcleanup.formats.config_diff import diff_flat, flatten_config
from rlcleanup.models.failures import ConfigChange, FailureClass, SimilarRun
from rlcleanup.ports.records import RunRecords
from rlcleanup.samples.history import _TRAINER_FRAMES, BUCKET, SampleHistory, oom_cause, record_of, write_history
from rlcleanup.steps.history import fix_sentence, history_lines, record_history, similar_runs

FIX = (
    "before: run math-rl-qwen-v1 failed the same way; the next run that completed (math-rl-qwen-v2) changed "
    "`trainer.micro_train_batch_size_per_gpu` 8 → 4"
)
NOTHING = "before: run grpo-llama-v1 failed the same way; no later run of its experiment has completed: nothing known about a fix"


def check_history(records: RunRecords, history: SampleHistory) -> None:
    """The checks both stores must pass (tests/integration/test_record_stores.py runs them on Firestore)."""
    current = records.get(history.current)
    assert current is not None and current.signature is not None
    found = similar_runs(records, current)
    # Newest first, before and after this run: the run that failed the same way later is listed, as after.
    assert [(s.run_id, s.came) for s in found] == [
        (history.later_same, "after"),
        *((run_id, "before") for run_id in history.oom_earlier),
    ]
    later, llama, qwen = found
    assert later.fix is None and fix_sentence(later).startswith(f"after: run {history.later_same} failed the same way")
    assert llama.fix is None and fix_sentence(llama) == NOTHING
    assert qwen.fix is not None and qwen.fix.completed_run_id == history.fixed_by  # the first completed, not v3
    assert qwen.fix.changes == [ConfigChange(key="trainer.micro_train_batch_size_per_gpu", before="8", after="4")]
    assert fix_sentence(qwen) == FIX
    assert all(s.failure_class is FailureClass.training for s in found)
    assert history_lines(current, found)[3] == (
        f"other runs with this signature: 3 (2 before this run, 1 after; run {history.oom_earlier[-1]} came first)"
    )
    for run_id in (history.near_miss, history.other_failure):
        other = records.get(run_id)
        assert other is not None and other.signature not in (None, current.signature)
    # Seen from the near miss: it has no earlier twin, and says so.
    near = records.get(history.near_miss)
    assert near is not None and similar_runs(records, near) == []
    assert history_lines(near)[-1] == "other runs with this signature: none; nothing known"


@pytest.fixture
def store(tmp_path: Path) -> SqliteRunRecords:
    return SqliteRunRecords(tmp_path / "records.db")


def test_history_matches_and_fix_on_sqlite(store: SqliteRunRecords) -> None:
    check_history(store, write_history(store))


def test_the_same_failure_across_ranks_hosts_and_dates_has_one_signature(store: SqliteRunRecords) -> None:
    history = write_history(store)
    runs = [store.get(r) for r in (history.current, *history.oom_earlier, history.later_same)]
    assert len({r.signature for r in runs if r}) == 1
    hosts = {(r.failure_evidence.rank, r.failure_evidence.host) for r in runs if r and r.failure_evidence}
    assert hosts == {(5, "gke-h100-f"), (0, "nid004012"), (3, "gke-h100-d"), (6, "gke-h100-g")}


def test_wrapup_step_stores_the_history_on_the_record(store: SqliteRunRecords) -> None:
    history = write_history(store)
    fields = record_history(store, history.current, {"trainer": {"micro_train_batch_size_per_gpu": 8}}, screen_config)
    store.update(history.current, fields)
    record = store.get(history.current)
    assert record is not None
    assert [s.run_id for s in record.similar_runs] == [history.later_same, *history.oom_earlier]
    assert history_lines(record)[-2:] == [NOTHING, FIX]


def test_a_fix_whose_configuration_was_not_kept_says_so(store: SqliteRunRecords) -> None:
    history = write_history(store)
    store.put_doc("run_configs", history.fixed_by, {"run_id": history.fixed_by, "no": "keys"})
    current = store.get(history.current)
    assert current is not None
    qwen = similar_runs(store, current)[2]
    assert fix_sentence(qwen) == (
        "before: run math-rl-qwen-v1 failed the same way; the next run that completed (math-rl-qwen-v2) has no kept "
        "configuration to compare"
    )


def test_a_run_without_a_signature_matches_nothing(store: SqliteRunRecords) -> None:
    history = write_history(store)
    fixed = store.get(history.fixed_by)
    assert fixed is not None and fixed.signature is None and similar_runs(store, fixed) == []
    assert history_lines(fixed) == ["the run did not fail: no failure class, no signature"]


def test_the_lookup_uses_the_sqlite_index(store: SqliteRunRecords) -> None:
    """The query plan searches the expression index (records_by_signature), never scans the table."""
    plan = (
        store._conn()
        .execute(
            "EXPLAIN QUERY PLAN SELECT doc FROM records WHERE json_extract(doc, '$.signature') = ? AND "
            "json_extract(doc, '$.ended_at') < ? ORDER BY json_extract(doc, '$.ended_at') DESC LIMIT 21",
            ("sig1:x", "2026-12-01"),
        )
        .fetchall()
    )
    detail = " ".join(str(row[-1]) for row in plan)
    assert "USING INDEX records_by_signature" in detail and "SCAN records" not in detail


def test_an_unindexed_field_is_refused(store: SqliteRunRecords) -> None:
    with pytest.raises(ValueError, match="not indexed by 'status'"):
        store.runs_where("status", "failed")  # type: ignore[arg-type]


def test_the_config_diff_is_by_key_and_resolves_interpolations() -> None:
    before = {"trainer": {"micro_train_batch_size_per_gpu": 8, "fwd": "${trainer.micro_train_batch_size_per_gpu}"}}
    after = {"trainer": {"fwd": "${trainer.micro_train_batch_size_per_gpu}", "micro_train_batch_size_per_gpu": 4}}
    assert diff_flat(flatten_config(before), flatten_config(after)) == [
        ("trainer.fwd", "8", "4"),
        ("trainer.micro_train_batch_size_per_gpu", "8", "4"),
    ]
    assert diff_flat(flatten_config({"a": {"b": [1, 2]}}), flatten_config({"a": {"b": [1, 2], "c": None}})) == [
        ("a.c", None, "null")
    ]


def test_similar_run_model_round_trips() -> None:
    run = SimilarRun(run_id="r", failure_class=FailureClass.infrastructure)
    assert SimilarRun.model_validate_json(run.model_dump_json()) == run


def test_forget_removes_the_kept_configuration(tmp_path: Path) -> None:
    from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore
    from rlcleanup.cli import maintenance
    from rlcleanup.runtime.backends import OpenStore, StoreBackend

    db = tmp_path / "records.db"
    store = SqliteRunRecords(db)
    history = write_history(store)
    opened = OpenStore(store, SqliteIdempotencyStore(db), "SQLite", StoreBackend.sqlite, db)
    maintenance.forget(opened, history.current)
    assert store.get(history.current) is None and store.get_doc("run_configs", history.current) is None
    assert store.get_doc("run_configs", history.fixed_by) is not None


def test_runs_that_failed_in_the_same_second_list_each_other(store: SqliteRunRecords) -> None:
    """Issue 44 item 7: two runs of one sweep died of the same OOM in the same second. Each lists the other; both
    agree which came first (a tie is ordered by run id, docs/failures.md); a third that ended half a second later
    in that second is after both. `similar_runs` used to ask only for runs that ended strictly earlier, so the
    tie listed nothing."""
    at = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    runs = {}
    for version, ended in (("v1", at), ("v2", at), ("v3", at + timedelta(milliseconds=500))):
        run_uri = f"{BUCKET}/sweep-{version}/{version}"
        cause = oom_cause(run_uri, 3, "gke-h100-d", "1.00", _TRAINER_FRAMES)
        record = record_of(f"sweep-{version}", version, ended, cause)
        store.create_if_absent(record)
        runs[version] = record
    assert len({r.signature for r in runs.values()}) == 1
    seen = {v: [(s.run_id, s.came, s.same_second, s.tied) for s in similar_runs(store, r)] for v, r in runs.items()}
    v1, v2, v3 = (runs[v].run_id for v in ("v1", "v2", "v3"))
    assert seen == {
        "v1": [(v3, "after", True, False), (v2, "after", True, True)],
        "v2": [(v3, "after", True, False), (v1, "before", True, True)],
        "v3": [(v2, "before", True, False), (v1, "before", True, False)],
    }
    lines = history_lines(runs["v2"], similar_runs(store, runs["v2"]))
    assert lines[-3:] == [
        f"other runs with this signature: 2 (1 before this run, 1 after; run {v1} came first)",
        f"after, in the same second: run {v3} failed the same way; no later run of its "
        "experiment has completed: nothing known about a fix",
        f"before, at the same instant (a tie is ordered by run id): run {v1} failed the same way; no later run of its "
        "experiment has completed: nothing known about a fix",
    ]
    first = history_lines(runs["v1"], similar_runs(store, runs["v1"]))
    assert "(0 before this run, 2 after; this run came first)" in first[-3]
