"""Issue 49 item 1: the records sweep follows a submitted export job to its end (authority/export_follow.py,
runtime/export_follow.py). On the embedded stack (the same handlers, SQLite, an in-process bus) with the
`deferred-export` sample: an export grant submits step 20's owed export; each sweep pass asks the controller.

The controller here stands in for the Ray job server's export calls only (the real head runs the whole chain in
tests/e2e/test_model_events_stack.py): it runs the submitted argv as a child process, as a Ray head runs an
entrypoint, and answers `job_state`/`job_log_tail` from that process, or is down when the test says so."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rlcleanup.adapters.controllers.registry import BUILTIN, ControllerKind, ControllerRegistry
from rlcleanup.authority.export import export_target
from rlcleanup.authority.export_follow import LOG_TAIL_CHARS, LOG_TAIL_LINES, log_tail
from rlcleanup.authority.grants import Approver, Grant, new_key, public_b64, register_approver, sign
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.controllers import (
    ControllerRefused,
    ControllerSnapshot,
    ControllerUnavailable,
    ExportJobSpec,
    FinishedJob,
    Seen,
    SubmittedJob,
)
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.settings import ExportSettings, unconfigured

CONVERTER = Path(__file__).resolve().parents[1] / "servers" / "tiny_converter.py"
STARTED = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
SECRET = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"


@dataclass
class ChildProcessRay:
    """Ray's export calls, each job a child process of the submitted argv (run to its end when first asked)."""

    name: str = "ray"
    polls: bool = False
    down: bool = False
    running: bool = False  # the job has not ended yet
    forgotten: bool = False  # the head was restarted: it no longer knows the job (404)
    jobs: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    specs: dict[str, ExportJobSpec] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def list_finished(self, seen: Seen, now: datetime) -> list[FinishedJob]:
        return []

    def snapshot(self, job_id: str) -> ControllerSnapshot:
        raise AssertionError("no pre-cancel capture here")

    def submit(self, job: ExportJobSpec) -> SubmittedJob:
        self.specs[job.submission_id] = job
        return SubmittedJob(controller="ray", job_id=job.submission_id, state="PENDING")

    def job_state(self, job_id: str) -> SubmittedJob:
        self.asked.append(job_id)
        if self.down:
            raise ControllerUnavailable("ray", "connection refused (the head is down)")
        if self.forgotten:
            raise ControllerRefused("ray", f"GET /api/jobs/{job_id}: HTTP 404: Job {job_id} does not exist", status=404)
        if self.running:
            return SubmittedJob(controller="ray", job_id=job_id, state="RUNNING", started_at=STARTED)
        if job_id not in self.jobs:
            argv = list(self.specs[job_id].argv)
            self.jobs[job_id] = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        done = self.jobs[job_id]
        return SubmittedJob(
            controller="ray",
            job_id=job_id,
            state="SUCCEEDED" if done.returncode == 0 else "FAILED",
            exit_code=done.returncode,
            message=None if done.returncode == 0 else f"Job entrypoint command failed with exit code {done.returncode}",
            started_at=STARTED,
            ended_at=STARTED + timedelta(seconds=42),
        )

    def job_log_tail(self, job_id: str, max_bytes: int) -> str | None:
        return self.jobs[job_id].stdout[-max_bytes:]


def _stack(tmp_path: Path, ray: ChildProcessRay, converter: list[str]) -> EmbeddedStack:
    settings = unconfigured().model_copy(
        update={"export": ExportSettings(converter=tuple(converter), controller="ray")}
    )
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"), settings=settings)
    kinds = [k for k in BUILTIN.kinds if k.name != "ray"]
    stack.ports.controllers = ControllerRegistry([*kinds, ControllerKind("ray", lambda settings: ray)])
    return stack


