"""STAND-IN for a Ray job server (the dashboard's Jobs REST API; Ray's own server needs a Ray cluster): the
read routes the sweep's poller uses.

Shapes are those of ray-project/ray `python/ray/dashboard/modules/job/pydantic_models.py` @007c8cd
(`JobDetails`: type, job_id, submission_id, driver_info{id, node_ip_address, pid}, status (`JobStatus` of
`common.py`: PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED), entrypoint, message, error_type, start_time, end_time
(Unix ms), metadata, runtime_env, driver_agent_http_address, driver_node_id, driver_exit_code; that revision
also has retry_policy and attempt_number, which the poller does not read), as the Ray Jobs REST API documents
them for Ray 2.x (docs.ray.io "Ray Jobs REST API"): `GET /api/jobs/` → a JSON list of JobDetails,
`GET /api/jobs/<id>` → one (by submission id or job id; 404 otherwise), `GET /api/version` → {version,
ray_version, ray_commit}. It is not Ray: no submission, no logs, no drivers.

    python -m rlcleanup.stack.standins.ray_jobs --port 8265 --jobs jobs.json     # jobs.json: [JobDetails...]
"""

from __future__ import annotations

import json
from typing import Any

from rlcleanup.stack.standins.http import JsonHandler, serve

VERSION = {"version": "2", "ray_version": "2.x (stand-in)", "ray_commit": "standin"}


class _Handler(JsonHandler):
    def do_GET(self) -> None:
        jobs: list[dict[str, Any]] = json.loads(self.jobs_file.read_text())
        if self.path == "/api/version":
            return self._reply(200, VERSION)
        if self.path == "/api/jobs/":
            return self._reply(200, jobs)
        if self.path.startswith("/api/jobs/"):
            wanted = self.path.removeprefix("/api/jobs/").strip("/")
            match = [j for j in jobs if wanted in (j.get("submission_id"), j.get("job_id"))]
            if match:
                return self._reply(200, match[0])
            return self._reply(404, {"detail": f"Job {wanted} does not exist."})
        return self._reply(404, {"detail": "Not Found"})


def main(argv: list[str] | None = None) -> None:
    serve(_Handler, "Ray job server stand-in (Jobs REST API, read routes)", argv)


if __name__ == "__main__":
    main()
