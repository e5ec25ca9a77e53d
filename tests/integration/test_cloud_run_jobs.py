"""apply-grant starting the Hub upload job on GCP: adapters/cloud_run_jobs.py with google-cloud-run's own
JobsClient (REST transport) against tests/servers/cloud_run_standin.py, a STAND-IN for the Cloud Run Admin API's
`jobs:run` (no emulator exists; request and Operation shapes as google-cloud-run 0.16.2 sends and parses them).
It runs in its own process group on a free port, stopped by group, like the suite's other servers."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # the authority tests' world builder
from authority_support import make_world

from rlcleanup.adapters.cloud_run_jobs import CloudRunJobLauncher
from rlcleanup.authority.grants import Approver, new_key, public_b64, register_approver
from rlcleanup.errors import PermanentError, TransientError
from rlcleanup.stack import procs

pytestmark = pytest.mark.integration
JOB = "projects/rl-prod/locations/us-central1/jobs/rlcleanup-hub-upload"


def _call(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{url}{path}", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


@pytest.fixture(scope="module")
def run_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    script = Path(__file__).resolve().parents[1] / "servers" / "cloud_run_standin.py"
    server, port = procs.start_listening(
        "cloud-run-standin",
        lambda port: [sys.executable, str(script), "--port", str(port)],
        lambda port: procs.http_status(f"http://127.0.0.1:{port}/__standin/runs") == 200,
        state_dir=tmp_path_factory.mktemp("cloud-run"),
        env=dict(os.environ),
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        procs.stop_group(server.pid, popen=server.popen, grace=2)


def _launcher(url: str) -> CloudRunJobLauncher:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import run_v2

    client = run_v2.JobsClient(
        transport="rest", credentials=AnonymousCredentials(), client_options={"api_endpoint": url}
    )
    return CloudRunJobLauncher(JOB, client=client)


def test_apply_grant_starts_one_execution_with_the_run_and_grant_as_overrides(run_api: str, tmp_path: Path) -> None:
    _call(run_api, "/__standin/control", {"status": 200})
    w = make_world(tmp_path)
    key = new_key()
    register_approver(
        w.stack.ports.records,
        Approver(approver_id="bob", public_key=public_b64(key), allowed_prefixes=["hf://rl-team"]),
    )
    w.stack.ports.hub_upload_job = _launcher(run_api)
    w.stack.ports.settings = w.stack.ports.settings.model_copy(update={"hub_job_threshold_bytes": 0})
    before = len(_call(run_api, "/__standin/runs"))
    grant = w.grant(destination="hf://rl-team/big", granted_by="bob", action="handoff")
    w.deliver(w.message(grant, key=key))
    runs = _call(run_api, "/__standin/runs")[before:]
    assert len(runs) == 1 and runs[0]["job"] == JOB
    env = {e["name"]: e["value"] for e in runs[0]["overrides"]["containerOverrides"][0]["env"]}
    assert env == {"RLCLEANUP_HUB_RUN_ID": w.run_id, "RLCLEANUP_HUB_GRANT_ID": grant.grant_id}
    doc = w.grant_doc(grant.grant_id)
    assert doc["state"] == "applying" and doc["outcome"]["state"] == "uploading"  # the job files the outcome
    assert w.action(grant.grant_id)["state"] == "uploading"
    w.deliver(w.message(grant, key=key))  # a redelivery starts no second execution
    assert len(_call(run_api, "/__standin/runs")) == before + 1


def test_the_execution_name_comes_back_and_errors_are_classified(run_api: str) -> None:
    _call(run_api, "/__standin/control", {"status": 200})
    name = _launcher(run_api).start({"RLCLEANUP_HUB_RUN_ID": "r", "RLCLEANUP_HUB_GRANT_ID": "g"})
    assert name.startswith(f"{JOB}/executions/rlcleanup-hub-upload-")
    _call(run_api, "/__standin/control", {"status": 403})
    with pytest.raises(PermanentError, match="refused to start") as refused:
        _launcher(run_api).start({"RLCLEANUP_HUB_RUN_ID": "r", "RLCLEANUP_HUB_GRANT_ID": "g"})
    assert refused.value.code == "job_start_refused"
    _call(run_api, "/__standin/control", {"status": 503})
    with pytest.raises(TransientError, match="could not start"):
        _launcher(run_api).start({"RLCLEANUP_HUB_RUN_ID": "r", "RLCLEANUP_HUB_GRANT_ID": "g"})
    _call(run_api, "/__standin/control", {"status": 200})


def test_a_large_copy_execution_asks_cloud_run_for_its_task_count(run_api: str) -> None:
    """The large-copy job's split (runtime/stages/large_copy.py) reaches Cloud Run as the execution's taskCount
    override, which google-cloud-run sends as `overrides.taskCount`."""
    _call(run_api, "/__standin/control", {"status": 200})
    before = len(_call(run_api, "/__standin/runs"))
    env = {"RLCLEANUP_COPY_RUN_ID": "r", "RLCLEANUP_COPY_TICKET": "large-copy/capture-part:run-0/job-ticket"}
    _launcher(run_api).start(env, tasks=6)
    (run,) = _call(run_api, "/__standin/runs")[before:]
    assert run["overrides"]["taskCount"] == 6
    assert {e["name"]: e["value"] for e in run["overrides"]["containerOverrides"][0]["env"]} == env
