"""Cloud Run's part on the local stack: a function's URL keeps answering while its instance is replaced.

    python -m rlcleanup.stack.supervisor <state_dir>     # started by `up`, in its own process group

Why a socket and not only a restart: while nothing listens on a push endpoint the Pub/Sub emulator retries at once
and counts every refused connection as a delivery attempt, so a 1-2 s gap between a crash and a restart on the same
port exhausts `max_delivery_attempts` and dead-letters every message queued for the function; nothing records an
outcome for those, so their runs' fan-ins wait for ever (issue 36 item 5: 10 runs `in_progress` 13 minutes after a
`kill -9` of capture-part and a restart 6.5 s later). So the supervisor binds every function's port itself, once,
and hands the listening socket to each instance it starts (gunicorn's `GUNICORN_FD`). A connection made while no
instance runs waits in the socket's backlog until the next instance accepts it, as Cloud Run's front end holds a
request while it starts an instance; only the deliveries the dead instance had accepted fail (and are redelivered).

Every `POLL_SECONDS` it looks at each instance's process group; one with no live member is started again at once
(the restart is logged to `supervisor.log` and counted in `<name>.restarts`). Processes are found and signalled by
process group only (`<name>.pid` holds the instance's pgid), never by name. An intentional stop writes
`<name>.hold` first (`stack.local.kill_server`): a held function stays down until `start_server` removes the
hold, with `<name>.env.json` over its environment. SIGTERM stops every instance's group, then the supervisor.

The plan (`supervisor.json`: argv, port and environment per function) is written by `up`; the instances inherit the
supervisor's own environment (the stack's marker included) with their function's variables on top.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from pathlib import Path
from types import FrameType

from pydantic import BaseModel, ConfigDict

from rlcleanup.stack import procs

POLL_SECONDS = 0.2  # a dead instance is started again within this (plus its start-up, ~1-2 s)
BACKLOG = 1024  # connections the socket holds while no instance accepts (the emulator pushes ~1 per message)
PLAN_FILE = "supervisor.json"


class Supervised(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    argv: list[str]
    host: str
    port: int
    env: dict[str, str]  # the function's own variables, over the supervisor's environment


class SupervisorPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    servers: dict[str, Supervised]  # server name (fn-<function>) -> how to start it


def hold_file(state_dir: Path, name: str) -> Path:
    return state_dir / f"{name}.hold"


def env_file(state_dir: Path, name: str) -> Path:
    return state_dir / f"{name}.env.json"


def pid_file(state_dir: Path, name: str) -> Path:
    return state_dir / f"{name}.pid"


def restarts(state_dir: Path, name: str) -> int:
    """How many times the supervisor started `name` again after its instance died (held stops not counted)."""
    try:
        return int((state_dir / f"{name}.restarts").read_text())
    except (OSError, ValueError):
        return 0


def current_pgid(state_dir: Path, name: str) -> int | None:
    """The process group of `name`'s instance as the supervisor last wrote it."""
    try:
        return int(pid_file(state_dir, name).read_text().strip())
    except (OSError, ValueError):
        return None


def listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


class Supervisor:
    def __init__(self, state_dir: Path, plan: SupervisorPlan) -> None:
        self.state_dir = state_dir
        self.plan = plan
        self.sockets = {name: listen(s.host, s.port) for name, s in plan.servers.items()}
        self.instances: dict[str, procs.Server] = {}
        self.stopping = False

    def _log(self, line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} supervisor: {line}", flush=True)

    def start(self, name: str) -> procs.Server:
        spec = self.plan.servers[name]
        extra: dict[str, str] = {}
        with contextlib.suppress(OSError, ValueError):
            extra = json.loads(env_file(self.state_dir, name).read_text())
        fd = self.sockets[name].fileno()
        # gunicorn takes an inherited listener from GUNICORN_FD when GUNICORN_PID is set (its re-exec path); the
        # instance then finds its "master" is not its parent and carries on as a master of its own.
        env = {**os.environ, **spec.env, **extra, "GUNICORN_FD": str(fd), "GUNICORN_PID": str(os.getpid())}
        server = procs.start(name, spec.argv, state_dir=self.state_dir, env=env, cwd=self.state_dir, pass_fds=(fd,))
        self.instances[name] = server
        return server

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def run(self) -> None:
        for name in self.plan.servers:
            self.start(name)
        self._log(f"serving {len(self.plan.servers)} functions")
        while not self.stopping:
            for name, server in list(self.instances.items()):
                if self.stopping:
                    break
                if server.popen is not None:
                    server.popen.poll()  # reap a dead instance, so its group reads as gone
                if procs.group_alive(server.pid) or hold_file(self.state_dir, name).exists():
                    continue
                new = self.start(name)
                count = restarts(self.state_dir, name) + 1
                # Replaced whole (a reader never sees the truncated file: `restarts` would read it as 0).
                counted = self.state_dir / f"{name}.restarts.tmp"
                counted.write_text(f"{count}\n")
                os.replace(counted, self.state_dir / f"{name}.restarts")
                self._log(f"{name}: process group {server.pid} died; started again as {new.pid} (restart {count})")
            time.sleep(POLL_SECONDS)
        groups = [(s.pid, s.popen) for s in self.instances.values() if procs.group_alive(s.pid)]
        procs.stop_groups(groups, grace=5.0)
        self._log("stopped")


def main(argv: list[str]) -> int:
    state_dir = Path(argv[1]).resolve()
    plan = SupervisorPlan.model_validate_json((state_dir / PLAN_FILE).read_text())
    supervisor = Supervisor(state_dir, plan)
    signal.signal(signal.SIGTERM, supervisor.stop)
    signal.signal(signal.SIGINT, supervisor.stop)
    supervisor.run()
    return 0
