"""Read-only controller adapters for pre-cancel capture. rlcleanup never stops, kills or cancels a job.

Ray: the Jobs REST API (`GET /api/jobs/{id}`, `GET /api/jobs/{id}/logs`). Iris: its CLI's JSON output, the
command configurable (`RLCLEANUP_IRIS_STATUS_CMD`, `{job_id}` substituted), run without a shell.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import urllib.parse
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


# Each controller's job-id grammar. A job id comes from an event (anyone who can publish one chooses it), so it is
# checked against the grammar and then passed as data: a URL-quoted path segment for Ray, one argv element for Iris
# (never starting with "-", so never read as an option such as --config=...).
RAY_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")  # raysubmit_<id> submission ids, hex job ids
IRIS_JOB_ID = re.compile(r"^/?[A-Za-z0-9][A-Za-z0-9._-]{0,127}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,127}){0,8}$")


def checked_job_id(grammar: re.Pattern[str], source: str, job_id: str) -> str:
    if not isinstance(job_id, str) or not grammar.fullmatch(job_id) or ".." in job_id.split("/"):
        raise ControllerError(f"{source}: job id {job_id[:80]!r} is not a {source} job id; not sent to the controller")
    return job_id


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
        segment = urllib.parse.quote(checked_job_id(RAY_JOB_ID, "ray", job_id), safe="")
        details = self._get(f"/api/jobs/{segment}")
        logs = self._get(f"/api/jobs/{segment}/logs").get("logs")
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
        checked_job_id(IRIS_JOB_ID, "iris", job_id)
        # The id replaces a whole argv element only: "{job_id}" embedded in a longer option is not substituted,
        # so an id can never become (part of) an option.
        argv = [job_id if part == "{job_id}" else part for part in shlex.split(self.command)]
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
