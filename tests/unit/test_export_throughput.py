"""Issue 49 item 1: the export preflight estimates with "its bytes over the measured throughput of earlier exports
of that model size, else a stated default" (authority/export_throughput.py). Earlier exports are export jobs whose
end is recorded on their run's record, read from a real SQLite records store through its port; both branches, and
what is never measured (a failed job, a job without an end, another size class), and the refusal and the preview
say which throughput was used with its numbers."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.authority import export
from rlcleanup.authority.export_throughput import for_record, job_throughput, size_class
from rlcleanup.authority.grants import Action, Grant, Refusal
from rlcleanup.authority.outcome import Outcome
from rlcleanup.models.export_jobs import ExportJob
from rlcleanup.models.record import AuthorityAction, Candidate, CompletionRecord
from rlcleanup.models.vocab import CandidateState
from rlcleanup.settings import ExportSettings

T0 = datetime(2026, 12, 1, tzinfo=UTC)
DEFAULT = ExportSettings(throughput_bytes_per_second=50e6, margin_seconds=0)


def _job(job_id: str, gigabytes: float, seconds: float, *, state: str = "SUCCEEDED", ended: bool = True) -> ExportJob:
    return ExportJob(
        controller="ray", job_id=job_id, argv=["convert"], request_digest="0" * 64, state=state,
        exit_code=0 if state == "SUCCEEDED" else 1, submitted_at=T0,
        ended_at=T0 + timedelta(seconds=seconds) if ended else None, bytes=int(gigabytes * 1e9),
    )  # fmt: skip


def _record(run_id: str, parameters: int | None, *jobs: ExportJob) -> CompletionRecord:
    candidate = Candidate(step=5, uri=f"/runs/{run_id}/exports/global_step_5/policy", state=CandidateState.valid,
                          valid=True, parameter_count=parameters)  # fmt: skip
    actions = [AuthorityAction(action="export", grant_id=f"g-{j.job_id}", state="submitted", step=20, export_job=j)
               for j in jobs]  # fmt: skip
    return CompletionRecord(run_id=run_id, run_uri=f"/runs/{run_id}", candidates=[candidate], authority_actions=actions)


@pytest.fixture
def records(tmp_path: Path) -> SqliteRunRecords:
    """Earlier runs: three 7-8B exports that succeeded (100, 200 and 400 MB/s), a failed one and one still running
    (never measured), and a 70B run's export (another size class)."""
    store = SqliteRunRecords(tmp_path / "records.db")
    for record in (
        _record("r7b-a", 7_600_000_000, _job("a", 100, 1000), _job("failed", 100, 1, state="FAILED")),
        _record("r8b-b", 8_000_000_000, _job("b", 200, 1000), _job("running", 100, 1, ended=False)),
        _record("r7b-c", 7_000_000_000, _job("c", 400, 1000)),
        _record("r70b", 70_000_000_000, _job("big", 1, 1000)),
    ):
        store.create_if_absent(record)
    return store


def test_the_median_of_earlier_exports_of_the_same_model_size_is_used(records: SqliteRunRecords) -> None:
    rate = for_record(records, _record("now", 7_200_000_000), DEFAULT)
    assert rate.basis == "measured" and rate.size_class == "1B-10B params"
    assert rate.bytes_per_second == pytest.approx(200e6)  # the median of 100, 200, 400 MB/s: no failed job, no 70B
    assert rate.describe() == "the median of 3 earlier export job(s) of 1B-10B params models (100000000-400000000 B/s)"


def test_without_a_measured_export_of_that_size_the_stated_default_is_used_and_said(records: SqliteRunRecords) -> None:
    rate = for_record(records, _record("now", 300_000_000), DEFAULT)
    assert (rate.basis, rate.bytes_per_second, rate.measured) == ("default", 50e6, [])
    assert "no earlier export job of 100M-1B params models has a recorded end" in rate.describe()
    unknown = for_record(records, _record("now", None), DEFAULT)
    assert unknown.basis == "default" and "the run's model size is unknown" in unknown.describe()


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=10**15))
def test_a_size_class_is_the_decade_its_parameter_count_lies_in(parameters: int) -> None:
    low = 10 ** (len(str(parameters)) - 1)
    assert low <= parameters < low * 10
    assert size_class(parameters) == size_class(low) == size_class(low * 10 - 1)
    assert size_class(parameters) != size_class(low * 10)


def test_only_a_succeeded_job_with_a_recorded_end_is_measured() -> None:
    assert job_throughput(_job("ok", 1, 10)) == pytest.approx(1e8)
    assert job_throughput(_job("failed", 1, 10, state="FAILED")) is None
    assert job_throughput(_job("running", 1, 10, ended=False)) is None
    assert job_throughput(_job("instant", 1, 0)) is None  # no duration to divide by


def test_the_refusal_names_the_measured_throughput_it_estimated_with(tmp_path: Path) -> None:
    """The preflight itself, on a real local checkpoint under tmp/ttl=1d/ that expires in an hour: 2 MB at the
    measured median takes longer than that, at the default it would not."""
    checkpoint = tmp_path / "tmp" / "ttl=1d" / "run" / "checkpoints" / "global_step_20"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.pt").write_bytes(b"\0" * 2_000_000)
    aged = (datetime.now(UTC) - timedelta(days=1) + timedelta(hours=1)).timestamp()
    os.utime(checkpoint / "model.pt", (aged, aged))
    store = SqliteRunRecords(tmp_path / "records.db")
    store.create_if_absent(_record("slow", 7_000_000_000, _job("slow", 0.000_1, 1000)))  # 100 kB in 1000 s: 100 B/s
    rate = for_record(store, _record("now", 7_000_000_000), DEFAULT)
    now = datetime.now(UTC)
    grant = Grant(run_id="now", action=Action.export, step=20, digest="0" * 64, destination=str(tmp_path / "x"),
                  granted_by="alice", granted_at=now, expires_at=now + timedelta(hours=1))  # fmt: skip
    refused = export._preflight(LocalStorage(), str(checkpoint), DEFAULT, now, grant, rate, "now")
    assert isinstance(refused, Outcome) and refused.refusal is Refusal.expires_too_soon, refused
    assert (
        "2000000 B / 100 B/s, the median of 1 earlier export job(s) of 1B-10B params models (100-100 B/s)"
        in refused.detail
    )
    assert "--action preserve --step 20 --to <durable URI>" in refused.detail
    timing = export._preflight(LocalStorage(), str(checkpoint), DEFAULT, now, grant, for_record(store, _record(
        "now", 100), DEFAULT), "now")  # fmt: skip
    assert not isinstance(timing, Outcome) and timing[0] == 2_000_000  # at the default 50 MB/s: 0.04 s, in time
