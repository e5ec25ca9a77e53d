"""Poll a Ray job server for finished jobs (Ray has no completion hook): `GET /api/jobs/`.

Wire shape from the Ray Jobs REST API (docs.ray.io "Ray Jobs REST API" and its OpenAPI page; Ray 2.x
`ray.job_submission.JobDetails`, as in ray-project/ray `dashboard/modules/job/pydantic_models.py` @007c8cd):
a JSON list of `JobDetails{type, job_id, submission_id, driver_info, status,
entrypoint, message, error_type, start_time, end_time, metadata, runtime_env, driver_agent_http_address,
driver_node_id, driver_exit_code}` with `status` one of PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED and times as
Unix milliseconds. Older servers answered a map `{job_id: {...}}` (the REST page's example still shows it):
both are accepted. Note the trailing slash: `/api/jobs` without it is not the list route.

A job maps to its run through the contract (docs/events.md): `metadata.rlcleanup_run_uri` given at submit
(`ray job submit --metadata-json '{"rlcleanup_run_uri": "gs://..."}'`), else `RLCLEANUP_RUN_URI` in the job's
`runtime_env.env_vars`. A job is identified by (cluster, submission id, else job id).
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlcleanup.models.controller_states import RAY
from rlcleanup.models.events import JobEvent

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
RUN_URI_METADATA = "rlcleanup_run_uri"
RUN_URI_ENV = "RLCLEANUP_RUN_URI"


class JobDetails(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    type: str | None = None
    job_id: str | None = None
    submission_id: str | None = None
    status: str
    entrypoint: str | None = None
    message: str | None = None
    error_type: str | None = None
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
        if not self.end_time:
            return None
        seconds = self.end_time / 1000 if self.end_time > 10**11 else self.end_time  # ms (2.x); old docs: s
        return datetime.fromtimestamp(seconds, UTC)

    @property
    def run_uri(self) -> str | None:
        uri = (self.metadata or {}).get(RUN_URI_METADATA)
        env = (self.runtime_env or {}).get("env_vars")
        if not uri and isinstance(env, dict):
            uri = env.get(RUN_URI_ENV)
        return str(uri).rstrip("/") if uri else None


Opener = Callable[[urllib.request.Request, float], Any]


def _urlopen(request: urllib.request.Request, timeout: float) -> Any:
    return urllib.request.urlopen(request, timeout=timeout)


def list_jobs(base_url: str, *, timeout: float = 10.0, opener: Opener = _urlopen) -> list[JobDetails]:
    request = urllib.request.Request(f"{base_url.rstrip('/')}/api/jobs/", headers={"Accept": "application/json"})
    with opener(request, timeout) as resp:
        payload = json.loads(resp.read())
    if isinstance(payload, dict):  # the older {job_id: details} form
        payload = [{"job_id": k, **v} for k, v in payload.items() if isinstance(v, dict)]
    return [JobDetails.model_validate(item) for item in payload]


@dataclass(frozen=True)
class Found:
    key: str
    event: JobEvent | None
    reason: str


def dedupe_key(cluster: str, job: JobDetails) -> str:
    return "ray-" + hashlib.sha256(f"{cluster}\x00{job.identity}".encode()).hexdigest()[:32]


def poll(jobs: list[JobDetails], cluster: str, seen: Callable[[str], bool], now: datetime | None = None) -> list[Found]:
    """Finished jobs not seen before, as events (or why not: no run URI)."""
    found: list[Found] = []
    for job in jobs:
        status = RAY.spell(job.status)
        key = dedupe_key(cluster, job)
        if status not in TERMINAL or not job.identity or seen(key):
            continue
        run_uri = job.run_uri
        if run_uri is None:
            found.append(Found(key, None, f"job {job.identity} names no run ({RUN_URI_METADATA} metadata unset)"))
            continue
        event = JobEvent(
            source="ray",
            job_id=f"{cluster}/{job.identity}",
            run_uri=run_uri,
            state=status,
            observed_at=job.ended_at or now or datetime.now(UTC),
            exit_code=job.driver_exit_code,
            error=job.message if status != "SUCCEEDED" else None,
        )
        found.append(Found(key, event, f"{job.identity} {status}"))
    return found
