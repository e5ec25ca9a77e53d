"""A plain HTTP forward proxy that stands in for DNS: it sends every request for `<anything>.<domain>:<port>` (and
`<domain>:<port>`) to 127.0.0.1:<port>, unchanged, so an S3 client with a hostname endpoint in virtual-hosted style
(`http://<bucket>.<domain>:<port>/<key>`) reaches a local S3 server that knows `<domain>` (SeaweedFS
`-s3.domainName`), without touching the machine's resolver. Clients use it through the standard `HTTP_PROXY`
variable, as they would a corporate proxy; nothing in rlcleanup knows about it.

It reads each request's head to choose where it goes (absolute-form `GET http://host:port/path HTTP/1.1`, RFC 9112
§3.2.2), then pipes bytes both ways. A request for any other host is answered 502, so a test cannot pass by
reaching something it did not mean to.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class VhostProxy:
    domain: str
    port: int = 0
    requests: list[str] = field(default_factory=list)  # "METHOD host path" of every request it forwarded

    def target(self, url: str) -> tuple[str, int] | None:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme != "http" or parts.port is None:
            return None
        if host != self.domain and not host.endswith("." + self.domain):
            return None
        return "127.0.0.1", parts.port

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, url, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
                where = self.target(url)
                if where is None:
                    writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    await writer.drain()
                    return
                parts = urlsplit(url)
                self.requests.append(f"{method} {parts.hostname} {parts.path}")
                if upstream is None:
                    upstream = await asyncio.open_connection(*where)
                    asyncio.get_running_loop().create_task(_pipe(upstream[0], writer))
                length = _content_length(head)
                upstream[1].write(head)
                if length:
                    upstream[1].write(await reader.readexactly(length))
                await upstream[1].drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            if upstream is not None:
                upstream[1].close()
            writer.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[VhostProxy]:
        loop = asyncio.new_event_loop()
        started = threading.Event()
        server_box: list[asyncio.base_events.Server] = []

        async def serve() -> None:
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            server_box.append(server)
            started.set()

        thread = threading.Thread(target=lambda: (loop.run_until_complete(serve()), loop.run_forever()), daemon=True)
        thread.start()
        started.wait(10)
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(server_box[0].close)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
        if name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            raise ValueError("chunked request bodies are not forwarded by this stand-in")
    return 0


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    dst.close()
