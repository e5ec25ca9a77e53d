"""A TCP proxy that adds a fixed one-way delay to every forwarded chunk, both ways: real round trips on loopback.

Each chunk read from one side is written to the other `delay` seconds later, in order, without holding back the
chunks behind it (a pipe with latency, not a bandwidth cap). A new connection also waits one round trip (2 x delay)
before anything is forwarded: the TCP handshake a real connection pays (TLS, which real GCS adds, is not modelled).
Run: python bench/latency_proxy.py --port P --target 127.0.0.1:PORT --delay-ms 10
or, from a bench: `with latency_proxy(target_url, delay_ms) as url: ...` (own process group, stopped by group).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rlcleanup.stack import procs


class _Side(asyncio.Protocol):
    """One end of a proxied connection. What it receives reaches the other end's transport `delay` later, in order.

    Protocols and one timer per side, not streams: the proxy runs in one Python thread, and with stream readers,
    writers, a queue and a sleep per chunk its own CPU put ~0.5 ms per chunk in series, so a burst of 32 concurrent
    responses left it ~15 ms apart at +25 ms (measured: bench/RESULTS.md), a queue a real network does not add.
    Flow control is the transports' own: when the far end's buffer fills, this end stops reading."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._later(data)

    def eof_received(self) -> bool:
        self._later(b"")
        return True  # half-close: the other direction may still be sending

    def connection_lost(self, exc: Exception | None) -> None:
        self._later(None)

    def pause_writing(self) -> None:  # our transport's buffer is full: stop reading from the other end
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.transport.is_closing():
            self.peer.transport.resume_reading()

    def _later(self, data: bytes | None) -> None:
        self.pending.append((self.loop.time() + self.delay, data))
        if self.timer is None:
            self.timer = self.loop.call_at(self.pending[0][0], self._deliver)

    def _deliver(self) -> None:
        self.timer = None
        out = self.peer.transport if self.peer is not None else None
        now = self.loop.time()
        while self.pending and self.pending[0][0] <= now and out is not None:
            _, data = self.pending.popleft()
            if data is None:  # this end closed
                out.close()
            elif not data:
                if out.can_write_eof() and not out.is_closing():
                    out.write_eof()
            elif not out.is_closing():
                out.write(data)
        if self.pending and out is not None:
            self.timer = self.loop.call_at(self.pending[0][0], self._deliver)


async def _serve(port: int, host: str, target_port: int, delay: float) -> None:
    loop = asyncio.get_running_loop()

    class _Client(_Side):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            assert self.transport is not None
            self.transport.pause_reading()  # nothing is forwarded before the handshake's round trip
            self.connecting = loop.create_task(self._connect())

        async def _connect(self) -> None:
            assert self.transport is not None
            try:
                await asyncio.sleep(2 * delay)  # the handshake's round trip
                _, server = await loop.create_connection(lambda: _Side(delay), host, target_port)
            except OSError:
                self.transport.close()
                return
            self.peer, server.peer = server, self
            if self.transport.is_closing():  # the client left during the handshake
                if server.transport is not None:
                    server.transport.close()
                return
            self.transport.resume_reading()

    server = await loop.create_server(lambda: _Client(delay), "127.0.0.1", port, backlog=1024)
    print(f"latency proxy 127.0.0.1:{port} -> {host}:{target_port}, {delay * 1000:g} ms each way", flush=True)
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def latency_proxy(target_url: str, delay_ms: float) -> Iterator[str]:
    """Start the proxy in front of target_url (http://host:port) in its own session; yield its URL; stop its group."""
    with tempfile.TemporaryDirectory(prefix="latency-proxy-") as state:
        server, port = start_latency_proxy(target_url, delay_ms, Path(state))
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            procs.stop_group(server.pid, popen=server.popen)


def start_latency_proxy(target_url: str, delay_ms: float, state_dir: Path) -> tuple[procs.Server, int]:
    """The proxy started through the stack's own start (its own process group, log in state_dir, a fresh port
    when the chosen one is taken before it binds): the caller stops it with procs.stop_group(server.pid)."""
    target = target_url.removeprefix("http://").rstrip("/")

    def argv(port: int) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "--port", str(port), "--target", target,
                "--delay-ms", str(delay_ms)]  # fmt: skip

    return procs.start_listening("latency-proxy", argv, procs.accepts, state_dir=state_dir, env=dict(os.environ))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--target", required=True, help="host:port to forward to")
    ap.add_argument("--delay-ms", type=float, required=True, help="one-way delay added to every chunk")
    args = ap.parse_args()
    host, _, port = args.target.rpartition(":")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # a bench helper: nothing to flush, no teardown noise
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, host, int(port), args.delay_ms / 1000))


if __name__ == "__main__":
    main()
