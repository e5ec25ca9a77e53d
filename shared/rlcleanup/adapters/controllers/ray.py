"""The Ray job server (the dashboard's Jobs REST API): the sweep polls `GET /api/jobs/` (Ray has no completion
hook), the pre-cancel capture reads `GET /api/jobs/{id}` and `GET /api/jobs/{id}/logs`.

Wire shape from the Ray Jobs REST API (docs.ray.io "Ray Jobs REST API" and its OpenAPI page; Ray 2.x
`ray.job_submission.JobDetails`, as in ray-project/ray `dashboard/modules/job/pydantic_models.py` @007c8cd):
a JSON list of `JobDetails{type, job_id, submission_id, driver_info, status,
entrypoint, message, error_type, start_time, end_time, metadata, runtime_env, driver_agent_http_address,
driver_node_id, driver_exit_code}` with `status` one of PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED and times as
Unix milliseconds. Older servers answered a map `{job_id: {...}}` (the REST page's example still shows it):
both are accepted. Note the trailing slash: `/api/jobs` without it is not the list route.

Export grants submit through the same server (`submit`, `job_state`, and `job_log_tail` when the sweep sees the job
end without success: `GET /api/jobs/{id}/logs`, `{"logs": "<the driver's log>"}`): `POST /api/jobs/` with `entrypoint`
(`shlex.join` of the grant's argv), `submission_id` and `metadata` (Ray's `JobSubmitRequest`, same
pydantic_models.py / `dashboard/modules/job/common.py`), answered `{"job_id", "submission_id"}`; a submission id
Ray already holds is refused (Ray 2.60.0 answers HTTP 500 with the agent's traceback, "ValueError: Job with
submission_id ... already exists", measured on a real head), so the id is looked up first (`GET /api/jobs/{id}`:
404 "Job ... does not exist" when new) and again after a failed POST: a job that exists is "already submitted". An export job carries
`rlcleanup_export_of` metadata, never `rlcleanup_run_uri`: the sweep's poll must not read an export job's end as
the run's.

A job maps to its run through the contract (docs/events.md): `metadata.rlcleanup_run_uri` given at submit
(`ray job submit --metadata-json '{"rlcleanup_run_uri": "gs://..."}'`), else `RLCLEANUP_RUN_URI` in the job's
`runtime_env.env_vars`. A job is identified by (cluster, submission id, else job id).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlcleanup.adapters.controllers.http import HttpClient
from rlcleanup.models.controller_states import RAY
from rlcleanup.models.events import JobEvent
from rlcleanup.ports.controllers import (
    ControllerError,
    ControllerRefused,
    ControllerSnapshot,
    ExportJobSpec,
    FinishedJob,
    Seen,
    SubmittedJob,
    checked_job_id,
)
from rlcleanup.settings import RaySettings

NAME = "ray"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
RUN_URI_METADATA = "rlcleanup_run_uri"
RUN_URI_ENV = "RLCLEANUP_RUN_URI"
MAX_LOG_BYTES = 1 << 20
# A job id is data: checked, then sent as one URL-quoted path segment (raysubmit_<id> submission ids, hex job ids).
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


class JobDetails(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    # The fields the poll reads (the rest of JobDetails is ignored; the snapshot keeps the whole body verbatim).
    job_id: str | None = None
    submission_id: str | None = None
    status: str
    message: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    metadata: dict[str, str] | None = None
    runtime_env: dict[str, Any] | None = None
    driver_exit_code: int | None = None

    @property
    def identity(self) -> str:
        return self.submission_id or self.job_id or ""

    @property
    def ended_at(self) -> datetime | None:
        return _instant(self.end_time)

    @property
    def started_at(self) -> datetime | None:
        return _instant(self.start_time)

    @property
    def run_uri(self) -> str | None:
        uri = (self.metadata or {}).get(RUN_URI_METADATA)
        env = (self.runtime_env or {}).get("env_vars")
        if not uri and isinstance(env, dict):
            uri = env.get(RUN_URI_ENV)
        return str(uri).rstrip("/") if uri else None


def _instant(stamp: int | None) -> datetime | None:
    if not stamp:
        return None
    seconds = stamp / 1000 if stamp > 10**11 else stamp  # ms (2.x); old docs: s
    return datetime.fromtimestamp(seconds, UTC)


def parse_job_list(payload: Any) -> list[JobDetails]:
    """The list route's body: a list of JobDetails, or the older `{job_id: details}` map."""
    if isinstance(payload, dict):
        payload = [{"job_id": k, **v} for k, v in payload.items() if isinstance(v, dict)]
    if not isinstance(payload, list):
        raise ControllerRefused(NAME, f"GET /api/jobs/ answered {type(payload).__name__}, not a job list")
    return [JobDetails.model_validate(item) for item in payload]


def dedupe_key(cluster: str, job: JobDetails) -> str:
    return "ray-" + hashlib.sha256(f"{cluster}\x00{job.identity}".encode()).hexdigest()[:32]


