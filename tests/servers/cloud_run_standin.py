"""A STAND-IN for the Cloud Run Admin API's `jobs:run` (no Cloud Run emulator exists): exactly the one call
adapters/cloud_run_jobs.py makes, as google-cloud-run 0.16.2's REST transport sends it:

    POST /v2/projects/{p}/locations/{r}/jobs/{job}:run   {"overrides": {"containerOverrides": [{"env": [...]}]}}
         -> a long-running Operation whose metadata is the Execution (`.../jobs/{job}/executions/{job}-<n>`)

Test controls (not API endpoints): GET /__standin/runs (every request body received, in order),
POST /__standin/control {"status": 200|403|503} (the answer to the next runs). Started by the tests in its own
process group on a free port:

    python tests/servers/cloud_run_standin.py --port P
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from rlcleanup.stack.standins.http import JsonHandler

RUN = re.compile(r"^/v2/(projects/[^/]+/locations/[^/]+/jobs/[^/:]+):run$")


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[dict[str, Any]] = []
        self.status = 200


def make_handler(state: State) -> type[JsonHandler]:
    class Handler(JsonHandler):  # JSON replies, no request log
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/__standin/runs":
                with state.lock:
                    self._reply(200, state.runs)
                return
            self._reply(404, {"error": {"code": 404, "message": f"no route GET {self.path}", "status": "NOT_FOUND"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            path = self.path.split("?", 1)[0]
            with state.lock:
                if path == "/__standin/control":
                    state.status = int(body.get("status", 200))
                    self._reply(200, {})
                    return
                match = RUN.match(path)
                if not match:
                    self._reply(404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}})
                    return
                if state.status != 200:
                    names = {403: "PERMISSION_DENIED", 503: "UNAVAILABLE"}
                    error = {"code": state.status, "message": "stand-in control", "status": names[state.status]}
                    self._reply(state.status, {"error": error})
                    return
                job = match.group(1)
                state.runs.append({"job": job, **body})
                execution = f"{job}/executions/{job.rsplit('/', 1)[1]}-{len(state.runs)}"
                operation = {
                    "name": f"{job.rsplit('/jobs/', 1)[0]}/operations/op-{len(state.runs)}",
                    "metadata": {"@type": "type.googleapis.com/google.cloud.run.v2.Execution", "name": execution},
                }
                self._reply(200, operation)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(State())).serve_forever()


if __name__ == "__main__":
    main()
