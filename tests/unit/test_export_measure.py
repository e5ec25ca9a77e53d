"""Issue 49: when a pass finds the export a grant's job wrote, the record keeps its bytes and the job's duration
(submission to the export's newest object), and the next export grant's expiry preflight estimates with the
throughput earlier export jobs of the run measured instead of the stated default. Real files on local storage:
their modification times are what the local listing reports as each object's write."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority.export import ExportPlan, _preflight
from rlcleanup.authority.outcome import Outcome
from rlcleanup.formats.export_request_schema import validate_request
from rlcleanup.models.export_jobs import ExportJob, ExportMeasurement
from rlcleanup.models.record import AuthorityAction, Candidate, CompletionRecord
from rlcleanup.models.vocab import CandidateState
from rlcleanup.ports.controllers import ExportJobSpec, SubmittedJob
from rlcleanup.samples.exports_v3 import export_request
from rlcleanup.settings import ExportSettings
from rlcleanup.steps.export_measure import export_measurements, measured_throughput

SUBMITTED = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _files(root: Path, sizes: dict[str, int], written: datetime) -> Path:
    root.mkdir(parents=True)
    for name, size in sizes.items():
        (root / name).write_bytes(b"x" * size)
        os.utime(root / name, (written.timestamp(), written.timestamp()))
    return root


def _action(
    step: int, job_id: str, *, submitted_at: datetime | None = SUBMITTED, refusal: str | None = None
) -> AuthorityAction:
    job = ExportJob(controller="ray", job_id=job_id, argv=["python3", "-m", "tiny_converter"], request_digest="d" * 64,
                    submitted_at=submitted_at, checkpoint_bytes=9000)  # fmt: skip
    return AuthorityAction(action="export", grant_id=f"g-{job_id}", state="submitted", step=step, refusal=refusal,
                           export_job=job)  # fmt: skip


def test_a_found_export_records_its_bytes_and_the_jobs_duration_once(tmp_path: Path) -> None:
    export = _files(tmp_path / "exports" / "step_20", {"model.safetensors": 300, "config.json": 20}, SUBMITTED)
    newest = SUBMITTED + timedelta(seconds=90)
    os.utime(export / "model.safetensors", (newest.timestamp(), newest.timestamp()))
    found = Candidate(step=20, uri=str(export), valid=True, state=CandidateState.valid)
    [measured] = export_measurements(LocalStorage(), [found], [_action(20, "job-20")])
    assert (measured.step, measured.job_id, measured.export_uri) == (20, "job-20", str(export))
    assert (measured.export_bytes, measured.checkpoint_bytes, measured.seconds) == (320, 9000, 90.0)
    assert measured.throughput_bytes_per_second == 100.0
    # A later pass keeps it (also once the export is reclaimed) and does not measure the job again.
    again = export_measurements(LocalStorage(), [], [_action(20, "job-20")], [measured])
    assert again == [measured]


def test_nothing_is_measured_that_the_job_did_not_write(tmp_path: Path) -> None:
    old = _files(tmp_path / "old", {"model.safetensors": 10}, SUBMITTED - timedelta(hours=1))
    new = _files(tmp_path / "new", {"model.safetensors": 10}, SUBMITTED + timedelta(seconds=5))
    candidates = [
        Candidate(step=5, uri=str(old), valid=True, state=CandidateState.valid),  # older than the job
        Candidate(step=10, uri=str(new), valid=False, state=CandidateState.partial),  # still owed
        Candidate(step=15, uri=str(new), valid=True, state=CandidateState.valid),
        Candidate(step=25, uri=str(new), valid=True, state=CandidateState.valid),
    ]
    actions = [
        _action(5, "job-5"),
        _action(10, "job-10"),
        _action(15, "job-15", refusal="expires_too_soon"),  # refused: no job ran
        _action(25, "job-25", submitted_at=None),  # recorded before submissions had a time
    ]
    assert export_measurements(LocalStorage(), candidates, actions) == []


def test_the_preflight_uses_the_runs_measured_throughput_else_the_stated_default(tmp_path: Path) -> None:
    """A checkpoint under tmp/ttl=1d/ written a day less 90 minutes ago: its lifecycle rule deletes it in 90 min."""
    now = datetime.now(UTC)
    written = now - timedelta(days=1) + timedelta(minutes=90)
    checkpoint = str(_files(tmp_path / "tmp" / "ttl=1d" / "ckpt", {"model.pt": 14400}, written))
    record = CompletionRecord(run_id="r1", run_uri=str(tmp_path))
    settings = ExportSettings(throughput_bytes_per_second=1e9, margin_seconds=0)
    assert _preflight(LocalStorage(), record, checkpoint, settings, now, None) == (
        14400,
        14400 / 1e9,
        datetime.fromtimestamp(written.timestamp(), UTC) + timedelta(days=1),
    )
    slow = [ExportMeasurement(step=5, job_id="j5", export_uri="x", export_bytes=1, checkpoint_bytes=100, seconds=50),
            ExportMeasurement(step=10, job_id="j10", export_uri="y", export_bytes=1, checkpoint_bytes=300, seconds=150)]  # fmt: skip
    assert measured_throughput(slow) == 2.0  # total bytes over total time
    assert measured_throughput([]) is None
    # 14400 B at the run's measured 2 B/s is two hours: more than the 90 minutes left, so it is refused by name.
    measured = record.model_copy(update={"export_measurements": slow})
    refused = _preflight(LocalStorage(), measured, checkpoint, settings, now, None)
    assert isinstance(refused, Outcome) and refused.refusal == "expires_too_soon", refused
    assert "needs about 7200 s (14400 B / 2 B/s, measured over 2 earlier export job(s) of this run" in (
        refused.detail or ""
    )


def test_the_recorded_job_says_when_it_was_submitted_and_the_checkpoints_bytes() -> None:
    """What a later pass measures against: the grant's plan time (it submits in the same invocation) and the bytes
    its preflight listed."""
    request = validate_request(
        export_request(20, Path("/r/ckpt/global_step_20"), Path("/r/exports"), "pending", 0, None)
    )
    job = ExportJobSpec(submission_id="rlcleanup-export-20-abc", argv=("python3", "-m", "tiny_converter"))
    candidate = Candidate(step=20, uri="/r/ckpt/global_step_20", valid=False, state=CandidateState.convertible)
    plan = ExportPlan(candidate, "/r/ckpt/global_step_20/hf_export_request.json", request, job, "ray", None,  # type: ignore[arg-type]
                      9000, 1800.0, None, [], planned_at=SUBMITTED)  # fmt: skip
    recorded = plan.record_job(SubmittedJob(controller="ray", job_id=job.submission_id, state="PENDING"), "d" * 64)
    assert (recorded.submitted_at, recorded.checkpoint_bytes, recorded.job_id) == (SUBMITTED, 9000, job.submission_id)
