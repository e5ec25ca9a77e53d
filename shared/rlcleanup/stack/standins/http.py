"""What every stand-in shares: JSON replies, no request log, and `serve(...)` with --host/--port/--jobs."""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    jobs_file: Path  # set per server by `serve`: the JSON file a test rewrites to change the controller's state

    def _reply(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the suite reads replies, not access lines


def serve(handler: type[JsonHandler], description: str, argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--jobs", type=Path, required=True)
    args = ap.parse_args(argv)
    bound = type("Handler", (handler,), {"jobs_file": args.jobs})
    ThreadingHTTPServer((args.host, args.port), bound).serve_forever()
