"""The Iris and Ray pollers of the sweep against stand-ins of their servers, started here as real HTTP servers
on free ports in their own process groups (rlcleanup/stack/standins/: no Iris emulator exists, and Ray's job
server needs a Ray cluster). The stand-ins speak the upstream wire shapes (Iris controller.proto @010ac14 over
Connect JSON; Ray's Jobs REST API, JobDetails of ray-project/ray
pydantic_models.py @007c8cd); the events they yield run the real pipeline on the embedded stack."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.controllers import iris, ray
from rlcleanup.models.events import JobEvent
from rlcleanup.ports.controllers import ControllerRefused, ExportJobSpec
from rlcleanup.runtime.embedded import EmbeddedStack
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.stack import procs

pytestmark = pytest.mark.integration
RUN_ID = f"math-rl-failed-first-link-{VERSION}"
# Job end times an hour before the test runs: on-job-event drops events older than RLCLEANUP_MAX_EVENT_AGE_SECONDS
# (7 days), so a fixed date here stops the pipeline once the calendar passes it (it did on 7 Dec 12:01 UTC).
T0 = int((datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0).timestamp() * 1000)


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Any]:
    started: list[procs.Server] = []

    def start(module: str, jobs: Any) -> tuple[str, Path]:
        jobs_file = tmp_path / f"{module}.json"
        jobs_file.write_text(json.dumps(jobs))
        probe = "/api/version" if module == "ray_jobs" else "/"

        def argv(port: int) -> list[str]:
            return [
                sys.executable,
                "-m",
                f"rlcleanup.stack.standins.{module}",
                "--port",
                str(port),
                "--jobs",
                str(jobs_file),
            ]

        server, port = procs.start_listening(
            module,
            argv,
            lambda port: procs.http_status(f"http://127.0.0.1:{port}{probe}") == 200,
            state_dir=tmp_path,
            env={"PATH": "/usr/bin:/bin", **_pythonpath()},
        )
        started.append(server)
        url = f"http://127.0.0.1:{port}"
        return url, jobs_file

    yield start
    procs.stop_groups([(s.pid, s.popen) for s in started], grace=3)


def _pythonpath() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "VIRTUAL_ENV", "HOME")}


def _iris_job(job_id: str, state: str, submitted_ms: int, name: str) -> dict[str, Any]:
    """A JobStatus in the proto3 JSON mapping (lowerCamelCase, enum names, int64 as strings)."""
    return {
        "jobId": job_id,
        "state": state,
        "exitCode": 1 if state != "JOB_STATE_SUCCEEDED" else 0,
        "error": "" if state == "JOB_STATE_SUCCEEDED" else "task 0 exited 1",
        "startedAt": {"epochMs": str(submitted_ms + 1000)},
        "finishedAt": {"epochMs": str(submitted_ms + 60_000)},
        "submittedAt": {"epochMs": str(submitted_ms)},
        "name": name,
        "taskCount": 1,
    }


def _sample_run(tmp_path: Path) -> str:
    write_sample_run(tmp_path / "run", "failed-first-link")
    return str(next((tmp_path / "run" / "durable").glob("*/*")))


def test_iris_poller_against_the_standin(tmp_path: Path, standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    run_uri = _sample_run(tmp_path)
    name = f"math-rl-failed-first-link-{VERSION}-0123456789ab"
    jobs = {
        "token": "s3cret",
        "jobs": [
            _iris_job(f"/alice/{name}", "JOB_STATE_FAILED", T0, name),
            _iris_job("/alice/other-run-aaaaaaaaaaaa", "JOB_STATE_SUCCEEDED", T0 + 5, "other-run-aaaaaaaaaaaa"),
            _iris_job("/alice/still-going", "JOB_STATE_RUNNING", T0 + 9, "still-going"),
        ],
        "env": {f"/alice/{name}": {"RLCLEANUP_RUN_URI": run_uri}},
    }
    url, jobs_file = standin("iris_controller", jobs)

    with pytest.raises(ControllerRefused, match="unauthenticated") as refused:
        iris.IrisRpc(url, "wrong").list_jobs("failed")
    assert refused.value.status == 401 and refused.value.code == "controller_refused"
    client = iris.IrisRpc(url, "s3cret")
    assert client.get_job_state([f"/alice/{name}", "/alice/still-going"]) == {
        f"/alice/{name}": "FAILED",
        "/alice/still-going": "RUNNING",
    }
    page = client.list_jobs("failed", limit=1)
    assert [j.job_id for j in page.jobs] == [f"/alice/{name}"] and page.total_count == 1 and not page.has_more

    monkeypatch.setenv("RLCLEANUP_IRIS_URL", url)
    monkeypatch.setenv("RLCLEANUP_IRIS_TOKEN", "s3cret")
    monkeypatch.setenv("RLCLEANUP_IRIS_CLUSTER", "marin-us-central2")
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))
    controller = json.dumps({"kind": "controller", "source": "iris"}).encode()
    stack.bus.publish("sweep", controller, {})
    stack.bus.drain()
    events = [JobEvent.model_validate_json(m.data) for m in stack.bus.published if m.topic == "job-events"]
    assert [(e.source, e.state, e.run_uri, e.attempt_id) for e in events] == [
        ("iris", "FAILED", run_uri, "0123456789ab")
    ]  # other-run names no run URI (recorded, not an event); still-going is not terminal
    assert events[0].job_id == f"marin-us-central2//alice/{name}" and events[0].exit_code == 1
    record = stack.ports.records.get(RUN_ID)
    assert record is not None and record.terminal_state is not None and record.terminal_state.value == "failed"
    assert record.controller_state and "FAILED" in record.controller_state

    stack.bus.publish("sweep", controller, {})  # the next sweep: seen, nothing new
    stack.bus.drain()
    assert len([m for m in stack.bus.published if m.topic == "job-events"]) == 1

    # Iris reuses a finished job's name: a resubmission is a new job (new submitted_at), hence a new event.
    jobs["jobs"].append(_iris_job(f"/alice/{name}", "JOB_STATE_KILLED", T0 + 3_600_000, name))
    jobs_file.write_text(json.dumps(jobs))
    stack.bus.publish("sweep", controller, {})
    stack.bus.drain()
    states = [JobEvent.model_validate_json(m.data).state for m in stack.bus.published if m.topic == "job-events"]
    assert states == ["FAILED", "KILLED"]


def test_iris_run_uri_from_the_template_and_name_convention(tmp_path: Path, standin: Any) -> None:
    job = _iris_job("/bob/math-0123456789ab", "JOB_STATE_UNSCHEDULABLE", T0, "math-0123456789ab")
    odd = _iris_job("/bob/no-attempt-suffix", "JOB_STATE_FAILED", T0 + 1, "no-attempt-suffix")
    url, _ = standin("iris_controller", {"jobs": [job, odd]})
    found = iris.poll(iris.IrisRpc(url), "c1", lambda key: False, run_uri_template="gs://runs/{run_id}")
    by_job = {f.reason.split()[0] if f.event else f.reason: f for f in found}
    assert by_job["/bob/math-0123456789ab"].event is not None
    assert by_job["/bob/math-0123456789ab"].event.run_uri == "gs://runs/math"  # type: ignore[union-attr]
    assert any("is not <run_id>-<attempt_id>" in f.reason for f in found)


def test_ray_poller_against_the_standin(tmp_path: Path, standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    run_uri = _sample_run(tmp_path)
    end = int((datetime.now(UTC) - timedelta(minutes=5)).timestamp() * 1000)
    details = [
        {
            "type": "SUBMISSION",
            "job_id": "02000000",
            "submission_id": "raysubmit_4LamXRuQpYdSMg7J",
            "driver_info": None,
            "status": "FAILED",
            "entrypoint": "python -m skyrl_train.entrypoints.main_base",
            "message": "Job entrypoint command failed with exit code 1",
            "error_type": None,
            "start_time": end - 600_000,
            "end_time": end,
            "metadata": {"rlcleanup_run_uri": run_uri},
            "runtime_env": {},
            "driver_agent_http_address": "http://127.0.0.1:52365",
            "driver_node_id": "abc",
            "driver_exit_code": 1,
        },
        {
            "type": "SUBMISSION",
            "job_id": "03000000",
            "submission_id": "raysubmit_live",
            "status": "RUNNING",
            "entrypoint": "sleep 100",
            "metadata": {"rlcleanup_run_uri": "gs://x/y"},
        },
        {
            "type": "SUBMISSION",
            "job_id": "04000000",
            "submission_id": "raysubmit_norun",
            "status": "SUCCEEDED",
            "entrypoint": "echo",
            "metadata": {},
        },
    ]
    url, _ = standin("ray_jobs", details)
    listed = ray.RayController(url).list_jobs()
    assert [j.status for j in listed] == ["FAILED", "RUNNING", "SUCCEEDED"]

    monkeypatch.setenv("RLCLEANUP_RAY_DASHBOARD", url)
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))
    message = json.dumps({"kind": "controller", "source": "ray"}).encode()
    for _ in range(2):  # the second poll finds nothing new
        stack.bus.publish("sweep", message, {})
        stack.bus.drain()
    events = [JobEvent.model_validate_json(m.data) for m in stack.bus.published if m.topic == "job-events"]
    assert [(e.source, e.state, e.run_uri, e.exit_code) for e in events] == [("ray", "FAILED", run_uri, 1)]
    assert events[0].observed_at == datetime.fromtimestamp(end / 1000, UTC)
    record = stack.ports.records.get(RUN_ID)
    assert record is not None and record.terminal_state is not None and record.terminal_state.value == "failed"


def test_ray_older_map_form_is_accepted(standin: Any) -> None:
    url, _ = standin("ray_jobs", {"raysubmit_1": {"status": "STOPPED", "metadata": {"rlcleanup_run_uri": "gs://b/r"}}})
    found = ray.RayController(url).list_finished(lambda key: False, datetime.now(UTC))
    assert [(f.event.state, f.event.run_uri) for f in found if f.event] == [("STOPPED", "gs://b/r")]


def _until_ended(controller: iris.IrisController, job_id: str) -> Any:
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    while (job := controller.job_state(job_id)).state == "RUNNING" and datetime.now(UTC) < deadline:
        time.sleep(0.05)  # the argv is a child of the stand-in: wait for its exit, bounded
    return job


def test_iris_export_submit_runs_the_argv_once_and_reads_its_end_and_log(standin: Any) -> None:
    url, jobs_file = standin("iris_controller", {"token": "s3cret", "jobs": []})
    controller = iris.IrisController(iris.IrisRpc(url, "s3cret"), "c1")
    ok = ExportJobSpec(submission_id="exp-abc", argv=(sys.executable, "-c", "print('converted; ok')"))
    first = controller.submit(ok)
    assert (first.job_id, first.already) == ("/rlcleanup/exp-abc", False)
    again = controller.submit(ok)  # a redelivered grant: the job is found by name, not launched twice
    assert (again.job_id, again.already) == (first.job_id, True)
    assert len(json.loads(jobs_file.read_text())["jobs"]) == 1
    done = _until_ended(controller, first.job_id)
    assert (done.state, done.exit_code, done.ended_at is not None) == ("SUCCEEDED", 0, True)
    assert controller.submit(ok).already  # a finished job's name is not reused for a second launch either

    argv = (sys.executable, "-c", "import sys; print('line one'); print('disk full'); sys.exit(3)")
    failed = controller.submit(ExportJobSpec(submission_id="exp-bad", argv=argv))
    end = _until_ended(controller, failed.job_id)
    assert (end.state, end.exit_code) == ("FAILED", 3)
    assert controller.job_log_tail(failed.job_id, 9) == "disk full"
    assert controller.job_log_tail(failed.job_id, 1000) == "line one\ndisk full"


def test_iris_export_submit_sends_the_argv_as_data_never_a_shell(standin: Any, tmp_path: Path) -> None:
    url, _ = standin("iris_controller", {"jobs": []})
    controller = iris.IrisController(iris.IrisRpc(url), "c1")
    marker = tmp_path / "pwned"
    job = controller.submit(ExportJobSpec(submission_id="exp-x", argv=("echo", f"; touch {marker}")))
    assert _until_ended(controller, job.job_id).state == "SUCCEEDED"
    assert controller.job_log_tail(job.job_id, 1000) == f"; touch {marker}" and not marker.exists()
    missing = controller.submit(ExportJobSpec(submission_id="exp-m", argv=(str(tmp_path / "no-such-converter"),)))
    assert (controller.job_state(missing.job_id).state, controller.job_state(missing.job_id).exit_code) == (
        "FAILED",
        127,
    )
    with pytest.raises(ControllerRefused):
        controller.submit(ExportJobSpec(submission_id="../x", argv=("true",)))
    with pytest.raises(ControllerRefused):  # no controller URL: nothing to submit to
        iris.IrisController().submit(ExportJobSpec(submission_id="exp-y", argv=("true",)))
