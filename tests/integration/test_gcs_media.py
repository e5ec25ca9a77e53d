"""The ranged-read path on bare http.client (adapters/gcs_media.py) keeps the semantics of the urllib3 pool it
replaced: retries on 5xx and dropped connections, a keep-alive the server closed while idle is reopened, a read
that never answers times out, credentials go on every request, and connections are reused.

A real HTTP server in front of fake-gcs-server (the stack's GCS emulator) injects each fault and forwards the
rest unchanged, so every answer that does come back has the emulator's own wire shape.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rlcleanup.adapters import gcs_media
from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.ports import usage
from rlcleanup.ports.storage import StorageError

pytestmark = pytest.mark.integration

# What the front does with the n-th GET (0-based): forward it, answer 503, drop the connection unanswered,
# forward it and then close the connection silently (no `Connection: close`), or never answer.
Plan = Callable[[int], str]


class _FaultyFront:
    def __init__(self, target: str, plan: Plan) -> None:
        host, port = urllib.parse.urlsplit(target).netloc.rsplit(":", 1)
        self.gets: list[str] = []
        self.authorization: list[str | None] = []
        self.connections = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                outer.connections += 1

            def do_GET(self) -> None:
                n = len(outer.gets)
                outer.gets.append(self.path)
                outer.authorization.append(self.headers.get("Authorization"))
                action = plan(n)
                if action == "drop":
                    self.close_connection = True
                    return
                if action == "hang":
                    time.sleep(3)
                    self.close_connection = True
                    return
                if action == "503":
                    return self._reply(503, b"try again", {})
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                conn.request("GET", self.path, headers={k: v for k, v in self.headers.items()})
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                keep = {k: v for k, v in resp.getheaders() if k.lower() in {"content-range", "content-type"}}
                self._reply(resp.status, data, keep)
                if action == "forward-then-close":
                    self.close_connection = True  # closed after the answer, without telling the client

            def _reply(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def bucket(gcs_client, uid: str) -> str:  # type: ignore[no-untyped-def]
    name = f"gcs-media-{uid}"
    gcs_client.create_bucket(name)
    gcs_client.bucket(name).blob("obj").upload_from_string(bytes(range(256)) * 4)
    return name


@pytest.fixture
def front(gcs_client) -> Iterator[Callable[[Plan], tuple[_FaultyFront, GcsStorage]]]:  # type: ignore[no-untyped-def]
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    fronts: list[_FaultyFront] = []

    def make(plan: Plan) -> tuple[_FaultyFront, GcsStorage]:
        f = _FaultyFront(str(gcs_client.api_endpoint), plan)
        fronts.append(f)
        client = storage.Client(
            project=gcs_client.project, credentials=AnonymousCredentials(), client_options={"api_endpoint": f.url}
        )
        return f, GcsStorage(client)

    yield make
    for f in fronts:
        f.close()


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcs_media, "BACKOFF_FACTOR", 0.001)  # the schedule's shape is tested below, not its wait


def _billed(action: Callable[[], Any]) -> tuple[Any, int]:
    before = usage.totals()[usage.GCS_CLASS_B]
    out = action()
    return out, usage.totals()[usage.GCS_CLASS_B] - before


def test_a_503_is_retried_and_each_attempt_billed(front: Any, bucket: str) -> None:
    f, gcs = front(lambda n: "503" if n < 2 else "forward")
    data, billed = _billed(lambda: gcs.read_range(f"gs://{bucket}/obj", 8, 4))
    assert data == bytes([8, 9, 10, 11])
    assert len(f.gets) == 3 and billed == 3
    assert all("Range" not in p for p in f.gets)  # the range travels as a header, the path is the object's


def test_retries_are_bounded_then_the_status_is_raised(front: Any, bucket: str) -> None:
    from google.api_core.exceptions import ServiceUnavailable

    f, gcs = front(lambda n: "503")
    with pytest.raises(ServiceUnavailable):
        gcs.read_range(f"gs://{bucket}/obj", 0, 8)
    assert len(f.gets) == gcs_media.RETRIES + 1


def test_a_dropped_connection_is_retried_on_a_new_one(front: Any, bucket: str) -> None:
    f, gcs = front(lambda n: "drop" if n == 0 else "forward")
    assert gcs.read_range(f"gs://{bucket}/obj", 0, 3) == bytes([0, 1, 2])
    assert len(f.gets) == 2 and f.connections == 2


def test_connections_that_keep_dropping_end_in_a_storage_error(front: Any, bucket: str) -> None:
    f, gcs = front(lambda n: "drop")
    with pytest.raises(StorageError, match="after 4 retries"):
        gcs.read_range(f"gs://{bucket}/obj", 0, 3)
    assert len(f.gets) == gcs_media.RETRIES + 1


def test_an_idle_connection_the_server_closed_is_reopened_without_a_retry(front: Any, bucket: str) -> None:
    f, gcs = front(lambda n: "forward-then-close" if n == 0 else "forward")
    assert gcs.read_range(f"gs://{bucket}/obj", 0, 2) == bytes([0, 1])
    time.sleep(0.2)  # the server has closed the pooled connection by now
    data, billed = _billed(lambda: gcs.read_range(f"gs://{bucket}/obj", 2, 2))
    assert data == bytes([2, 3])
    assert billed == 1  # one attempt: the dead keep-alive was replaced, not counted as a failed request
    assert f.connections == 2


def test_connections_are_reused(front: Any, bucket: str) -> None:
    f, gcs = front(lambda n: "forward")
    for start in range(0, 40, 4):
        assert gcs.read_range(f"gs://{bucket}/obj", start, 4) == bytes(range(start, start + 4))
    assert f.connections == 1


def test_a_read_that_never_answers_times_out(front: Any, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcs_media, "READ_TIMEOUT", 0.3)
    monkeypatch.setattr(gcs_media, "RETRIES", 1)
    f, gcs = front(lambda n: "hang")
    started = time.monotonic()
    with pytest.raises(StorageError, match="timed out"):
        gcs.read_range(f"gs://{bucket}/obj", 0, 8)
    assert time.monotonic() - started < 2.5  # two attempts of 0.3 s, not a hang
    assert len(f.gets) == 2


def test_credentials_go_on_every_request_and_a_401_refreshes_them_once() -> None:
    """Without a server: the credentials object sees before_request on each attempt and one refresh on 401."""

    class Creds:
        def __init__(self) -> None:
            self.token, self.refreshes = "t0", 0

        def before_request(self, request: Any, method: str, url: str, headers: dict[str, str]) -> None:
            headers["Authorization"] = f"Bearer {self.token}"

        def refresh(self, request: Any) -> None:
            self.refreshes += 1
            self.token = f"t{self.refreshes}"

    seen: list[str] = []
    statuses = iter([401, 206])

    class Conns(gcs_media.MediaConnections):
        def _exchange(self, path: str, headers: dict[str, str], first: int, last: int) -> tuple[int, bytes, str, str]:
            seen.append(headers["Authorization"])
            return next(statuses), b"ab", "bytes 0-1/2", ""

    creds = Creds()
    conns = Conns("https://storage.example.test", creds, None, keep=4)
    resp = conns.get("/o/x?alt=media", 0, 1)
    assert (resp.status, resp.body) == (206, b"ab")
    assert seen == ["Bearer t0", "Bearer t1"] and creds.refreshes == 1


def test_the_backoff_follows_urllib3s_schedule_and_retry_after() -> None:
    backoff = gcs_media.MediaConnections._backoff
    factor = gcs_media.BACKOFF_FACTOR
    assert [backoff(a, "") for a in (1, 2, 3, 4)] == [0.0, factor * 2, factor * 4, factor * 8]
    assert backoff(2, "3") == 3.0
    assert backoff(2, "100000") == gcs_media.MAX_BACKOFF
    assert backoff(2, "Wed, 21 Oct 2026 07:28:00 GMT") == factor * 2  # a date: the schedule
