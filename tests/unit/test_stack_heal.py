"""`stack status` probes each server instead of remembering, and `stack restart NAME` restarts one server of a running
stack from any process (issue 48 item 2: after the Firestore emulator was restarted, `stack status` said `stopped`
while it served, and nothing but a whole new stack could bring one server back).

The server is a real HTTP server process (python's http.server) in its own process group, carrying the stack's
marker, launched the way `stack up` launches one (its launch kept in the state dir)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import invoke

from rlcleanup.stack import procs
from rlcleanup.stack.local import MARKER_VAR
from rlcleanup.stack.state import HOST, StackState, save_launch


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[StackState]:
    """A recorded stack of one server, `s3`, answering on its port (any HTTP answer is ready for it)."""
    stack_id = uuid.uuid4().hex
    port = procs.free_port(HOST)
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", HOST]
    env = {**os.environ, MARKER_VAR: stack_id}
    probe = f"http://{HOST}:{port}/"
    save_launch(tmp_path, "s3", argv, env, probe)
    server = procs.start("s3", argv, state_dir=tmp_path, env=env)
    state = StackState(str(tmp_path), "p", stack_id, ports={"s3": port}, pgids={"s3": server.pid})
    state.save()
    procs.wait_ready(server, lambda: procs.http_status(probe) is not None, 30, port=port)
    try:
        yield state
    finally:
        for pgid in {server.pid, (StackState.load(tmp_path) or state).pgids["s3"]}:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        if server.popen is not None:
            server.popen.wait(timeout=10)


def _until_silent(port: int) -> None:
    deadline = time.monotonic() + 10
    while procs.http_status(f"http://{HOST}:{port}/", timeout=0.2) is not None:
        assert time.monotonic() < deadline, f"port {port} still answers after SIGKILL"
        time.sleep(0.05)


def _status(state: StackState) -> dict[str, str]:
    code, out, err = invoke("stack", "status", "--state-dir", state.state_dir, "--json")
    assert code == 0, err
    servers: dict[str, str] = json.loads(out)["servers"]
    return servers


def test_status_probes_a_server_restarted_outside_the_stack(stack: StackState) -> None:
    assert _status(stack) == {"s3": "running"}
    os.killpg(stack.pgids["s3"], signal.SIGKILL)
    _until_silent(stack.ports["s3"])
    assert _status(stack) == {"s3": "stopped"}
    # Started again by hand on its port (as the driver restarted the emulator): not the group recorded.
    port = stack.ports["s3"]
    again = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", HOST],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        server = procs.Server(name="by-hand", pid=again.pid, log=Path(os.devnull), popen=again)
        procs.wait_ready(server, lambda: procs.http_status(f"http://{HOST}:{port}/") is not None, 30, port=port)
        assert _status(stack) == {"s3": "running"}  # it serves: said so, though the stack did not start it
    finally:
        os.killpg(again.pid, signal.SIGKILL)
        again.wait(timeout=10)


def test_restart_one_server_from_another_process_on_its_port(stack: StackState) -> None:
    before = stack.pgids["s3"]
    code, out, err = invoke("stack", "restart", "s3", "--state-dir", stack.state_dir, "--timeout", "30")
    assert code == 0, err
    assert out.startswith("restarted s3: answering again after")
    after = StackState.load(Path(stack.state_dir))
    assert after is not None and after.pgids["s3"] != before and not procs.group_alive(before)
    assert procs.http_status(f"http://{HOST}:{stack.ports['s3']}/") is not None  # the same port
    assert _status(stack) == {"s3": "running"}
    os.killpg(after.pgids["s3"], signal.SIGKILL)  # a crashed server: restart starts it without stopping anything
    code, out, err = invoke("stack", "restart", "s3", "--state-dir", stack.state_dir, "--timeout", "30")
    assert code == 0 and "restarted s3" in out, err


def test_restart_names_the_servers_it_knows(stack: StackState) -> None:
    code, _, err = invoke("stack", "restart", "firestor", "--state-dir", stack.state_dir)
    assert code == 3 and "no server 'firestor' in the stack; servers: s3" in err
