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
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rlcleanup.stack import procs

_CHUNK = 256 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    try:
        while data := await reader.read(_CHUNK):
            queue.put_nowait((loop.time() + delay, data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((loop.time() + delay, b""))
    with contextlib.suppress(ConnectionError, OSError):
        await sender


async def _serve(port: int, host: str, target_port: int, delay: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            await asyncio.sleep(2 * delay)  # the handshake's round trip
            server_r, server_w = await asyncio.open_connection(host, target_port)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(_pipe(client_r, server_w, delay), _pipe(server_r, client_w, delay))
        finally:
            for w in (client_w, server_w):
                w.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await w.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
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
