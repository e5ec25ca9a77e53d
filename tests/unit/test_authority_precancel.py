"""Pre-cancel capture: Ray REST + Iris CLI adapters, per-rank telemetry, in-flight outputs, cancel clearance."""

from __future__ import annotations

import json
import stat
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from authority_support import World, cancel_grant, cleared, make_world

from rlcleanup.adapters.controllers.iris import IrisController, IrisStatusCli
from rlcleanup.adapters.controllers.ray import RayController
from rlcleanup.models.events import JobEvent
from rlcleanup.runtime.authority_handlers import record_cause

RAY_JOB = {
    "type": "SUBMISSION",
    "job_id": "02000000",
    "submission_id": "raysubmit_XyZ123",
    "driver_info": {"id": "02000000", "node_ip_address": "10.0.0.12", "pid": "4164"},
    "status": "RUNNING",
    "entrypoint": "python -m skyrl_train.entrypoints.main_base +resolved_config=resolved-skyrl.json",
    "message": "Job is currently running.",
    "error_type": None,
    "start_time": 1764662400000,
    "end_time": None,
    "metadata": {},
    "runtime_env": {},
    "driver_agent_http_address": "http://10.0.0.12:52365",
    "driver_node_id": "f853ff318bf68df4e7ca927c0efc96561556857e3fd09d690ad320f9",
    "driver_exit_code": None,
}
RAY_LOGS = {"logs": "(skyrl_entrypoint pid=4164) step 17 reward/avg_raw_reward=0.41\n"}
IRIS_JOB = {
    "job_id": "/marin/math-rl-completed-resumed-2026-11-30",
    "state": "running",
    "state_int": 3,
    "failure_count": 1,
    "tasks": [
        {"task_id": "0", "state": 3, "exit_code": None, "error": None, "attempts": [{"attempt_id": "a"}]},
        {"task_id": "1", "state": 10, "exit_code": 137, "error": "preempted", "attempts": [{}, {}]},
    ],
}


@pytest.fixture
def ray_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            routes = {"/api/jobs/raysubmit_XyZ123": RAY_JOB, "/api/jobs/raysubmit_XyZ123/logs": RAY_LOGS}
            body = routes.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body or {"error": "not found"}).encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _event(w: World, source: str, job_id: str) -> JobEvent:
    return JobEvent(
        source=source,
        job_id=job_id,
        run_uri=w.run_uri,
        state="RUNNING",
        observed_at=datetime.now(UTC),
        intent="pre_cancel",
    )


def _telemetry(w: World) -> None:
    attempts = sorted((w.tmp / "runs").rglob("attempts/*/logs"))
    tele = attempts[-1].parent / "telemetry"
    tele.mkdir()
    rows = [{"rank": 0, "gpu_util": 97}, {"rank": 1, "utilization": 0.12}, {"rank": 0, "gpu_util": 93}]
    (tele / "gpu.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_ray_adapter_reads_recorded_responses(ray_server: str) -> None:
    snap = RayController(ray_server).snapshot("raysubmit_XyZ123")
    assert snap.state == "RUNNING" and snap.job_id == "raysubmit_XyZ123"
    assert snap.tasks[0]["node_id"] == RAY_JOB["driver_node_id"] and "step 17" in (snap.logs or "")


def test_iris_adapter_parses_cli_json(tmp_path: Path) -> None:
    fake = tmp_path / "fake-iris"
    fake.write_text(
        f'#!/bin/sh\n[ "$3" = "{IRIS_JOB["job_id"]}" ] || exit 2\ncat <<\'EOF\'\n{json.dumps(IRIS_JOB)}\nEOF\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    snap = IrisController(cli=IrisStatusCli(f"{fake} job status {{job_id}} --json")).snapshot(str(IRIS_JOB["job_id"]))
    assert snap.state == "RUNNING"
    assert [t["state"] for t in snap.tasks] == ["RUNNING", "PREEMPTED"] and snap.tasks[1]["attempts"] == 2


def test_capture_then_cancel_grant_clears_once(
    tmp_path: Path, ray_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLCLEANUP_RAY_DASHBOARD", ray_server)
    w = make_world(tmp_path, "partial-checkpoint", run=False)  # a live run: no completion record yet
    _telemetry(w)
    grant = cancel_grant(w)
    w.deliver(w.message(grant))  # the grant may come first: it waits for the capture
    assert w.grant_doc(grant.grant_id)["state"] == "pending" and cleared(w) == []

    w.stack.emit(_event(w, "ray", "raysubmit_XyZ123"))
    pre = w.record.pre_cancel
    assert pre is not None and pre.controller_state == "ray:RUNNING"
    assert pre.ranks == 2 and pre.min_mean_utilization == pytest.approx(0.12)
    capture = Path(pre.capture_uri).parent
    assert json.loads((capture / "controller.json").read_text())["raw"]["submission_id"] == "raysubmit_XyZ123"
    inflight = capture / "inflight"
    assert (inflight / "global_step_30.listing.jsonl").exists()  # beyond the marker (20): partial, in flight
    assert not any(p.name.endswith("_rank_0.pt") for p in inflight.rglob("*"))  # weights listed, not copied
    assert list((capture / "log-tails").rglob("*.tail"))
    ranks = json.loads((capture / "capture.json").read_text())["ranks"]
    assert [(r["rank"], r["mean"]) for r in ranks] == [(0, 0.95), (1, 0.12)]

    assert w.grant_doc(grant.grant_id)["state"] == "used"
    sent = cleared(w)
    assert len(sent) == 1 and sent[0]["grant_id"] == grant.grant_id
    w.deliver(w.message(grant))  # duplicate delivery: still one clearance
    assert len(cleared(w)) == 1


TRACEBACK = """Traceback (most recent call last):
  File "/app/skyrl-train/skyrl_train/trainer.py", line 412, in train
    rewards = self.reward_fn(batch)
ValueError: reward function returned NaN for row {row}
"""


def test_unexplained_reproducing_failure_withholds_clearance(tmp_path: Path) -> None:
    w = make_world(tmp_path, "completed-resumed", run=False)
    logs = sorted((w.tmp / "runs").rglob("attempts/*/logs/finelog.log"))
    assert len(logs) >= 2
    for row, log in enumerate(logs[:2]):
        log.write_text(log.read_text() + TRACEBACK.format(row=1000 + row))
    w.stack.emit(_event(w, "manual", "job-1"))
    pre = w.record.pre_cancel
    assert pre is not None and pre.unexplained_reproducing == ["ValueError: reward function returned NaN for row N"]
    grant = cancel_grant(w)
    w.deliver(w.message(grant))
    assert cleared(w) == []
    assert w.action(grant.grant_id)["state"] == "withheld"

    capture = json.loads(Path(pre.capture_uri).read_text())
    sig = capture["reproducing"][0]["signature_id"]
    record_cause(w.stack.ports, w.run_id, sig, "bad reward rows 1000-1001", "alice", datetime.now(UTC))
    w.stack.bus.drain()
    assert len(cleared(w)) == 1 and w.action(grant.grant_id)["state"] == "cleared"
