"""The Iris controller: its Connect RPCs (the sweep's poll; Iris pushes nothing) and its CLI (the pre-cancel
capture's snapshot), two transports of one adapter.

Wire shapes from marin-community/marin `lib/iris/src/iris/rpc/controller.proto` (@010ac14: service
`iris.cluster.ControllerService`, `ListJobs{query: JobQuery}` → `{jobs[], total_count, has_more}`, `GetJobState{job_ids[]}`
→ `{states: map<job_id, JobState>}`, `GetJobStatus{job_id}` → `{job, request: LaunchJobRequest}`), `job.proto`
(@cc38352: `JobStatus{job_id, state, exit_code, error, started_at, finished_at, name, submitted_at, ...}`,
`JobState` 0-8) and `time.proto` (`Timestamp{epoch_ms}`). The Connect protocol's unary JSON form: `POST
/<service>/<Method>`, `Content-Type: application/json`, proto3 JSON mapping (lowerCamelCase names, enum names,
int64 as strings; parsers accept the proto field names too), errors as a non-200 with `{"code", "message"}`
(adapters/controllers/http.py maps them). The bearer token comes from Secret Manager (a secret environment variable
on Cloud Run).

A job maps to its run through the contract's convention (docs/events.md): the job's environment names the run
root in `RLCLEANUP_RUN_URI` (read from `GetJobStatus.request.environment.env_vars`), else a configured template
over `{job_name}`, `{run_id}`, `{attempt_id}` (job name = `<run.id>-<attempt_id>`, run-layout-v2.md §1). Iris
reuses a finished job's name (`fail_if_exists=false`), so a job is identified by (cluster, job uid) where the uid
is the job id plus its `submitted_at`: a resubmission under the same name is a new job.

Export jobs (ExportSubmitter, docs/authority.md §9) go through `LaunchJob` (controller.proto @010ac14
`Controller.LaunchJobRequest{name, entrypoint: RuntimeEntrypoint{run_command: CommandEntrypoint{argv[]}},
fail_if_exists}` → `LaunchJobResponse{job_id}`; `RuntimeEntrypoint`/`CommandEntrypoint` from `job.proto`
@01e95db): the argv is the command as a list, never a shell string, and the request carries no environment, so the
job gets no rlcleanup credential. The job's name is the submission id and `fail_if_exists=true` ("return
ALREADY_EXISTS even if an existing job with the same name is in a terminal state"), so a redelivered submit is
refused `already_exists` and finds its job by name through `ListJobs{query.name_filter}` instead of replacing it.
The log tail is `GetTaskLogs{id: job id, tail, max_total_lines}` → `{task_logs[]: {task_id, logs[]: LogEntry},
truncated}` (controller.proto @010ac14), each entry's `data` line joined in order.

The snapshot runs the Iris CLI's JSON output (`RLCLEANUP_IRIS_STATUS_CMD`, `{job_id}` substituted as one whole
argv element), without a shell.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlcleanup.adapters.controllers.http import HttpClient
from rlcleanup.models.controller_states import IRIS
from rlcleanup.models.events import JobEvent
from rlcleanup.ports.controllers import (
    ControllerRefused,
    ControllerSnapshot,
    ControllerUnavailable,
    ExportJobSpec,
    FinishedJob,
    Seen,
    SubmittedJob,
    checked_job_id,
)
from rlcleanup.settings import DEFAULT_IRIS_STATUS_CMD, IrisSettings

NAME = "iris"
SERVICE = "iris.cluster.ControllerService"
# ListJobs' state_filter takes the exact lower-case state name (controller.proto JobQuery.state_filter).
TERMINAL_STATE_FILTERS = ("succeeded", "failed", "killed", "worker_failed", "unschedulable")
MAX_LIMIT = 500  # JobQuery.limit: default 50, max 500
RUN_URI_ENV = "RLCLEANUP_RUN_URI"
_JOB_NAME = re.compile(r"^(?P<run_id>.+)-(?P<attempt_id>[0-9a-f]{12})$")
# A job id is data: checked against this grammar and passed as one argv element (ports.controllers.checked_job_id).
JOB_ID = re.compile(r"^/?[A-Za-z0-9][A-Za-z0-9._-]{0,127}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,127}){0,8}$")
# An export job's name is its submission id: one path segment (the controller prefixes the submitting user).
JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LOG_LINES = 1000  # GetTaskLogs.max_total_lines for a tail (0 would be the controller's default, 10000)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class Timestamp(_Wire):
    epoch_ms: int = Field(alias="epochMs", default=0)

    @property
    def datetime(self) -> datetime | None:
        return datetime.fromtimestamp(self.epoch_ms / 1000, UTC) if self.epoch_ms else None


class JobStatus(_Wire):
    job_id: str = Field(alias="jobId", min_length=1)
    state: str | int = "JOB_STATE_UNSPECIFIED"
    exit_code: int = Field(alias="exitCode", default=0)
    error: str = ""
    started_at: Timestamp | None = Field(alias="startedAt", default=None)
    finished_at: Timestamp | None = Field(alias="finishedAt", default=None)
    submitted_at: Timestamp | None = Field(alias="submittedAt", default=None)
    name: str = ""

    @property
    def spelled_state(self) -> str:
        return IRIS.spell(self.state)

    @property
    def job_name(self) -> str:
        return self.name or self.job_id.rstrip("/").rsplit("/", 1)[-1]

    @property
    def job_uid(self) -> str:
        """Job id + submission time: Iris reuses names, never (name, submitted_at)."""
        return f"{self.job_id}@{self.submitted_at.epoch_ms if self.submitted_at else 0}"


class ListJobsResponse(_Wire):
    jobs: list[JobStatus] = []
    total_count: int = Field(alias="totalCount", default=0)
    has_more: bool = Field(alias="hasMore", default=False)


# ---------------------------------------------------------------- the Connect RPC transport (polls)


class IrisRpc:
    """The controller's Connect RPCs over the shared HTTP client."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.http = HttpClient(NAME, base_url, headers=headers)

    def call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        data = self.http.post_json(f"/{SERVICE}/{method}", body)
        if not isinstance(data, dict):
            raise ControllerRefused(NAME, f"{method} answered {type(data).__name__}, not a JSON object")
        return data

    def list_jobs(
        self, state_filter: str, *, offset: int = 0, limit: int = MAX_LIMIT, name_filter: str = ""
    ) -> ListJobsResponse:
        query = {
            "stateFilter": state_filter,
            "nameFilter": name_filter,
            "sortField": "JOB_SORT_FIELD_DATE",
            "sortDirection": "SORT_DIRECTION_DESC",
            "offset": offset,
            "limit": min(limit, MAX_LIMIT),
        }
        return ListJobsResponse.model_validate(self.call("ListJobs", {"query": query}))

    def get_job_state(self, job_ids: list[str]) -> dict[str, str]:
        states = self.call("GetJobState", {"jobIds": job_ids}).get("states") or {}
        return {str(k): IRIS.spell(v) for k, v in states.items()}

    def job_status(self, job_id: str) -> JobStatus:
        return JobStatus.model_validate(self.call("GetJobStatus", {"jobId": job_id}).get("job") or {})

    def launch_job(self, name: str, argv: list[str]) -> str:
        """LaunchJob with the argv as the run command and no environment; `already_exists` raises (the caller
        looks the job up by name)."""
        entrypoint = {"runCommand": {"argv": argv}}
        answer = self.call("LaunchJob", {"name": name, "entrypoint": entrypoint, "failIfExists": True})
        job_id = answer.get("jobId") or answer.get("job_id")
        if not isinstance(job_id, str) or not job_id:
            raise ControllerRefused(NAME, f"LaunchJob answered {str(answer)[:200]!r}, no job id")
        return job_id

    def task_logs_tail(self, job_id: str, max_lines: int = LOG_LINES) -> list[str]:
        answer = self.call("GetTaskLogs", {"id": job_id, "tail": True, "maxTotalLines": str(max_lines)})
        batches = answer.get("taskLogs") or answer.get("task_logs") or []
        return [str(e.get("data", "")) for b in batches if isinstance(b, dict) for e in b.get("logs") or []]

    def job_env(self, job_id: str) -> dict[str, str]:
        """The job's environment variables from its original LaunchJobRequest (GetJobStatus.request)."""
        response = self.call("GetJobStatus", {"jobId": job_id})
        request = response.get("request") or {}
        environment = request.get("environment") or {}
        env = environment.get("envVars") or environment.get("env_vars") or {}
        return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def dedupe_key(cluster: str, job: JobStatus) -> str:
    return "iris-" + hashlib.sha256(f"{cluster}\x00{job.job_uid}".encode()).hexdigest()[:32]


