"""Poll an Iris controller for finished jobs (Iris pushes nothing): its Connect RPCs, JSON over HTTP.

Wire shapes from marin-community/marin `lib/iris/src/iris/rpc/controller.proto` (@010ac14: service
`iris.cluster.ControllerService`, `ListJobs{query: JobQuery}` → `{jobs[], total_count, has_more}`, `GetJobState{job_ids[]}`
→ `{states: map<job_id, JobState>}`, `GetJobStatus{job_id}` → `{job, request: LaunchJobRequest}`), `job.proto`
(@cc38352: `JobStatus{job_id, state, exit_code, error, started_at, finished_at, name, submitted_at, ...}`,
`JobState` 0-8) and `time.proto` (`Timestamp{epoch_ms}`). The Connect protocol's unary JSON form: `POST
/<service>/<Method>`, `Content-Type: application/json`, proto3 JSON mapping (lowerCamelCase names, enum names,
int64 as strings; parsers accept the proto field names too), errors as a non-200 with `{"code", "message"}`.
The bearer token comes from Secret Manager (a secret environment variable on Cloud Run).

A job maps to its run through the contract's convention (docs/events.md): the job's environment names the run
root in `RLCLEANUP_RUN_URI` (read from `GetJobStatus.request.environment.env_vars`), else a configured template
over `{job_name}`, `{run_id}`, `{attempt_id}` (job name = `<run.id>-<attempt_id>`, run-layout-v2.md §1). Iris
reuses a finished job's name (`fail_if_exists=false`), so a job is identified by (cluster, job uid) where the uid
is the job id plus its `submitted_at`: a resubmission under the same name is a new job.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlcleanup.models.controller_states import IRIS
from rlcleanup.models.events import JobEvent

SERVICE = "iris.cluster.ControllerService"
# ListJobs' state_filter takes the exact lower-case state name (controller.proto JobQuery.state_filter).
TERMINAL_STATE_FILTERS = ("succeeded", "failed", "killed", "worker_failed", "unschedulable")
MAX_LIMIT = 500  # JobQuery.limit: default 50, max 500
RUN_URI_ENV = "RLCLEANUP_RUN_URI"
_JOB_NAME = re.compile(r"^(?P<run_id>.+)-(?P<attempt_id>[0-9a-f]{12})$")


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


class ConnectError(RuntimeError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"Iris {code} (HTTP {status}): {message}")
        self.status, self.code = status, code


Transport = Callable[[urllib.request.Request, float], Any]


def _urlopen(request: urllib.request.Request, timeout: float) -> Any:
    return urllib.request.urlopen(request, timeout=timeout)  # loopback or the configured controller URL only


@dataclass
class IrisClient:
    base_url: str
    token: str | None = None
    timeout: float = 10.0
    open: Transport = _urlopen

    def call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            f"{self.base_url.rstrip('/')}/{SERVICE}/{method}", json.dumps(body).encode(), headers, method="POST"
        )
        try:
            with self.open(request, self.timeout) as resp:
                data: dict[str, Any] = json.loads(resp.read() or b"{}")
                return data
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read() or b"{}")
            except ValueError:
                err = {}
            raise ConnectError(exc.code, str(err.get("code", "unknown")), str(err.get("message", exc.reason))) from exc

    def list_jobs(self, state_filter: str, *, offset: int = 0, limit: int = MAX_LIMIT) -> ListJobsResponse:
        query = {
            "stateFilter": state_filter,
            "sortField": "JOB_SORT_FIELD_DATE",
            "sortDirection": "SORT_DIRECTION_DESC",
            "offset": offset,
            "limit": min(limit, MAX_LIMIT),
        }
        return ListJobsResponse.model_validate(self.call("ListJobs", {"query": query}))

    def get_job_state(self, job_ids: list[str]) -> dict[str, str]:
        states = self.call("GetJobState", {"jobIds": job_ids}).get("states") or {}
        return {str(k): IRIS.spell(v) for k, v in states.items()}

    def job_env(self, job_id: str) -> dict[str, str]:
        """The job's environment variables from its original LaunchJobRequest (GetJobStatus.request)."""
        response = self.call("GetJobStatus", {"jobId": job_id})
        request = response.get("request") or {}
        environment = request.get("environment") or {}
        env = environment.get("envVars") or environment.get("env_vars") or {}
        return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


@dataclass(frozen=True)
class Found:
    key: str  # dedupe key: hash of (cluster, job uid)
    event: JobEvent | None
    reason: str


def dedupe_key(cluster: str, job: JobStatus) -> str:
    return "iris-" + hashlib.sha256(f"{cluster}\x00{job.job_uid}".encode()).hexdigest()[:32]


def poll(
    client: IrisClient,
    cluster: str,
    seen: Callable[[str], bool],
    *,
    run_uri_template: str | None = None,
    max_pages: int = 2,
    now: datetime | None = None,
) -> list[Found]:
    """Finished jobs not seen before, newest first, at most `max_pages` pages per terminal state (bounded work:
    a backlog drains over successive sweeps). Paging stops at a page whose jobs were all seen."""
    found: list[Found] = []
    for state in TERMINAL_STATE_FILTERS:
        offset = 0
        for _ in range(max_pages):
            page = client.list_jobs(state, offset=offset)
            fresh = [job for job in page.jobs if not seen(dedupe_key(cluster, job))]
            found += [_found(client, cluster, job, run_uri_template, now) for job in fresh]
            if not fresh or not page.has_more:
                break
            offset += len(page.jobs)
    return found


def _found(client: IrisClient, cluster: str, job: JobStatus, template: str | None, now: datetime | None) -> Found:
    key = dedupe_key(cluster, job)
    match = _JOB_NAME.match(job.job_name)
    run_id, attempt_id = (match["run_id"], match["attempt_id"]) if match else (None, None)
    run_uri = client.job_env(job.job_id).get(RUN_URI_ENV)
    if not run_uri and template:
        if run_id is None and ("{run_id}" in template or "{attempt_id}" in template):
            return Found(key, None, f"job name {job.job_name!r} is not <run_id>-<attempt_id>")
        run_uri = template.format(job_name=job.job_name, run_id=run_id, attempt_id=attempt_id)
    if not run_uri:
        return Found(key, None, f"job {job.job_id} names no run ({RUN_URI_ENV} unset, no run URI template)")
    finished = job.finished_at.datetime if job.finished_at else None
    event = JobEvent(
        source="iris",
        job_id=f"{cluster}/{job.job_id}",
        run_uri=run_uri.rstrip("/"),
        state=job.spelled_state,
        observed_at=finished or now or datetime.now(UTC),
        run_id=run_id,
        attempt_id=attempt_id,
        exit_code=job.exit_code or None,
        error=job.error or None,
    )
    return Found(key, event, f"{job.job_id} {job.spelled_state}")