def _granted_export(tmp_path: Path, stack: EmbeddedStack) -> tuple[CompletionRecord, Path]:
    """The deferred-export run finished by the pipeline, then an export grant of its step 20 carried out."""
    root = write_sample_run(tmp_path / "src", "deferred-export")
    stack.emit(manual_event(str(root)))
    [record] = list(stack.ports.records.list_runs())
    records = stack.ports.records
    key = new_key()
    register_approver(records, Approver(approver_id="alice", public_key=public_b64(key), allowed_prefixes=[str(root)]))
    step, digest, dest = export_target(stack.ports.storage, record, 20, None, None)
    now = datetime.now(UTC)
    grant = Grant(
        run_id=record.run_id, action="export", step=step, digest=digest, destination=dest, granted_by="alice",
        granted_at=now, expires_at=now + timedelta(hours=1), reason="the owed export",
    )  # fmt: skip
    trigger = next(f.trigger for f in stack.ports.topology.functions if f.name == "apply-grant")
    assert trigger is not None
    stack.bus.publish(trigger, json.dumps(sign(grant, key)).encode(), {"run_id": record.run_id})
    stack.bus.drain()
    after = records.get(record.run_id)
    assert after is not None
    [action] = [a for a in after.authority_actions if a.action == "export"]
    assert action.state == "submitted" and action.export_job is not None, action
    return after, root


def _sweep_records(stack: EmbeddedStack) -> CompletionRecord:
    stack.bus.publish("sweep", json.dumps({"kind": "records"}).encode(), {"kind": "records"})
    stack.bus.drain()
    [record] = list(stack.ports.records.list_runs())
    return record


def test_a_job_that_succeeds_puts_its_validated_export_on_the_record_and_closes_the_owed_item(tmp_path: Path) -> None:
    ray = ChildProcessRay(running=True)
    stack = _stack(tmp_path, ray, [sys.executable, str(CONVERTER)])
    before, root = _granted_export(tmp_path, stack)
    owed = next(c for c in before.candidates if c.step == 20)
    assert owed.state.value == "convertible"
    assert any(i.startswith("export job ") and "the sweep follows it" in i for i in before.remaining_work)

    running = _sweep_records(stack)  # still running: asked, nothing changes
    assert ray.asked and running.candidates == before.candidates and running.remaining_work == before.remaining_work
    ray.running = False

    after = _sweep_records(stack)
    now = next(c for c in after.candidates if c.step == 20)
    assert now.valid and now.state.value == "valid" and now.digest, now.problems
    assert now.uri.rstrip("/").endswith("exports/global_step_20/policy")
    assert now.uri.startswith(str(root.resolve())) or now.uri.startswith(str(root))
    [action] = [a for a in after.authority_actions if a.action == "export"]
    job = action.export_job
    assert job is not None and job.state == "SUCCEEDED" and job.exit_code == 0
    assert (job.started_at, job.ended_at, job.duration_seconds) == (STARTED, STARTED + timedelta(seconds=42), 42.0)
    # Nothing is owed for step 20 any more: neither the owed export, its deadline, nor its job.
    assert not [i for i in after.remaining_work if "global_step_20" in i or i.startswith("export job ")], (
        after.remaining_work
    )
    assert not [e for e in after.errors if e.code.startswith("export_job")], after.errors
    assert 20 in [c.step for c in after.candidates if c.valid]
    # The report is re-rendered from the record: step 20 is no longer an owed (convertible) export in it.
    assert before.report_uri and after.report_uri and after.report_uri != before.report_uri
    earlier, report = (Path(r.removeprefix("file://")).read_text() for r in (before.report_uri, after.report_uri))
    owed_rows = [r.count("CONVERTIBLE (request pending)") for r in (earlier, report)]  # steps 10 and 20, then 10
    assert owed_rows == [2, 1], owed_rows
    assert "exports/global_step_20/policy" in report

    # A second pass asks nothing: the job's end is recorded.
    asked = len(ray.asked)
    again = _sweep_records(stack)
    assert len(ray.asked) == asked and next(c for c in again.candidates if c.step == 20) == now