def poll(jobs: list[JobDetails], cluster: str, seen: Seen, now: datetime | None = None) -> list[FinishedJob]:
    """Finished jobs not seen before, as events (or why not: no run URI)."""
    found: list[FinishedJob] = []
    for job in jobs:
        status = RAY.spell(job.status)
        key = dedupe_key(cluster, job)
        if status not in TERMINAL or not job.identity or seen(key):
            continue
        run_uri = job.run_uri
        if run_uri is None:
            reason = f"job {job.identity} names no run ({RUN_URI_METADATA} metadata unset)"
            found.append(FinishedJob(key=key, event=None, reason=reason))
            continue
        event = JobEvent(
            source=NAME,
            job_id=f"{cluster}/{job.identity}",
            run_uri=run_uri,
            state=status,
            observed_at=job.ended_at or now or datetime.now(UTC),
            exit_code=job.driver_exit_code,
            error=job.message if status != "SUCCEEDED" else None,
        )
        found.append(FinishedJob(key=key, event=event, reason=f"{job.identity} {status}"))
    return found


@dataclass
class RayController:
    """One Ray job server; the dashboard URL is also the cluster's name in dedupe keys and job ids."""

    base_url: str
    max_log_bytes: int = MAX_LOG_BYTES
    name: str = NAME

    def __post_init__(self) -> None:
        self.http = HttpClient(NAME, self.base_url, headers={"Accept": "application/json"})

    @classmethod
    def from_settings(cls, settings: RaySettings) -> RayController | None:
        return cls(settings.dashboard) if settings.dashboard else None

    @property
    def polls(self) -> bool:
        return True

    def list_jobs(self) -> list[JobDetails]:
        return parse_job_list(self.http.get_json("/api/jobs/"))

    def list_finished(self, seen: Seen, now: datetime) -> list[FinishedJob]:
        return poll(self.list_jobs(), self.base_url, seen, now)

    def _get_object(self, path: str) -> dict[str, Any]:
        body = self.http.get_json(path)
        if not isinstance(body, dict):
            raise ControllerRefused(NAME, f"GET {path}: expected a JSON object")
        return body

    def snapshot(self, job_id: str) -> ControllerSnapshot:
        segment = urllib.parse.quote(checked_job_id(JOB_ID, NAME, job_id), safe="")
        details = self._get_object(f"/api/jobs/{segment}")
        text = self._log_tail(segment, self.max_log_bytes)
        return ControllerSnapshot(
            source=NAME,
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

    def submit(self, job: ExportJobSpec) -> SubmittedJob:
        """POST /api/jobs/ once: a submission id Ray already holds is that job, read back (module docstring)."""
        submission_id = checked_job_id(JOB_ID, NAME, job.submission_id)
        existing = self._existing(submission_id)
        if existing is not None:
            return existing
        body = {"entrypoint": shlex.join(job.argv), "submission_id": submission_id, "metadata": dict(job.metadata)}
        try:
            answer = self.http.post_json("/api/jobs/", body)
        except ControllerError:
            existing = self._existing(submission_id)  # a retried POST whose first attempt got through
            if existing is not None:
                return existing
            raise
        if not isinstance(answer, dict) or answer.get("submission_id") != submission_id:
            raise ControllerRefused(NAME, f"POST /api/jobs/ answered {str(answer)[:200]!r}, not the job submitted")
        return SubmittedJob(controller=NAME, job_id=submission_id, state="PENDING")

    def _existing(self, submission_id: str) -> SubmittedJob | None:
        try:
            return self.job_state(submission_id).model_copy(update={"already": True})
        except ControllerRefused as exc:
            if exc.status == 404:
                return None
            raise

    def job_state(self, job_id: str) -> SubmittedJob:
        segment = urllib.parse.quote(checked_job_id(JOB_ID, NAME, job_id), safe="")
        details = JobDetails.model_validate(self._get_object(f"/api/jobs/{segment}"))
        return SubmittedJob(
            controller=NAME,
            job_id=details.submission_id or job_id,
            state=RAY.spell(details.status),
            exit_code=details.driver_exit_code,
            message=details.message,
            started_at=details.started_at,
            ended_at=details.ended_at,
        )

    def job_log_tail(self, job_id: str, max_bytes: int) -> str | None:
        """`GET /api/jobs/{id}/logs` (`{"logs": "..."}`, the driver's whole log), its last `max_bytes` characters."""
        segment = urllib.parse.quote(checked_job_id(JOB_ID, NAME, job_id), safe="")
        return self._log_tail(segment, min(max_bytes, self.max_log_bytes))

    def _log_tail(self, segment: str, max_bytes: int) -> str | None:
        logs = self._get_object(f"/api/jobs/{segment}/logs").get("logs")
        return logs[-max_bytes:] if isinstance(logs, str) else None
