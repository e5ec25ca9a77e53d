"""STAND-IN for an Iris controller (no Iris emulator exists): `iris.cluster.ControllerService` over the Connect
protocol's unary JSON form, for the three RPCs the sweep's poller calls (ListJobs, GetJobState, GetJobStatus) and
the two an export job needs: LaunchJob (`{name, entrypoint.runCommand.argv, failIfExists}` → `{jobId}`: the argv runs
here as a child process, no shell, the stand-in's environment minus nothing it was not given, and the job is
SUCCEEDED or FAILED by its exit) and GetTaskLogs (`{id, tail, maxTotalLines}` → `{taskLogs[{taskId, logs[{data}]}]}`,
the child's output lines).

Shapes are those of marin-community/marin `lib/iris/src/iris/rpc/controller.proto` @010ac14 (ListJobsRequest
{query: JobQuery{state_filter, name_filter, sort_field, sort_direction, offset, limit ≤ 500}}, ListJobsResponse
{jobs, total_count, has_more}, GetJobStateResponse{states}, GetJobStatusResponse{job, request}), `job.proto`
@cc38352 (JobStatus, JobState names JOB_STATE_*) and `time.proto` (Timestamp{epoch_ms}), written with the proto3
JSON mapping (lowerCamelCase names, enum names, int64 as strings). Requests without the configured bearer token
get Connect's `unauthenticated` error (HTTP 401, `{"code", "message"}`); unknown methods `unimplemented` (404).
It is not Iris: no scheduling, no tasks, no persistence beyond the jobs file.

    python -m rlcleanup.stack.standins.iris_controller --port 8123 --jobs jobs.json

jobs.json: {"token": "...", "jobs": [JobStatus JSON...], "env": {job_id: {VAR: value}}}
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from rlcleanup.stack.standins.http import JsonHandler, serve

SERVICE = "/iris.cluster.ControllerService/"
USER = "rlcleanup"  # Iris job ids are /<user>/<name>
_lock = threading.Lock()  # one request at a time reads and rewrites the jobs file
_children: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}  # job id -> (the running argv, its output file)


def _state_name(value: Any) -> str:
    return str(value).removeprefix("JOB_STATE_").lower()


def _submitted(job: dict[str, Any]) -> int:
    return int((job.get("submittedAt") or {}).get("epochMs") or 0)


def list_jobs(jobs: list[dict[str, Any]], query: dict[str, Any]) -> dict[str, Any]:
    state = str(query.get("stateFilter") or query.get("state_filter") or "").lower()
    name = str(query.get("nameFilter") or query.get("name_filter") or "").lower()
    rows = [j for j in jobs if (not state or _state_name(j.get("state")) == state)]
    rows = [j for j in rows if not name or name in str(j.get("name", "")).lower()]
    rows.sort(key=_submitted, reverse=query.get("sortDirection") != "SORT_DIRECTION_ASC")
    offset = int(query.get("offset") or 0)
    limit = min(int(query.get("limit") or 50), 500)  # JobQuery.limit: default 50, max 500
    page = rows[offset : offset + limit]
    return {"jobs": page, "totalCount": len(rows), "hasMore": offset + len(page) < len(rows)}


def _now_ms() -> dict[str, str]:
    return {"epochMs": str(int(time.time() * 1000))}


def _reap(jobs: list[dict[str, Any]]) -> bool:
    """Jobs whose child exited become SUCCEEDED/FAILED with its exit code; True when one changed."""
    changed = False
    for job in jobs:
        child = _children.get(job["jobId"])
        if child is None or job.get("state") != "JOB_STATE_RUNNING" or child[0].poll() is None:
            continue
        code = child[0].returncode
        job.update(state="JOB_STATE_SUCCEEDED" if code == 0 else "JOB_STATE_FAILED", exitCode=code)
        job.update(finishedAt=_now_ms(), error="" if code == 0 else f"exit code {code}")
        changed = True
    return changed


def launch_job(state: dict[str, Any], body: dict[str, Any], logs_dir: Path) -> tuple[int, dict[str, Any]]:
    name = str(body.get("name") or "")
    argv = ((body.get("entrypoint") or {}).get("runCommand") or {}).get("argv") or []
    if not name or "/" in name or not argv or not all(isinstance(a, str) for a in argv):
        return 400, {"code": "invalid_argument", "message": "LaunchJob needs a name and entrypoint.runCommand.argv"}
    job_id = f"/{USER}/{name}"
    jobs: list[dict[str, Any]] = state.setdefault("jobs", [])
    old = [j for j in jobs if j["jobId"] == job_id]
    if old and (body.get("failIfExists") or old[-1].get("state") in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING")):
        return 409, {"code": "already_exists", "message": f"job {job_id} already exists"}
    state["jobs"] = jobs = [j for j in jobs if j["jobId"] != job_id]  # a finished job's name is reused
    logs_dir.mkdir(parents=True, exist_ok=True)
    log = logs_dir / f"{len(list(logs_dir.iterdir()))}.log"
    job: dict[str, Any] = {"jobId": job_id, "name": name, "state": "JOB_STATE_RUNNING", "submittedAt": _now_ms()}
    jobs.append(job)
    try:
        with log.open("wb") as out:
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except OSError as exc:  # a command that cannot start is a failed job (as a worker reports it), not a crash
        job.update(state="JOB_STATE_FAILED", exitCode=127, error=str(exc), finishedAt=_now_ms())
        return 200, {"jobId": job_id}
    _children[job_id] = (child, log)
    job["startedAt"] = job["submittedAt"]
    return 200, {"jobId": job_id}


def task_logs(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    job_id = str(body.get("id") or "")
    if job_id not in _children:
        return 404, {"code": "not_found", "message": f"job {job_id} not found"}
    lines = _children[job_id][1].read_text(errors="replace").splitlines()
    limit = int(body.get("maxTotalLines") or 10000)
    shown = lines[-limit:] if body.get("tail") else lines[:limit]
    logs = [{"data": line} for line in shown]
    return 200, {"taskLogs": [{"taskId": f"{job_id}/0", "logs": logs}], "truncated": len(shown) < len(lines)}


class _Handler(JsonHandler):
    def do_POST(self) -> None:
        with _lock:
            self._post()

    def _post(self) -> None:
        state = json.loads(self.jobs_file.read_text())
        token = state.get("token")
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            return self._reply(401, {"code": "unauthenticated", "message": "missing or wrong bearer token"})
        if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
            return self._reply(415, {"code": "invalid_argument", "message": "Content-Type must be application/json"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        method = self.path.removeprefix(SERVICE) if self.path.startswith(SERVICE) else ""
        jobs: list[dict[str, Any]] = state.get("jobs", [])
        if _reap(jobs):
            self.jobs_file.write_text(json.dumps(state))
        if method == "LaunchJob":
            status, answer = launch_job(state, body, self.jobs_file.parent / "iris-logs")
            self.jobs_file.write_text(json.dumps(state))
            return self._reply(status, answer)
        if method == "GetTaskLogs":
            return self._reply(*task_logs(body))
        if method == "ListJobs":
            return self._reply(200, list_jobs(jobs, body.get("query") or {}))
        if method == "GetJobState":
            wanted = body.get("jobIds") or body.get("job_ids") or []
            return self._reply(200, {"states": {j["jobId"]: j["state"] for j in jobs if j["jobId"] in wanted}})
        if method == "GetJobStatus":
            job_id = body.get("jobId") or body.get("job_id")
            # A reused name leaves only the newest job under that id, as the controller replaces finished jobs.
            match = sorted((j for j in jobs if j["jobId"] == job_id), key=_submitted)
            if not match:
                return self._reply(404, {"code": "not_found", "message": f"job {job_id} not found"})
            env = (state.get("env") or {}).get(job_id, {})
            request = {"name": match[-1].get("name", ""), "environment": {"envVars": env}}
            return self._reply(200, {"job": match[-1], "request": request})
        return self._reply(404, {"code": "unimplemented", "message": f"{self.path} is not served by this stand-in"})

    def do_GET(self) -> None:  # readiness probe
        self._reply(200, {"standin": "iris-controller"})


def main(argv: list[str] | None = None) -> None:
    serve(_Handler, "Iris controller stand-in (Connect JSON)", argv)


if __name__ == "__main__":
    main()
