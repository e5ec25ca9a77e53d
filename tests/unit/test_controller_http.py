"""The controllers' one HTTP client: retries what may pass (connection errors, 408/429/5xx), maps the rest into
the error hierarchy (ControllerUnavailable is transient, ControllerRefused permanent), against a real local server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlcleanup.adapters.controllers.http import HttpClient, RetryPolicy
from rlcleanup.errors import ErrorKind, error_kind
from rlcleanup.ports.controllers import ControllerError, ControllerRefused, ControllerUnavailable

# path -> the (status, body) of each successive request; the last one repeats
SCRIPT: dict[str, list[tuple[int, bytes]]] = {
    "/flaky": [(503, b'{"detail": "busy"}'), (429, b""), (200, b'{"ok": true}')],
    "/down": [(502, b"bad gateway")],
    "/denied": [(401, b'{"code": "unauthenticated", "message": "missing or wrong bearer token"}')],
    "/missing": [(404, b'{"detail": "Job raysubmit_x does not exist."}')],
    "/html": [(200, b"<html>a login page</html>")],
}


@pytest.fixture
def server() -> Iterator[tuple[str, dict[str, int]]]:
    hits: dict[str, int] = {}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            n = hits[self.path] = hits.get(self.path, 0) + 1
            steps = SCRIPT[self.path]
            status, body = steps[min(n, len(steps)) - 1]
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", hits
    httpd.shutdown()


def _client(url: str, pauses: list[float]) -> HttpClient:
    return HttpClient("ray", url, timeout=5, sleep=pauses.append)


def test_a_retryable_status_is_retried_with_backoff(server: tuple[str, dict[str, int]]) -> None:
    url, hits = server
    pauses: list[float] = []
    assert _client(url, pauses).get_json("/flaky") == {"ok": True}
    assert hits["/flaky"] == 3 and pauses == [0.5, 1.0]


def test_a_status_still_failing_after_the_last_attempt_is_transient(server: tuple[str, dict[str, int]]) -> None:
    url, hits = server
    pauses: list[float] = []
    with pytest.raises(ControllerUnavailable, match=r"ray unavailable: GET /down: error \(HTTP 502\)") as caught:
        _client(url, pauses).get_json("/down")
    assert hits["/down"] == RetryPolicy().attempts and error_kind(caught.value) is ErrorKind.transient


def test_a_refusal_is_permanent_and_carries_the_servers_words(server: tuple[str, dict[str, int]]) -> None:
    url, hits = server
    with pytest.raises(ControllerRefused, match=r"unauthenticated \(HTTP 401\): missing or wrong bearer") as caught:
        _client(url, []).post_json("/denied", {"jobIds": []})
    assert (caught.value.status, caught.value.reason, caught.value.code) == (
        401,
        "unauthenticated",
        "controller_refused",
    )
    assert hits["/denied"] == 1 and error_kind(caught.value) is ErrorKind.domain  # never retried
    with pytest.raises(ControllerRefused, match="does not exist"):
        _client(url, []).get_json("/missing")
    with pytest.raises(ControllerRefused, match="answered no JSON"):
        _client(url, []).get_json("/html")


def test_nothing_listening_is_transient_after_the_retries() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pauses: list[float] = []
    with pytest.raises(ControllerUnavailable, match="ConnectionError") as caught:
        _client(f"http://127.0.0.1:{port}", pauses).get_json("/api/jobs/")
    assert len(pauses) == RetryPolicy().attempts - 1
    assert isinstance(caught.value, ControllerError)  # what the pre-cancel capture records and goes on from