def test_a_failed_job_is_a_run_error_with_its_exit_and_log_tail_and_the_export_stays_owed(tmp_path: Path) -> None:
    fails = f"print('loading checkpoint'); print('HF_TOKEN={SECRET}'); print('OOM: killed'); raise SystemExit(3)"
    ray = ChildProcessRay(down=True)
    stack = _stack(tmp_path, ray, [sys.executable, "-c", fails])
    before, _ = _granted_export(tmp_path, stack)

    # The head is down: the pass leaves the job open, files no error, and the run is not failed.
    down = _sweep_records(stack)
    assert ray.asked and not ray.jobs
    assert down.status == before.status and not [e for e in down.errors if e.code.startswith("export_job")]
    [action] = [a for a in down.authority_actions if a.action == "export"]
    assert action.export_job is not None and action.export_job.ended_at is None

    ray.down = False
    after = _sweep_records(stack)
    [error] = [e for e in after.errors if e.code == "export_job_failed"]
    assert "ended FAILED (exit 3)" in error.message and "Job entrypoint command failed" in error.message
    assert "loading checkpoint" in error.message and "OOM: killed" in error.message
    assert SECRET not in error.message and "[withheld: " in error.message
    fix = f"rlcleanup grant {after.run_id} --action export --step 20 --key <key id> --dry-run"
    assert fix in error.message
    assert next(c for c in after.candidates if c.step == 20).state.value == "convertible"
    [action] = [a for a in after.authority_actions if a.action == "export"]
    assert action.export_job is not None and action.export_job.state == "FAILED" and action.export_job.exit_code == 3
    assert any("global_step_20" in i and i.startswith("export owed") for i in after.remaining_work)
    assert any(i.startswith("export job ") and "ended FAILED (exit 3)" in i for i in after.remaining_work)

    again = _sweep_records(stack)  # the end is recorded: never asked or filed again
    assert len([e for e in again.errors if e.code == "export_job_failed"]) == 1


def test_a_job_that_succeeds_without_writing_an_export_is_an_error_and_the_export_stays_owed(tmp_path: Path) -> None:
    ray = ChildProcessRay()
    stack = _stack(tmp_path, ray, [sys.executable, "-c", "print('converted nothing')"])  # exit 0, no export
    before, _ = _granted_export(tmp_path, stack)
    after = _sweep_records(stack)
    [error] = [e for e in after.errors if e.code == "export_job_invalid"]
    assert "succeeded, but global_step_20's export is convertible" in error.message
    assert f"rlcleanup grant {after.run_id} --action export --step 20" in error.message
    assert next(c for c in after.candidates if c.step == 20).state.value == "convertible"
    assert any("global_step_20" in i and i.startswith("export owed") for i in after.remaining_work)
    assert any(i.startswith("export job ") and "ended SUCCEEDED (exit 0) without a valid export" in i
               for i in after.remaining_work)  # fmt: skip
    assert [c.step for c in after.candidates if c.valid] == [c.step for c in before.candidates if c.valid]


def test_a_job_its_controller_no_longer_knows_is_recorded_gone_once_and_the_export_stays_owed(tmp_path: Path) -> None:
    ray = ChildProcessRay(forgotten=True)
    stack = _stack(tmp_path, ray, [sys.executable, str(CONVERTER)])
    _granted_export(tmp_path, stack)
    after = _sweep_records(stack)
    [error] = [e for e in after.errors if e.code == "export_job_failed"]
    assert "ended ABSENT (no exit code): ray no longer knows job" in error.message and "404" in error.message
    assert next(c for c in after.candidates if c.step == 20).state.value == "convertible"
    [action] = [a for a in after.authority_actions if a.action == "export"]
    assert action.export_job is not None and action.export_job.state == "ABSENT" and action.export_job.ended_at
    asked = len(ray.asked)
    again = _sweep_records(stack)  # never asked again, never filed twice
    assert len(ray.asked) == asked and len([e for e in again.errors if e.code == "export_job_failed"]) == 1


def test_a_log_tail_is_bounded_to_its_last_lines_and_characters() -> None:
    lines = [f"line {i} " + "x" * 200 for i in range(500)]
    tail = log_tail("\n".join(lines))
    assert len(tail) <= LOG_TAIL_CHARS + 3 and tail.endswith(lines[-1])
    assert "line 459 " not in tail and len(log_tail("\n".join(f"l{i}" for i in range(500))).split("\n")) == (
        LOG_TAIL_LINES
    )
    assert log_tail(f"ok\ntoken={SECRET}\nbye").split("\n")[1].startswith("[withheld: ")