def poll(
    rpc: IrisRpc,
    cluster: str,
    seen: Seen,
    *,
    run_uri_template: str | None = None,
    max_pages: int = 2,
    now: datetime | None = None,
) -> list[FinishedJob]:
    """Finished jobs not seen before, newest first, at most `max_pages` pages per terminal state (bounded work:
    a backlog drains over successive sweeps). Paging stops at a page whose jobs were all seen."""
    found: list[FinishedJob] = []
    for state in TERMINAL_STATE_FILTERS:
        offset = 0
        for _ in range(max_pages):
            page = rpc.list_jobs(state, offset=offset)
            fresh = [job for job in page.jobs if not seen(dedupe_key(cluster, job))]
            found += [_found(rpc, cluster, job, run_uri_template, now) for job in fresh]
            if not fresh or not page.has_more:
                break
            offset += len(page.jobs)
    return found


def _found(rpc: IrisRpc, cluster: str, job: JobStatus, template: str | None, now: datetime | None) -> FinishedJob:
    key = dedupe_key(cluster, job)
    match = _JOB_NAME.match(job.job_name)
    run_id, attempt_id = (match["run_id"], match["attempt_id"]) if match else (None, None)
    run_uri = rpc.job_env(job.job_id).get(RUN_URI_ENV)
    if not run_uri and template:
        if run_id is None and ("{run_id}" in template or "{attempt_id}" in template):
            return FinishedJob(key=key, event=None, reason=f"job name {job.job_name!r} is not <run_id>-<attempt_id>")
        run_uri = template.format(job_name=job.job_name, run_id=run_id, attempt_id=attempt_id)
    if not run_uri:
        reason = f"job {job.job_id} names no run ({RUN_URI_ENV} unset, no run URI template)"
        return FinishedJob(key=key, event=None, reason=reason)
    finished = job.finished_at.datetime if job.finished_at else None
    event = JobEvent(
        source=NAME,
        job_id=f"{cluster}/{job.job_id}",
        run_uri=run_uri.rstrip("/"),
        state=job.spelled_state,
        observed_at=finished or now or datetime.now(UTC),
        run_id=run_id,
        attempt_id=attempt_id,
        exit_code=job.exit_code or None,
        error=job.error or None,
    )
    return FinishedJob(key=key, event=event, reason=f"{job.job_id} {job.spelled_state}")


