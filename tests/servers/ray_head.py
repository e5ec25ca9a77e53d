"""A real local Ray head for the export-grant chain (tests/e2e/test_model_events_stack.py): `ray start --head` on free
ports, its dashboard's Job Submission REST API at the URL `ray_head()` yields. Ray comes from its own venv (`make
.venv-ray/.installed`: `ray[default]==2.60.0`; rlcleanup never imports ray, it only speaks HTTP to the head). The
head is started in its own session with this process's environment (the stack's emulator hosts and PYTHONPATH reach
the jobs' drivers), and every process of that session is killed at the end (never `ray stop`, which stops every Ray
on the machine)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import requests

from rlcleanup.adapters.controllers.ray import RayController

REPO = Path(__file__).resolve().parents[2]
RAY = REPO / ".venv-ray" / "bin" / "ray"
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


@contextlib.contextmanager
def ray_head() -> Iterator[RayHead]:
    """A real Ray head on free ports, starting: its URL is known at once (configure what will talk to it meanwhile),
    `ready()` waits until its Jobs API answers. Every process of its session is stopped when the block ends."""
    head = RayHead()
    try:
        yield head
    finally:
        head.stop()


class RayHead:
    def __init__(self) -> None:
        if not RAY.exists():
            raise AssertionError(f"{RAY} is missing: run `make .venv-ray/.installed` (make test does)")
        self.temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
        port, dashboard = _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{dashboard}"
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        command = [
            str(RAY), "start", "--head", f"--port={port}", f"--dashboard-port={dashboard}",
            "--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=1", f"--temp-dir={self.temp}",
            "--disable-usage-stats",
        ]  # fmt: skip
        self.starter = subprocess.Popen(
            command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.sid = self.starter.pid

    def ready(self) -> str:
        out, _ = self.starter.communicate(timeout=120)
        assert self.starter.returncode == 0, out
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{self.url}/api/jobs/", timeout=2).ok:
                    return self.url
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the Ray dashboard's Jobs API never answered"
            time.sleep(0.5)

    def stop(self) -> None:
        _stop(self.sid)
        shutil.rmtree(self.temp, ignore_errors=True)


def wait_job(controller: RayController, job_id: str, seconds: float = 90) -> str:
    """The job's terminal state, polled through the adapter rlcleanup uses."""
    deadline = time.monotonic() + seconds
    while (state := controller.job_state(job_id).state) not in TERMINAL:
        assert time.monotonic() < deadline, f"export job {job_id} still {state}"
        time.sleep(0.5)
    return state
