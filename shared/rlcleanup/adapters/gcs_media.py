"""Ranged media GETs on GCS (validation's shard headers) over bare `http.client` connections, reused LIFO.

Why not the urllib3 pool that serves GcsStorage's other lean requests: a header round is 30+ GETs whose client
CPU lies in series on the round's critical path (sends before the round trip, responses after it, one GIL), and
urllib3's layers (URL parsing on every call, Retry and Timeout objects, header dicts, the response wrapper) cost
~0.69 ms of client CPU per ranged GET against fake-gcs-server where http.client alone costs ~0.29 ms
(bench/RESULTS.md, "Validation of many 70B exports"). The request is one GET with a Range header and its
semantics are kept as the urllib3 path had them:
- timeouts: 20 s to connect, then 60 s per socket read;
- retries: up to 4, on connection errors and on 408/429/500/502/503/504 (the statuses google-cloud-storage's
  DEFAULT_RETRY retries), backing off 0 s, then 0.4 s, 0.8 s, 1.6 s (urllib3's backoff with factor 0.2), or the
  server's Retry-After when it gives one in seconds (capped at 120 s);
- a connection that the server closed while idle is reopened for the same attempt (keep-alive races);
- credentials go on every request (`before_request`, which refreshes an expired token); a 401 refreshes them
  once and retries;
- a response not read to its end is never handed back: the connection is closed instead.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from rlcleanup.ports import usage

CONNECT_TIMEOUT = 20.0
READ_TIMEOUT = 60.0
RETRIES = 4
BACKOFF_FACTOR = 0.2
MAX_BACKOFF = 120.0
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})  # the ones google-cloud-storage's DEFAULT_RETRY retries
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


@dataclass(frozen=True)
class MediaResponse:
    status: int
    body: bytes
    content_range: str


class MediaError(Exception):
    """No usable answer after the retries (connection refused, reset, timed out): the message says which."""


class MediaConnections:
    """Idle connections to one endpoint (at most `keep` kept) and the ranged GET that borrows one."""

    def __init__(self, endpoint: str, credentials: Any, auth_request: Any, keep: int) -> None:
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"not an http(s) endpoint: {endpoint!r}")
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port or (443 if self.https else 80)
        self.base_path = parts.path.rstrip("/")
        self.credentials, self.auth_request, self.keep = credentials, auth_request, keep
        self._tls = ssl.create_default_context() if self.https else None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._warming = 0

    # ---------------------------------------------------------------- connections

    def _new(self) -> http.client.HTTPConnection:
        if self._tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=CONNECT_TIMEOUT, context=self._tls)
        return http.client.HTTPConnection(self.host, self.port, timeout=CONNECT_TIMEOUT)

    def _open(self) -> http.client.HTTPConnection:
        conn = self._new()
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(READ_TIMEOUT)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """(a connection, whether it was idle in the pool: then the server may have closed it meanwhile)."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._open(), False

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(conn)
                return
        conn.close()

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def warm(self, n: int, submit: Any) -> None:
        """Open connections in the background (`submit` runs a callable elsewhere) until `n` are idle or opening."""
        with self._lock:
            missing = max(0, min(n, self.keep) - len(self._idle) - self._warming)
            self._warming += missing
        for _ in range(missing):
            submit(self._warm_one)

    def _warm_one(self) -> None:
        try:
            conn: http.client.HTTPConnection | None = self._open()
        except OSError:  # a warm-up only: the read that needs a connection opens (and reports failures) itself
            conn = None
        with self._lock:
            self._warming -= 1
        if conn is not None:
            self._give(conn)

    # ---------------------------------------------------------------- the request

    def get(self, path: str, first: int, last: int) -> MediaResponse:
        """GET base_path + path with `Range: bytes=first-last`. Reads at most last - first + 1 body bytes of a
        206, last + 1 of a 200 (a server that ignored the range), 4 KiB of an error; retried as the module says."""
        url = f"{'https' if self.https else 'http'}://{self.host}:{self.port}{self.base_path}{path}"
        refreshed = False
        failure = retry_after = ""
        for attempt in range(RETRIES + 1):
            if attempt:
                time.sleep(self._backoff(attempt, retry_after))
            headers = {"Range": f"bytes={first}-{last}"}
            self.credentials.before_request(self.auth_request, "GET", url, headers)
            usage.count(usage.GCS_CLASS_B)  # every attempt is a billed request
            try:
                status, body, content_range, retry_after = self._exchange(path, headers, first, last)
            except (OSError, http.client.HTTPException) as exc:
                failure, retry_after = f"{type(exc).__name__}: {exc}", ""
                continue
            if status == 401 and not refreshed:
                refreshed, failure, retry_after = True, "", ""
                try:
                    self.credentials.refresh(self.auth_request)
                except Exception:  # e.g. anonymous credentials (an emulator): the 401 is the answer
                    return MediaResponse(status, body, content_range)
                continue
            if status in RETRY_STATUSES and attempt < RETRIES:
                failure = f"HTTP {status}"
                continue
            return MediaResponse(status, body, content_range)
        raise MediaError(f"GET {url} bytes {first}-{last}: {failure} after {RETRIES} retries")

    def _exchange(self, path: str, headers: dict[str, str], first: int, last: int) -> tuple[int, bytes, str, str]:
        def send(conn: http.client.HTTPConnection) -> http.client.HTTPResponse:
            conn.request("GET", self.base_path + path, headers=headers)
            return conn.getresponse()

        conn, was_idle = self._take()
        try:
            try:
                resp = send(conn)
            except _STALE:
                if not was_idle:
                    raise
                conn.close()  # the server closed it while it sat idle: this attempt gets a fresh one
                conn = self._open()
                resp = send(conn)
            status = resp.status
            limit = last - first + 1 if status == 206 else last + 1 if status == 200 else 4096
            body = resp.read(limit)
            drained = not resp.read(1)
            content_range = resp.getheader("Content-Range", "") or ""
            retry_after = resp.getheader("Retry-After", "") or ""
        except BaseException:
            conn.close()
            raise
        if drained and not resp.will_close:
            self._give(conn)
        else:  # never hand a half-read connection back (nor one the server said it will close)
            conn.close()
        return status, body, content_range, retry_after

    @staticmethod
    def _backoff(attempt: int, retry_after: str) -> float:
        """The wait before `attempt` (1 = the first retry): the server's Retry-After in seconds, else urllib3's."""
        if retry_after.isdigit():
            return min(float(retry_after), MAX_BACKOFF)
        return 0.0 if attempt <= 1 else min(BACKOFF_FACTOR * 2 ** (attempt - 1), MAX_BACKOFF)
