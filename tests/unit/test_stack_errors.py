"""The local stack's failure messages: missing tools name the fix, taken ports and slow/dead servers are explained."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from rlcleanup.stack import StackError, local, procs


def test_missing_gcloud_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLOUDSDK_ROOT_DIR", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match=r"gcloud.*apt-get install google-cloud-cli"):
        local.sdk_root()


def test_missing_java_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match=r"java.*openjdk-17"):
        local.emulator_scripts()


def test_missing_emulator_component(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLOUDSDK_ROOT_DIR", str(tmp_path))  # an SDK without the emulator components
    monkeypatch.setattr(procs, "require_executable", lambda name, fix: name)  # java "found"
    with pytest.raises(StackError, match="pubsub-emulator"):
        local.emulator_scripts()


def test_taken_port_is_reported_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(StackError, match=f"port 127.0.0.1:{port} for pubsub is already in use"):
            local.up(tmp_path, ports={"pubsub": port})
    assert not (tmp_path / "state.json").exists()


def test_server_that_exits_shows_its_log_tail(tmp_path: Path) -> None:
    server = procs.start(
        "broken",
        [sys.executable, "-c", "print('BindException: port taken'); raise SystemExit(3)"],
        state_dir=tmp_path,
        env={},
    )
    with pytest.raises(StackError, match=r"(?s)broken exited with status 3.*BindException: port taken"):
        procs.wait_ready(server, lambda: False, timeout=20)


def test_server_not_ready_in_time_shows_its_log_tail_and_stops_by_group(tmp_path: Path) -> None:
    code = "import subprocess, sys, time; print('starting slowly', flush=True); subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    server = procs.start("slow", [sys.executable, "-c", code], state_dir=tmp_path, env={})
    try:
        with pytest.raises(StackError, match=r"(?s)slow did not become ready within 1 s.*starting slowly"):
            procs.wait_ready(server, lambda: False, timeout=1.0)
        assert len(procs.group_members(server.pid)) == 2  # the server and its child share the process group
    finally:
        procs.stop_groups([(server.pid, server.popen)], grace=5)
    assert procs.group_members(server.pid) == []  # the child went with the group
