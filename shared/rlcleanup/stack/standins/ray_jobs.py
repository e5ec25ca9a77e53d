"""STAND-IN for a Ray job server (the dashboard's Jobs REST API; Ray's own server needs a Ray cluster): the
read routes the sweep's poller uses.

Shapes are those of the Ray Jobs REST API as documented for Ray 2.x (docs.ray.io "Ray Jobs REST API" and its
OpenAPI specification page; `ray.job_submission.JobDetails` fields type, job_id, submission_id, driver_info,
status, entrypoint, message, error_type, start_time, end_time (Unix ms), metadata, runtime_env,
driver_agent_http_address, driver_node_id, driver_exit_code): `GET /api/jobs/` → a JSON list of JobDetails,
`GET /api/jobs/<id>` → one (by submission id or job id; 404 otherwise), `GET /api/version` → {version,
ray_version, ray_commit}. It is not Ray: no submission, no logs, no drivers.

    python -m rlcleanup.stack.standins.ray_jobs --port 8265 --jobs jobs.json     # jobs.json: [JobDetails...]
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VERSION = {"version": "2", "ray_version": "2.x (stand-in)", "ray_commit": "standin"}


class _Handler(BaseHTTPRequestHandler):
    jobs_file: Path

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

    def _reply(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Ray job server stand-in (Jobs REST API, read routes)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--jobs", type=Path, required=True)
    args = ap.parse_args(argv)
    handler = type("Handler", (_Handler,), {"jobs_file": args.jobs})
    ThreadingHTTPServer((args.host, args.port), handler).serve_forever()


if __name__ == "__main__":
    main()
