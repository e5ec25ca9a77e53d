"""Start the stand-in webhook and SMTP relay (this directory) on a free port, each in its own process group, and read
what they received."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlcleanup.stack.procs import http_status
from servers.standin_process import running


@contextmanager
def webhook_standin(state_dir: Path) -> Iterator[str]:
    """The stand-in's base URL (http://127.0.0.1:<port>)."""

    def answers(port: int) -> bool:
        return http_status(f"http://127.0.0.1:{port}/__standin/messages") == 200

    with running("webhook_standin.py", lambda port: [], answers, state_dir) as port:
        yield f"http://127.0.0.1:{port}"


@contextmanager
def smtp_standin(state_dir: Path, fail: int = 0) -> Iterator[tuple[int, Path]]:
    """The relay's port and the JSON-lines file it appends each accepted message to."""
    state_dir.mkdir(parents=True, exist_ok=True)
    out = state_dir / "mail.jsonl"
    out.touch()
    with running("smtp_standin.py", lambda port: ["--out", str(out), "--fail", str(fail)], _answers, state_dir) as port:
        yield port, out


def _answers(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            return conn.recv(64).startswith(b"220")
    except OSError:
        return False


def mails(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def messages(base: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{base}/__standin/messages", timeout=5) as resp:
        found: list[dict[str, Any]] = json.loads(resp.read())
        return found


def control(base: str, status: int, times: int, *, reset: bool = False) -> None:
    body = json.dumps({"status": status, "times": times, "reset": reset}).encode()
    req = urllib.request.Request(f"{base}/__standin/control", data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=5).close()


def wait_messages(base: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    found = messages(base)
    while len(found) < count and time.monotonic() < deadline:
        time.sleep(0.2)
        found = messages(base)
    return found
