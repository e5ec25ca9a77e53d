"""A real HTTP server in front of fake-gcs-server that answers rewrites as GCS does across locations or storage
classes: a part per call, at most `maxBytesRewrittenPerCall` bytes, each answer carrying the token of the next
call (fake-gcs-server always finishes in one call). The token says how far the rewrite got (`rw-<bytes>`); the
call that reaches the object's size is forwarded to fake-gcs-server, which makes the copy. Everything else is
forwarded as is. It counts every body byte both ways and records each rewrite call, so a test can show a copy
moved no object byte through the client and that a resumed rewrite went on from its token.

Runs in the test's process (a thread); the copy it serves may run in a child process the test kills."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RewriteStandin:
    def __init__(self, target: str, *, delay: float = 0.0) -> None:
        host, port = urllib.parse.urlsplit(target).netloc.rsplit(":", 1)
        self.calls: list[dict[str, Any]] = []  # {"token": str | None, "max": int | None, "done": bool}
        self.body_bytes = 0
        self.lock = threading.Lock()
        outer = self

        def forward(method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                conn.request(method, path, body or None, headers)
                resp = conn.getresponse()
                return resp.status, resp.read(), resp.getheader("Content-Type") or "application/json"
            finally:
                conn.close()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                if "/rewriteTo/" in url.path and self.command == "POST":
                    reply = self._rewrite(url, query, body, headers)
                    if reply is not None:
                        return self._reply(*reply)
                path = url.path + ("?" + urllib.parse.urlencode(query, doseq=True) if query else "")
                self._reply(*forward(self.command, path, body, headers), sent=len(body))

            def _rewrite(
                self, url: urllib.parse.SplitResult, query: dict[str, list[str]], body: bytes, headers: dict[str, str]
            ) -> tuple[int, bytes, str] | None:
                token = query.pop("rewriteToken", [None])[0]
                per_call = int(query.pop("maxBytesRewrittenPerCall", ["0"])[0]) or None
                source = url.path.split("/rewriteTo/", 1)[0]  # /storage/v1/b/<bucket>/o/<name>
                auth = {k: v for k, v in headers.items() if k.lower() == "authorization"}
                status, meta, _ = forward("GET", source, b"", auth)
                if status != 200:
                    return None  # fake-gcs-server answers the rewrite itself (404 ...)
                size = int(json.loads(meta)["size"])
                done_before = int(token.removeprefix("rw-")) if token else 0
                reached = size if per_call is None else min(size, done_before + per_call)
                with outer.lock:
                    outer.calls.append({"token": token, "max": per_call, "done": reached >= size})
                if reached >= size:
                    return None  # the last part: fake-gcs-server makes the copy
                time.sleep(delay)
                answer = {
                    "kind": "storage#rewriteResponse",
                    "done": False,
                    "rewriteToken": f"rw-{reached}",
                    "totalBytesRewritten": str(reached),
                    "objectSize": str(size),
                }
                return 200, json.dumps(answer).encode(), "application/json"

            def _reply(self, status: int, data: bytes, content_type: str, sent: int = 0) -> None:
                with outer.lock:
                    outer.body_bytes += len(data) + sent
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
