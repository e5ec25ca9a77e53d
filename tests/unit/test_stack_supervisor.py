"""The stack's supervisor (stack/supervisor.py) on a stand-in server: a killed instance's port never refuses a
connection (it waits in the supervisor's socket and is served by the next instance), the dead instance is started
again by process group, a held one stays down until released, and stopping the supervisor stops its instances."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

from rlcleanup.stack import procs, supervisor
from rlcleanup.stack.local import _SUPERVISOR_MAIN

# Serves one HTTP answer per connection on the socket it inherits, as gunicorn does with GUNICORN_FD.
STAND_IN = (
    "import os, socket\n"
    "s = socket.socket(fileno=int(os.environ['GUNICORN_FD']))\n"
    "while True:\n"
    "    c, _ = s.accept(); c.recv(1024)\n"
    "    c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok'); c.close()\n"
)
SHARED = str(Path(__file__).resolve().parents[2] / "shared")


def _wait(condition, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _get(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
        return conn.recv(1024)


def test_a_killed_instance_is_replaced_behind_a_port_that_never_refuses(tmp_path: Path) -> None:
    port = procs.free_port()
    name = "fn-stand-in"
    plan = supervisor.SupervisorPlan(
        servers={
            name: supervisor.Supervised(argv=[sys.executable, "-c", STAND_IN], host="127.0.0.1", port=port, env={})
        }
    )
    (tmp_path / supervisor.PLAN_FILE).write_text(plan.model_dump_json())
    env = {**os.environ, "PYTHONPATH": SHARED}
    sup = procs.start(
        "supervisor", [sys.executable, "-c", _SUPERVISOR_MAIN, str(tmp_path)], state_dir=tmp_path, env=env
    )
    try:
        _wait(lambda: supervisor.current_pgid(tmp_path, name) is not None)
        first = supervisor.current_pgid(tmp_path, name)
        assert first is not None and _get(port).endswith(b"ok")

        os.killpg(first, signal.SIGKILL)  # a crash: the supervisor replaces it by itself
        _wait(lambda: not procs.group_alive(first))  # type: ignore[arg-type]
        assert _get(port).endswith(b"ok")  # made while it was dead or starting: served, never refused
        _wait(lambda: supervisor.restarts(tmp_path, name) == 1)
        second = supervisor.current_pgid(tmp_path, name)
        assert second not in (None, first) and procs.group_alive(second)  # type: ignore[arg-type]

        supervisor.hold_file(tmp_path, name).touch()  # an intentional stop: stays down until released
        os.killpg(second, signal.SIGKILL)  # type: ignore[arg-type]
        _wait(lambda: not procs.group_alive(second))  # type: ignore[arg-type]
        time.sleep(5 * supervisor.POLL_SECONDS)
        assert supervisor.current_pgid(tmp_path, name) == second and supervisor.restarts(tmp_path, name) == 1
        supervisor.hold_file(tmp_path, name).unlink()
        # between two instances the pid file is briefly absent (None): wait for the new instance itself
        _wait(lambda: supervisor.current_pgid(tmp_path, name) not in (None, second))
        assert _get(port).endswith(b"ok")
        third = supervisor.current_pgid(tmp_path, name)
    finally:
        procs.stop_group(sup.pid, popen=sup.popen, grace=5.0)
    assert third is not None and not procs.group_alive(third)  # stopping the supervisor stopped its instance
    assert "died; started again" in (tmp_path / "supervisor.log").read_text()
