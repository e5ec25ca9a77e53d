"""Issue 49 item 1: an owed HF export run under a grant, on a real local Ray head (`ray start --head`, the dashboard's
Job Submission REST API), by the tiny converter (tests/integration/tiny_converter.py) the deployment allows.

owed export (the `deferred-export` sample's step 20) -> preview -> grant -> the job runs on Ray -> the export is in
`policy/` and validates as any candidate -> the request reads `complete`, moved by the job as upstream's
`submit_export` moves it. Ray comes from its own venv (`make .venv-ray/.installed`: `ray[default]==2.60.0`); the
head is started in its own session and every process of that session is killed at the end (never `ray stop`, which
stops every Ray on the machine)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from typer.testing import CliRunner

from rlcleanup.adapters.controllers.ray import RayController
from rlcleanup.cli.main import app
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.controllers import ExportJobSpec
from rlcleanup.samples.generator import write_sample_run

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RAY = REPO / ".venv-ray" / "bin" / "ray"
CONVERTER = Path(__file__).with_name("tiny_converter.py")
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session_pids(sid: int) -> list[int]:
    """Every process of the head's session (`ray start` daemonizes gcs_server, raylet, the dashboard, workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    found.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return found


def _stop(sid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _session_pids(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5
        while _session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A real Ray head on free ports, its dashboard (Jobs API) at the returned URL."""
    if not RAY.exists():
        pytest.fail(f"{RAY} is missing: run `make .venv-ray/.installed` (make test does)")
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    port, dashboard = _free_port(), _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    command = [
        str(RAY), "start", "--head", f"--port={port}", f"--dashboard-port={dashboard}",
        "--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=1", f"--temp-dir={temp}",
        "--disable-usage-stats",
    ]  # fmt: skip
    starter = subprocess.Popen(
        command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    sid = starter.pid
    try:
        out, _ = starter.communicate(timeout=120)
        assert starter.returncode == 0, out
        url = f"http://127.0.0.1:{dashboard}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/api/jobs/", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the Ray dashboard's Jobs API never answered"
            time.sleep(0.5)
        yield url
    finally:
        _stop(sid)
        shutil.rmtree(temp, ignore_errors=True)


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout


def _wait(controller: RayController, job_id: str, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while (state := controller.job_state(job_id).state) not in TERMINAL:
        assert time.monotonic() < deadline, f"export job {job_id} still {state}"
        time.sleep(0.5)
    return state


def test_an_owed_export_runs_under_a_grant_on_a_real_ray_head(
    ray_head: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "RLCLEANUP_DB"):
        monkeypatch.delenv(var, raising=False)
    for var, name in (("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(var, str(tmp_path / name))
    root = write_sample_run(tmp_path / "src", "deferred-export")
    code, out = _cli("run", str(root), "--json")
    assert code == 0, out
    run_id = json.loads(out)["run_id"]
    code, out = _cli("keygen", "--id", "alice")
    public = next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))
    assert _cli("approver", "add", "alice", "--public-key", public, "--prefix", str(root.resolve()))[0] == 0
    monkeypatch.setenv("RLCLEANUP_EXPORT_CONVERTER", json.dumps([sys.executable, str(CONVERTER)]))
    monkeypatch.setenv("RLCLEANUP_EXPORT_CONTROLLER", "ray")
    monkeypatch.setenv("RLCLEANUP_RAY_DASHBOARD", ray_head)
    [request] = (tmp_path / "src").rglob("global_step_20/hf_export_request.json")
    policy = root / "exports" / "global_step_20" / "policy"
    assert not policy.exists()

    grant = ("grant", run_id, "--action", "export", "--step", "20", "--key", "alice", "--json")
    code, out = _cli(*grant, "--dry-run")
    preview = json.loads(out)
    assert code == 0 and preview["would"] == "submit", preview
    assert preview["argv"][:2] == [sys.executable, str(CONVERTER)]

    code, out = _cli(*grant)
    granted = json.loads(out)
    assert code == 0 and granted["state"] == "submitted", granted
    [item] = [i for i in granted["remaining_work"] if i.startswith("export job ")]
    job_id = item.split()[2]  # derived from the grant's id (the preview's in-memory grant had another)
    assert (
        job_id.startswith("rlcleanup-export-20-") and f"export job {job_id} submitted to ray for global_step_20" in item
    )

    ray = RayController(ray_head)
    assert _wait(ray, job_id) == "SUCCEEDED", ray.snapshot(job_id).logs
    # The job moved the request as upstream's submit_export does: one attempt, exit 0, complete.
    after = json.loads(request.read_text())
    assert (after["status"], after["attempts"], after["last_exit_code"]) == ("complete", 1, 0)
    assert (policy / "config.json").is_file() and list(policy.glob("*.safetensors"))
    assert not list(policy.parent.glob(".tmp-hf-export-*"))

    # The record keeps the job, typed; a redelivery of the same submission id finds it instead of submitting again.
    code, out = _cli("show", run_id, "--json")
    record = CompletionRecord.model_validate(json.loads(out))
    [action] = [a for a in record.authority_actions if a.action == "export"]
    assert action.export_job is not None and action.export_job.job_id == job_id
    assert action.export_job.argv == preview["argv"] and action.export_job.request_digest == action.digest
    # What a later export's preflight measures from once the job's end is recorded: its bytes and its start.
    assert action.export_job.bytes == preview["checkpoint_bytes"] and action.export_job.submitted_at is not None
    assert preview["throughput"]["basis"] == "default"  # no earlier export of this size has a recorded end
    again = ray.submit(ExportJobSpec(submission_id=job_id, argv=tuple(preview["argv"])))
    assert again.already and again.state == "SUCCEEDED" and again.exit_code == 0
    assert len([j for j in ray.list_jobs() if j.submission_id == job_id]) == 1

    # The new export validates exactly as any candidate does: the pipeline's own pass over the run (--rerun).
    owed = next(c for c in record.candidates if c.step == 20)
    code, out = _cli("run", str(root), "--rerun", "--json")
    assert code == 0, out
    code, out = _cli("show", run_id, "--json")
    rerun = CompletionRecord.model_validate(json.loads(out))
    now = next(c for c in rerun.candidates if c.step == 20)
    assert owed.state.value == "convertible" and now.valid and now.state.value == "valid", now.problems
    assert now.uri.rstrip("/").endswith("exports/global_step_20/policy")
    # Nothing is owed for step 20 any more: neither the owed export nor its job is left to do.
    left = [i for i in rerun.remaining_work if i.startswith("export job ") or i.startswith("export owed")]
    assert left and not [i for i in left if "global_step_20" in i or i.startswith("export job ")], left
