"""The terminal-state log scan split into parts: same verdicts as one sequential pass, bounded parts."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.parsing.attempt_logs import AttemptScan, scan_attempt
from rlcleanup.parsing.log_scanner import LogScan
from rlcleanup.ports.storage import ObjectInfo
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.steps import logscan
from rlcleanup.steps.first_cause import find_first_error
from rlcleanup.steps.layout import AttemptFiles, RunLayout, discover
from rlcleanup.steps.terminal import establish_terminal_state, step_budget

TB = ["Traceback (most recent call last):", '  File "/app/x.py", line 3, in f', "    g()"]


def _objects(*paths: Path) -> list[ObjectInfo]:
    return [ObjectInfo(uri=str(path), size=path.stat().st_size) for path in paths]


def _layout(run_uri: str, attempts: list[AttemptFiles]) -> RunLayout:
    return RunLayout(
        run_uri=run_uri,
        kind="A",
        config_uri="c",
        config_bytes=b"",
        config={},
        skyrl={},
        temp_root=None,
        checkpoints_root="ck",
        exports_root="ex",
        attempts=attempts,
    )


def _scan_split(storage: LocalStorage, layout: RunLayout, dest: Path, **limits: int) -> list[AttemptScan]:
    parts = logscan.plan_log_scan(storage, layout, **limits)
    queue = logscan.first_parts(parts)  # what the plan publishes; a cut file's next segment comes from the last
    while queue:
        part = queue.pop(0)
        _, _, after = logscan.scan_part(storage, str(dest), part)
        if after is not None:
            assert after.part_id == parts[parts.index(next(p for p in parts if p.part_id == part.part_id)) + 1].part_id
            queue.insert(0, after)
    return logscan.assemble(storage, str(dest), [(p.part_id, p.attempt_id) for p in parts])


def _comparable(scans: list[AttemptScan]) -> list[dict[str, object]]:
    return [dataclasses.asdict(s) for s in scans]


@pytest.mark.parametrize("scenario", ["failed-first-link", "completed-resumed", "completed-budget-plus-one"])
def test_one_file_per_part_gives_the_sequential_scan_and_verdict(tmp_path: Path, scenario: str) -> None:
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(write_sample_run(tmp_path / "runs", scenario)))
    sequential = [scan_attempt(storage, a) for a in layout.attempts]
    split = _scan_split(storage, layout, tmp_path / "dest", max_files=1)
    assert sum(len(a.log_uris) for a in split) > len(layout.attempts)  # really split
    assert _comparable(split) == _comparable(sequential)
    budget, how = step_budget(layout.skyrl)
    one = establish_terminal_state(layout, sequential, budget, budget_reason=how)
    many = establish_terminal_state(layout, split, budget, budget_reason=how)
    assert (many.terminal_state, many.first_failure_cause, many.reasoning) == (
        one.terminal_state,
        one.first_failure_cause,
        one.reasoning,
    )


@pytest.mark.parametrize("scenario", ["failed-first-link", "completed-resumed"])
def test_files_cut_into_segments_give_the_sequential_scan_and_verdict(tmp_path: Path, scenario: str) -> None:
    """Every log over 1,500 bytes cut into segments of at most that (the real budget is 256 MiB): each segment is its
    own part, published by the one before with its scanner state; the assembled scans and verdict are unchanged."""
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(write_sample_run(tmp_path / "runs", scenario)))
    sequential = [scan_attempt(storage, a) for a in layout.attempts]
    parts = logscan.plan_log_scan(storage, layout, max_bytes=1500)
    cut = [p for p in parts if p.segment is not None]
    assert cut and max(p.segment.count for p in cut if p.segment) >= 3  # really cut, several times
    assert all(p.bytes <= 1500 for p in cut)
    split = _scan_split(storage, layout, tmp_path / "dest", max_bytes=1500)
    assert _comparable(split) == _comparable(sequential)
    budget, how = step_budget(layout.skyrl)
    one = establish_terminal_state(layout, sequential, budget, budget_reason=how)
    many = establish_terminal_state(layout, split, budget, budget_reason=how)
    assert (many.terminal_state, many.first_failure_cause) == (one.terminal_state, one.first_failure_cause)


def test_after_error_noise_is_carried_across_separately_scanned_files(tmp_path: Path) -> None:
    """A connection reset is noise only after another error in the attempt; files are scanned alone."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "finelog.log").write_text("\n".join([*TB, "torch.OutOfMemoryError: CUDA out of memory"]) + "\n")
    (logs / "worker-b.err").write_text("\n".join([*TB, "ConnectionResetError: Connection reset by peer"]) + "\n")
    attempt = AttemptFiles(attempt_id="a1", log_objects=_objects(logs / "worker-b.err", logs / "finelog.log"))
    storage = LocalStorage(checksums=False)
    whole = scan_attempt(storage, attempt)
    assert [(e.error_type, e.causal, e.noise) for e in whole.errors] == [
        ("torch.OutOfMemoryError", True, None),
        ("ConnectionResetError", False, "connection_reset"),
    ]
    alone = scan_attempt(storage, AttemptFiles(attempt_id="a1", log_objects=_objects(logs / "worker-b.err")))
    assert [(e.error_type, e.causal) for e in alone.errors] == [("ConnectionResetError", True)]  # nothing before it
    first = find_first_error([whole])
    assert first is not None and first.candidate.error_type == "torch.OutOfMemoryError"


