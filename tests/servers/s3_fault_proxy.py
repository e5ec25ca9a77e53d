"""An HTTP proxy in front of the real S3 server that injects the faults real S3 produces and SeaweedFS does not:
throttling (`503 SlowDown` for the first N requests) and a bucket that lives in another region (`301
PermanentRedirect` with `x-amz-bucket-region`, as AWS answers). Everything else is forwarded byte for byte,
Host header included, so SigV4 signatures made for the proxy's address verify at the server.

    python tests/servers/s3_fault_proxy.py --port P --target 127.0.0.1:PORT [--slowdown N] [--other-region BUCKET]

`GET /__proxy/stats` answers {"requests": n, "throttled": n, "body_bytes": n, "part_copies": [...], "creates": n,
"object_bodies": {"/bucket/key": n}}
(not forwarded): what a test counts to show a copy moved no object byte through the client. Started by the tests in its own
process group and stopped by group.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_REDIRECT = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PermanentRedirect</Code><Message>The bucket you are '
    b"attempting to access must be addressed using the specified endpoint.</Message></Error>"
)


@contextlib.contextmanager
def running(s3_endpoint: str, state_dir: Path, *extra: str) -> Iterator[str]:
    """This proxy in front of `s3_endpoint`, in its own process group (for tests); yields its URL."""
    from rlcleanup.stack import procs

    target = s3_endpoint.removeprefix("http://")
    server, port = procs.start_listening(
        "s3-fault-proxy",
        lambda port: [sys.executable, __file__, "--port", str(port), "--target", target, *extra],
        lambda port: procs.http_status(f"http://127.0.0.1:{port}/__proxy/stats") == 200,
        state_dir=state_dir,
        env=dict(os.environ),
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        procs.stop_group(server.pid, popen=server.popen, grace=2)


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/__proxy/stats", timeout=5) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
        return answer


def main() -> None:  # noqa: C901 -- a test proxy's argument parsing and fault modes
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--slowdown", type=int, default=0)
    ap.add_argument("--other-region", default="")
    ap.add_argument("--delay-part-copy", type=float, default=0.0)  # seconds before each UploadPartCopy
    ap.add_argument("--upstream-timeout", type=float, default=60.0)  # a 512 MiB part copy can take longer
    args = ap.parse_args()
    host, port = args.target.rsplit(":", 1)
    lock = threading.Lock()
    # body_bytes: every request and response body through the proxy (a server-side copy sends only XML);
    # part_copies: the part numbers of UploadPartCopy requests; creates: CreateMultipartUpload requests;
    # object_bodies: per object path, the body bytes of its plain GETs and PUTs (no query, no copy source): what
    # a test reads to show which objects' bytes went through the client, and how many.
    stats: dict[str, Any] = {
        "requests": 0, "throttled": 0, "body_bytes": 0, "part_copies": [], "creates": 0, "object_bodies": {}
    }  # fmt: skip

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for k, v in {"Content-Type": "application/xml", **(headers or {})}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.path == "/__proxy/stats":
                with lock:
                    self._reply(200, json.dumps(stats).encode(), {"Content-Type": "application/json"})
                return
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query, keep_blank_values=True)
            part_copy = "partNumber" in query and "x-amz-copy-source" in self.headers
            plain = self.command in ("GET", "PUT") and not query and "x-amz-copy-source" not in self.headers
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            with lock:
                stats["requests"] += 1
                stats["body_bytes"] += len(body)
                if plain and body:
                    stats["object_bodies"][path] = stats["object_bodies"].get(path, 0) + len(body)
                stats["creates"] += int(self.command == "POST" and "uploads" in query)
                if part_copy:
                    stats["part_copies"].append(int(query["partNumber"][0]))
                throttle = stats["throttled"] < args.slowdown
                if throttle:
                    stats["throttled"] += 1
            if part_copy and args.delay_part_copy:
                time.sleep(args.delay_part_copy)
            if throttle:
                self._reply(503, _SLOWDOWN, {"Retry-After": "0"})
                return
            if args.other_region and self.path.lstrip("/").split("/", 1)[0].split("?", 1)[0] == args.other_region:
                self._reply(301, _REDIRECT, {"x-amz-bucket-region": "eu-west-1"})
                return
            conn = http.client.HTTPConnection(host, int(port), timeout=args.upstream_timeout)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                with lock:
                    stats["body_bytes"] += len(data)
                    if plain and data and resp.status < 300:
                        stats["object_bodies"][path] = stats["object_bodies"].get(path, 0) + len(data)
                self.send_response(resp.status)
                head = self.command == "HEAD"  # a HEAD keeps the object's Content-Length (its size)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection") and (head or k.lower() != "content-length"):
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            finally:
                conn.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
