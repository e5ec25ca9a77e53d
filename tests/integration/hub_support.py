"""The stand-in Hub server (tests/servers/hub_standin.py) as the Hub tests start it: its own process group on a
free port, stopped by group, and a small client for its test controls."""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.stack import procs

TOKEN = "hf_standin_write_token"


class Standin:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
            method="POST" if body is not None else "GET",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = self.call("/__standin/stats")
        return stats

    def seed(self, repo: str, private: bool, files: dict[str, bytes], unreadable: tuple[str, ...] = ()) -> None:
        b64 = {k: base64.b64encode(v).decode() for k, v in files.items()}
        self.call("/__standin/seed", {"repo": repo, "private": private, "files": b64, "unreadable": list(unreadable)})

    def files(self, repo: str) -> dict[str, dict[str, Any]]:
        info = self.call(f"/api/models/{repo}")
        paths = [s["rfilename"] for s in info["siblings"]]
        form = urllib.parse.urlencode([("paths", p) for p in paths] + [("expand", "false")]).encode()
        req = urllib.request.Request(
            f"{self.url}/api/models/{repo}/paths-info/main",
            data=form,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-www-form-urlencoded"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return {row["path"]: row for row in json.loads(resp.read())}


def serve_standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    """The body of a module-scoped fixture: the stand-in running for the module, then stopped by group."""
    state = tmp_path_factory.mktemp("hub")
    script = Path(__file__).resolve().parents[1] / "servers" / "hub_standin.py"
    server, port = procs.start_listening(
        "hub-standin",
        lambda port: [sys.executable, str(script), "--port", str(port), "--token", TOKEN],
        lambda port: procs.http_status(f"http://127.0.0.1:{port}/__standin/stats") == 200,
        state_dir=state,
        env=dict(os.environ),
    )
    try:
        yield Standin(f"http://127.0.0.1:{port}")
    finally:
        procs.stop_group(server.pid, popen=server.popen, grace=2)
