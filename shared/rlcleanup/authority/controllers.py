"""Read-only controller adapters for pre-cancel capture. rlcleanup never stops, kills or cancels a job.

Ray: the Jobs REST API (`GET /api/jobs/{id}`, `GET /api/jobs/{id}/logs`). Iris: its CLI's JSON output, the
command configurable (`RLCLEANUP_IRIS_STATUS_CMD`, `{job_id}` substituted), run without a shell.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests

from rlcleanup.models.controller_states import IRIS
from rlcleanup.settings import DEFAULT_IRIS_STATUS_CMD


@dataclass
class ControllerSnapshot:
    source: str
    job_id: str
    state: str
    message: str | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)  # what the controller said, kept verbatim in the capture
    logs: str | None = None


class Controller(Protocol):
    def snapshot(self, job_id: str) -> ControllerSnapshot: ...


class ControllerError(Exception):
    """The controller could not be read; the capture records it and goes on with files."""


class RayJobs:
    def __init__(self, base_url: str, timeout: float = 10.0, max_log_bytes: int = 1 << 20) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_log_bytes = max_log_bytes

    def _get(self, path: str) -> dict[str, Any]:
        try:
            resp = requests.get(f"{self.base_url}{path}", timeout=self.timeout)
            resp.raise_for_status()
            body = resp.json()
        except (requests.RequestException, ValueError) as exc:
            raise ControllerError(f"ray {path}: {exc}") from exc
        if not isinstance(body, dict):
            raise ControllerError(f"ray {path}: expected a JSON object")
        return body

    def snapshot(self, job_id: str) -> ControllerSnapshot:
        details = self._get(f"/api/jobs/{job_id}")
        logs = self._get(f"/api/jobs/{job_id}/logs").get("logs")
        text = logs[-self.max_log_bytes :] if isinstance(logs, str) else None
        return ControllerSnapshot(
            source="ray",
            job_id=str(details.get("submission_id") or details.get("job_id") or job_id),
            state=str(details.get("status", "UNKNOWN")),
            message=details.get("message"),
            tasks=[
                {
                    "task_id": "driver",
                    "state": details.get("status"),
                    "exit_code": details.get("driver_exit_code"),
                    "error": details.get("error_type"),
                    "node_id": details.get("driver_node_id"),
                }
            ],
            raw=details,
            logs=text,
        )


def _iris_state(value: Any) -> str:
    """Iris job and task states by name (`6` -> "KILLED", "JOB_STATE_KILLED" -> "KILLED"), from the one table."""
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip():
        return "UNKNOWN"
    return IRIS.spell(value)


class IrisCli:
    def __init__(self, command: str | None = None, timeout: float = 30.0) -> None:
        self.command = command or DEFAULT_IRIS_STATUS_CMD
        self.timeout = timeout

    def snapshot(self, job_id: str) -> ControllerSnapshot:
        argv = [part.replace("{job_id}", job_id) for part in shlex.split(self.command)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ControllerError(f"iris: {exc}") from exc
        if proc.returncode != 0:
            raise ControllerError(f"iris exited {proc.returncode}: {proc.stderr.strip()[:500]}")
        try:
            body = json.loads(proc.stdout)
        except ValueError as exc:
            raise ControllerError(f"iris printed no JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ControllerError("iris: expected a JSON object")
        tasks = [
            {
                "task_id": t.get("task_id"),
                "state": _iris_state(t.get("state")),
                "exit_code": t.get("exit_code"),
                "error": t.get("error"),
                "attempts": len(t.get("attempts") or []),
            }
            for t in body.get("tasks") or []
            if isinstance(t, dict)
        ]
        return ControllerSnapshot(
            source="iris",
            job_id=str(body.get("job_id", job_id)),
            state=_iris_state(body.get("state_int", body.get("state"))),
            message=body.get("error") or body.get("pending_reason"),
            tasks=tasks,
            raw=body,
        )


def controller_for(
    source: str, *, ray_dashboard: str | None = None, iris_status_cmd: str | None = None
) -> Controller | None:
    """From the deployment settings: RLCLEANUP_RAY_DASHBOARD (e.g. http://head:8265), RLCLEANUP_IRIS_STATUS_CMD."""
    if source.lower() == "ray" and ray_dashboard:
        return RayJobs(ray_dashboard)
    if source.lower() == "iris":
        return IrisCli(iris_status_cmd)
    return None