def test_parts_are_cut_at_file_boundaries_by_bytes_and_count_in_chain_order(tmp_path: Path) -> None:
    def attempt(attempt_id: str, sizes: list[int]) -> AttemptFiles:
        objects = [ObjectInfo(uri=f"r/{attempt_id}/worker-{i:02d}.err", size=s) for i, s in enumerate(sizes)]
        return AttemptFiles(attempt_id=attempt_id, log_objects=objects)

    layout = _layout("r", [attempt("x", [60, 60, 60, 500, 10]), attempt("empty", []), attempt("y", [1] * 5)])
    parts = logscan.plan_log_scan(LocalStorage(checksums=False), layout, max_bytes=128, max_files=3)
    assert [(p.part_id, p.attempt_id, p.bytes, len(p.uris)) for p in parts] == [
        ("a000-p0000", "x", 120, 2),
        ("a000-p0001", "x", 60, 1),
        ("a000-p0002", "x", 125, 1),  # bigger than the budget: cut into 4 segments, a part each
        ("a000-p0003", "x", 125, 1),
        ("a000-p0004", "x", 125, 1),
        ("a000-p0005", "x", 125, 1),
        ("a000-p0006", "x", 10, 1),  # a segment part holds its segment only
        ("a001-p0000", "empty", 0, 0),  # keeps the attempt in the chain
        ("a002-p0000", "y", 3, 3),
        ("a002-p0001", "y", 2, 2),
    ]
    assert [u for p in parts for u in dict.fromkeys(p.uris)] == [
        o.uri for a in layout.attempts for o in a.log_objects for _ in range(4 if o.uri == "r/x/worker-03.err" else 1)
    ]
    assert [(s.index, s.start, s.stop) for p in parts if (s := p.segment)] == [
        (0, 0, 125),
        (1, 125, 250),
        (2, 250, 375),
        (3, 375, 500),
    ]
    assert [p.part_id for p in logscan.first_parts(parts)][2:4] == ["a000-p0002", "a000-p0006"]
    assert sorted(p.part_id for p in parts) == [p.part_id for p in parts]


def test_stored_scans_round_trip_nan_metrics_and_timestamps(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "finelog.log").write_text(
        '2026-11-30T10:00:00Z WANDB_MIRROR kind=train step=3 metrics={"loss": NaN, "trainer/global_step": 3}\n'
    )
    layout = _layout(str(tmp_path), [AttemptFiles(attempt_id="a", log_objects=_objects(logs / "finelog.log"))])
    storage = LocalStorage(checksums=False)
    (split,) = _scan_split(storage, layout, tmp_path / "dest")
    (whole,) = [scan_attempt(storage, a) for a in layout.attempts]
    (row,) = split.metric_rows
    assert math.isnan(row.metrics["loss"]) and row.step == 3
    assert split.files[0].first_timestamp == whole.files[0].first_timestamp is not None


def test_a_replayed_part_rewrites_nothing(tmp_path: Path) -> None:
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(write_sample_run(tmp_path / "runs", "failed-first-link")))
    part = logscan.plan_log_scan(storage, layout)[0]
    uri, _, _ = logscan.scan_part(storage, str(tmp_path / "dest"), part)
    before = Path(uri).stat().st_mtime_ns
    assert logscan.scan_part(storage, str(tmp_path / "dest"), part)[0] == uri
    assert Path(uri).stat().st_mtime_ns == before


