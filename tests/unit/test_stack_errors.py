"""The local stack's failure messages: missing tools name the fix, taken ports and slow/dead servers are explained."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from rlcleanup.stack import StackError, StackState, local, procs, tools


def test_missing_gcloud_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLOUDSDK_ROOT_DIR", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match=r"gcloud.*apt-get install google-cloud-cli"):
        tools.sdk_root()


def test_missing_java_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match=r"java.*openjdk-17"):
        tools.emulator_scripts()


def test_missing_emulator_component(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLOUDSDK_ROOT_DIR", str(tmp_path))  # an SDK without the emulator components
    monkeypatch.setattr(procs, "require_executable", lambda name, fix: name)  # java "found"
    with pytest.raises(StackError, match="pubsub-emulator"):
        tools.emulator_scripts()


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


# --- the choose-then-bind race: a port free when chosen may be someone else's by the time the server binds it.

_HTTP_SERVER = (
    "import http.server, sys; "
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()"
)


def _start_http(tmp_path: Path, name: str) -> tuple[procs.Server, int]:
    """A plain HTTP server started the stack's way (own group, fresh port, bind checked)."""
    return procs.start_listening(
        name,
        lambda port: [sys.executable, "-c", _HTTP_SERVER, str(port)],
        lambda port: procs.http_status(f"http://127.0.0.1:{port}/") is not None,
        state_dir=tmp_path,
        env={},
    )


def _answering_elsewhere(tmp_path: Path) -> tuple[procs.Server, int]:
    """Another process (not the server under test) that holds a port and answers HTTP on it."""
    return _start_http(tmp_path, "other")


def test_a_listener_is_ours_only_when_our_group_holds_it(tmp_path: Path) -> None:
    other, port = _answering_elsewhere(tmp_path)
    try:
        assert procs.group_listens_on(other.pid, port)
        assert not procs.group_listens_on(other.pid, procs.free_port())  # nothing listens there
        mine = procs.start("idle", [sys.executable, "-c", "import time; time.sleep(30)"], state_dir=tmp_path, env={})
        try:
            assert not procs.group_listens_on(mine.pid, port)  # the port answers, but not through our group
        finally:
            procs.stop_group(mine.pid, popen=mine.popen, grace=1)
    finally:
        procs.stop_group(other.pid, popen=other.popen, grace=1)


def test_a_server_that_loses_the_bind_race_is_port_taken_not_ready(tmp_path: Path) -> None:
    """The probe is answered (by the other process), yet the server under test died on its bind: before this
    check the stack called it ready and every push to that function went nowhere."""
    other, port = _answering_elsewhere(tmp_path)
    try:
        loser = procs.start("loser", [sys.executable, "-c", _HTTP_SERVER, str(port)], state_dir=tmp_path, env={})
        with pytest.raises(procs.PortTaken, match=f"loser: port {port} was taken"):
            procs.wait_ready(loser, lambda: procs.http_status(f"http://127.0.0.1:{port}/") is not None, 20, port=port)
    finally:
        procs.stop_group(other.pid, popen=other.popen, grace=1)


def test_a_server_that_never_binds_while_another_answers_is_port_taken(tmp_path: Path) -> None:
    other, port = _answering_elsewhere(tmp_path)
    try:
        idle = procs.start("idle", [sys.executable, "-c", "import time; time.sleep(30)"], state_dir=tmp_path, env={})
        try:
            with pytest.raises(procs.PortTaken, match=f"another process answers on port {port}"):
                procs.wait_ready(idle, lambda: True, 0.5, port=port)
        finally:
            procs.stop_group(idle.pid, popen=idle.popen, grace=1)
    finally:
        procs.stop_group(other.pid, popen=other.popen, grace=1)


def test_start_listening_moves_to_a_fresh_port_after_losing_the_race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other, taken = _answering_elsewhere(tmp_path)
    real_free_port = procs.free_port
    offered = iter([taken])  # the first "free" port is the taken one, as in the race
    monkeypatch.setattr(procs, "free_port", lambda host="127.0.0.1": next(offered, None) or real_free_port(host))
    try:
        server, port = _start_http(tmp_path, "web")
        try:
            assert port != taken
            assert procs.group_listens_on(server.pid, port)
        finally:
            procs.stop_group(server.pid, popen=server.popen, grace=1)
    finally:
        procs.stop_group(other.pid, popen=other.popen, grace=1)


def test_up_starts_again_on_fresh_ports_when_one_was_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def once(*args: object, **kwargs: object) -> StackState:
        calls.append(1)
        if len(calls) == 1:
            raise procs.PortTaken("fn-x: port 1 was taken before it could bind it")
        return StackState(state_dir=str(tmp_path), project="p", stack_id="s")

    monkeypatch.setattr(local, "_up_once", once)
    assert local.up(tmp_path).stack_id == "s"
    assert len(calls) == 2
    calls.clear()
    monkeypatch.setattr(local, "_up_once", lambda *a, **k: (_ for _ in ()).throw(procs.PortTaken("gcs: taken")))
    with pytest.raises(StackError, match="ports kept being taken while the stack started \\(3 tries\\)"):
        local.up(tmp_path)