# ---------------------------------------------------------------- the CLI transport (snapshots)


def state_name(value: Any) -> str:
    """Iris job and task states by name (`6` -> "KILLED", "JOB_STATE_KILLED" -> "KILLED"), from the one table."""
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip():
        return "UNKNOWN"
    return IRIS.spell(value)


@dataclass
class IrisStatusCli:
    """`iris job status {job_id} --json` (configurable), run without a shell; the id is one whole argv element."""

    command: str = DEFAULT_IRIS_STATUS_CMD
    timeout: float = 30.0

    def status(self, job_id: str) -> dict[str, Any]:
        checked_job_id(JOB_ID, NAME, job_id)
        # The id replaces a whole argv element only: "{job_id}" embedded in a longer option is not substituted,
        # so an id can never become (part of) an option.
        argv = [job_id if part == "{job_id}" else part for part in shlex.split(self.command)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ControllerUnavailable(NAME, str(exc)) from exc
        if proc.returncode != 0:
            raise ControllerRefused(NAME, f"exited {proc.returncode}: {proc.stderr.strip()[:500]}")
        try:
            body = json.loads(proc.stdout)
        except ValueError as exc:
            raise ControllerRefused(NAME, f"printed no JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ControllerRefused(NAME, "expected a JSON object")
        return body


def snapshot_of(body: dict[str, Any], job_id: str) -> ControllerSnapshot:
    tasks = [
        {
            "task_id": t.get("task_id"),
            "state": state_name(t.get("state")),
            "exit_code": t.get("exit_code"),
            "error": t.get("error"),
            "attempts": len(t.get("attempts") or []),
        }
        for t in body.get("tasks") or []
        if isinstance(t, dict)
    ]
    return ControllerSnapshot(
        source=NAME,
        job_id=str(body.get("job_id", job_id)),
        state=state_name(body.get("state_int", body.get("state"))),
        message=body.get("error") or body.get("pending_reason"),
        tasks=tasks,
        raw=body,
    )


# ---------------------------------------------------------------- the adapter


@dataclass
class IrisController:
    """Polls when a controller URL is configured; snapshots through the CLI always (its default command)."""

    rpc: IrisRpc | None = None
    cluster: str = ""
    run_uri_template: str | None = None
    cli: IrisStatusCli = field(default_factory=IrisStatusCli)
    name: str = NAME

    @classmethod
    def from_settings(cls, settings: IrisSettings) -> IrisController:
        rpc = IrisRpc(settings.url, settings.token) if settings.url else None
        cluster = settings.cluster or settings.url or ""
        return cls(rpc, cluster, settings.run_uri_template, IrisStatusCli(settings.status_cmd))

    @property
    def polls(self) -> bool:
        return self.rpc is not None

    @property
    def submits(self) -> bool:
        """Export jobs go through the Connect RPCs: none without a controller URL (snapshots only)."""
        return self.rpc is not None

    def list_finished(self, seen: Seen, now: datetime) -> list[FinishedJob]:
        if self.rpc is None:
            return []
        return poll(self.rpc, self.cluster, seen, run_uri_template=self.run_uri_template, now=now)

    def snapshot(self, job_id: str) -> ControllerSnapshot:
        return snapshot_of(self.cli.status(job_id), job_id)

    # ------------------------------------------------------------ ExportSubmitter (module docstring)

    def _rpc(self) -> IrisRpc:
        if self.rpc is None:
            raise ControllerRefused(NAME, "no controller URL configured: an export job cannot be submitted")
        return self.rpc

    def submit(self, job: ExportJobSpec) -> SubmittedJob:
        """LaunchJob once under the submission id as the job's name; a name the controller holds is that job."""
        name = checked_job_id(JOB_NAME, NAME, job.submission_id)
        rpc = self._rpc()
        try:
            job_id = rpc.launch_job(name, list(job.argv))
        except ControllerRefused as exc:
            if exc.reason != "already_exists":
                raise
            return self._by_name(rpc, name).model_copy(update={"already": True})
        return SubmittedJob(controller=NAME, job_id=job_id, state="PENDING")

    def _by_name(self, rpc: IrisRpc, name: str) -> SubmittedJob:
        # name_filter is a substring match: keep the exact name; the newest first (sort by date, descending).
        jobs = [j for j in rpc.list_jobs("", limit=MAX_LIMIT, name_filter=name).jobs if j.job_name == name]
        if not jobs:
            raise ControllerRefused(NAME, f"LaunchJob said {name!r} exists, but ListJobs does not list it")
        return _submitted(jobs[0])

    def job_state(self, job_id: str) -> SubmittedJob:
        return _submitted(self._rpc().job_status(checked_job_id(JOB_ID, NAME, job_id)))

    def job_log_tail(self, job_id: str, max_bytes: int) -> str | None:
        """The job's last log lines (every task's, in the controller's order), their last `max_bytes` characters."""
        lines = self._rpc().task_logs_tail(checked_job_id(JOB_ID, NAME, job_id))
        return "\n".join(lines)[-max_bytes:] if max_bytes > 0 else ""


def _submitted(job: JobStatus) -> SubmittedJob:
    return SubmittedJob(
        controller=NAME,
        job_id=job.job_id,
        state=job.spelled_state,
        exit_code=job.exit_code if job.finished_at else None,
        message=job.error or None,
        started_at=job.started_at.datetime if job.started_at else None,
        ended_at=job.finished_at.datetime if job.finished_at else None,
    )