def test_the_embedded_store_refuses_what_firestore_would(tmp_path: Path) -> None:
    """The log-scan plan once stored (part, attempt) pairs: Firestore said `Cannot convert an array value in an
    array value`; SQLite took it. The embedded store now applies Firestore's value rules too."""
    from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords

    claims, store = SqliteIdempotencyStore(tmp_path / "r.db"), SqliteRunRecords(tmp_path / "r.db")
    with pytest.raises(ValueError, match="nested arrays"):
        claims.complete("run", "terminal-plan", {"parts": [["a000-p0000", "x"]]})
    with pytest.raises(ValueError, match="map key"):
        store.put_doc("c", "d", {"a": {"": 1}})
    claims.complete("run", "terminal-plan", {"parts": [{"part_id": "a000-p0000", "attempt_id": "x"}]})


def test_hundreds_of_rank_logs_stay_out_of_the_record_document(tmp_path: Path) -> None:
    """500 ranks x 3 attempts: the record keeps 20 log URIs and the count per attempt (the manifest lists all);
    the full lists made the settled record 1.08 MB in `bench/bench_big_run.py --full` (Firestore's limit is 1 MiB)."""
    from rlcleanup.models.record import ChainSummary, CompletionRecord

    attempts = [AttemptFiles(attempt_id=f"att-{a}", log_prefix=f"gs://b/run/logs/{a}") for a in range(3)]
    layout = _layout("gs://b/run", attempts)
    scans = [  # what the log scan listed: the record names the logs from the scan (discovery lists none)
        AttemptScan(
            attempt_id=a.attempt_id,
            files=[
                LogScan(uri=f"{a.log_prefix}/ray_session_logs/worker-{r:04d}-{k}.{ext}", attempt_id=a.attempt_id)
                for r in range(500)
                for k, ext in ((0, "out"), (1, "err"))
            ],
        )
        for a in attempts
    ]
    verdict = establish_terminal_state(layout, scans, 10, budget_reason="t")
    assert [(len(a.log_uris), a.log_count) for a in verdict.attempts] == [(20, 1000)] * 3
    record = CompletionRecord(run_id="r", run_uri="gs://b/run", chain=ChainSummary(attempts=verdict.attempts))
    assert len(record.model_dump_json()) < 20_000


def test_cut_logs_on_the_embedded_stack_give_the_same_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole pipeline (publish guard on: scan-log-part may publish the next segment because topology.yaml says
    so) with every log over 1,500 bytes cut: the record settles exactly as with whole files."""
    from rlcleanup.runtime import evidence
    from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
    from rlcleanup.runtime.handlers import resolve_run_id

    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
    run_root = write_sample_run(tmp_path / "sample", "failed-first-link")

    def record(name: str) -> dict[str, object]:
        stack = EmbeddedStack.create(tmp_path / f"{name}.db", str(tmp_path / f"preserved-{name}"))
        event = manual_event(str(run_root))
        stack.emit(event)
        run_id = resolve_run_id(stack.ports, event)
        plan = stack.ports.claims.result(run_id, "terminal-plan") or {}
        assert len(stack.ports.claims.results(run_id, "log-scan:")) == len(plan["parts"])  # every segment ran
        found = stack.ports.records.get(run_id)
        assert found is not None
        fields = found.model_dump(mode="json", exclude={"created_at", "updated_at", "manifest_uri"})
        fields["parts"] = len(plan["parts"])
        # The storage ledger counts the preserved location, which holds one working file per log segment
        # (_parts/log-scan/): cut logs hold more of them by design. Every other field settles the same.
        for storage_field in ("storage_ledger", "storage_bytes", "storage_monthly_usd"):
            fields.pop(storage_field)
        return fields

    whole = record("whole")
    page = logscan.plan_log_scan_page
    monkeypatch.setattr(logscan, "plan_log_scan_page", lambda *args: page(*args, max_bytes=1500))
    cut = record("cut")
    assert int(cut.pop("parts")) > int(whole.pop("parts"))  # really cut
    assert whole["first_failure_cause"] and whole["terminal_state"]  # a verdict to keep
    assert json.dumps(cut, sort_keys=True, default=str).replace("preserved-cut", "preserved-whole") == json.dumps(
        whole, sort_keys=True, default=str
    )
