"""Server processes, each in its own process group: start, wait until it answers, stop by group.

Every server is started with `setsid` semantics (`start_new_session=True`: the child becomes a session and
process-group leader, so its pid is its pgid) and its pid is written to `<state_dir>/<name>.pid`. Stopping sends
SIGTERM to the whole group (the Java emulators run under a shell script: killing only the script would leave the
JVM listening), waits, then SIGKILLs what is left. Never by name.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


class StackError(RuntimeError):
    """A clear, actionable reason the local stack could not start (or stop)."""


class PortTaken(StackError):
    """A server's port was free when chosen but another process holds it now (the choose-then-bind race):
    `up` starts again on fresh ports instead of trusting a probe that someone else answers."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port_free(port: int, host: str = "127.0.0.1", service: str = "") -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise StackError(
                f"port {host}:{port} for {service or 'a server'} is already in use ({exc.strerror}); "
                "stop whatever holds it (`ss -ltnp 'sport = :%d'`) or pick another port" % port
            ) from exc


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(log is empty)"


@dataclass
class Server:
    name: str
    pid: int  # == pgid (session leader)
    log: Path
    popen: subprocess.Popen[bytes] | None = None  # set only in the process that started it


def start(
    name: str,
    argv: Sequence[str],
    *,
    state_dir: Path,
    env: dict[str, str],
    cwd: Path | None = None,
    pass_fds: Sequence[int] = (),
) -> Server:
    """Start argv in a new session (own process group); stdout+stderr go to <state_dir>/<name>.log (appended:
    a restarted server's log keeps what the one before it wrote). `pass_fds`: descriptors it inherits."""
    log = state_dir / f"{name}.log"
    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )
        except FileNotFoundError as exc:
            raise StackError(f"{name}: cannot execute {argv[0]!r}: {exc.strerror}") from exc
    (state_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
    return Server(name=name, pid=proc.pid, log=log, popen=proc)


def _exited(server: Server) -> int | None:
    if server.popen is not None:
        return server.popen.poll()
    return None if group_alive(server.pid) else -1


def http_status(url: str, timeout: float = 1.0) -> int | None:
    """The HTTP status the URL answers with (any status proves the server is up), None if nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes in LISTEN state on `port` (any address, IPv4 or IPv6), from /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            # sl local_address rem_address st ... inode: local_address is HEXIP:HEXPORT, st 0A is LISTEN
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def accepts(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts a TCP connection on host:port (a readiness probe for plain TCP servers)."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def group_listens_on(pgid: int, port: int) -> bool:
    """True when a process of group `pgid` holds the listening socket on `port`. An HTTP answer alone does not
    prove the server we started is up: after a lost bind race the port is someone else's and still answers."""
    if not Path("/proc/net/tcp").exists():
        return True  # no /proc (not Linux): fall back to trusting the probe
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return False
    for pid in group_members(pgid):
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            fds = list(fd_dir.iterdir())
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(fd) in wanted:
                    return True
    return False


# How each of our servers says its bind failed: gunicorn ("Connection in use", then "Can't connect"), Java
# (BindException), Go ("bind: address already in use"), Python ("[Errno 98] Address already in use").
_BIND_FAILURES = ("address already in use", "connection in use", "bindexception", "eaddrinuse", "can't connect to")


def wait_ready(
    server: Server, probe: Callable[[], bool], timeout: float, hint: str = "", *, port: int | None = None
) -> float:
    """Poll `probe` every 50 ms until it is true (and, given `port`, until our group holds that port's
    listening socket); fail with the log tail if the server dies or is too slow. A server that died because
    its port was taken, or whose port another process answers on, raises PortTaken so the caller can retry."""
    t0 = time.monotonic()
    answered_by_other = False
    while True:
        if probe():
            if port is None or group_listens_on(server.pid, port):
                return time.monotonic() - t0
            answered_by_other = True
        code = _exited(server)
        if code is not None:
            tail = log_tail(server.log)
            if port is not None and (answered_by_other or any(m in tail.lower() for m in _BIND_FAILURES)):
                raise PortTaken(f"{server.name}: port {port} was taken before it could bind it{hint}:\n{tail}")
            raise StackError(
                f"{server.name} exited with status {code} before it was ready{hint}. Last lines of {server.log}:\n"
                + log_tail(server.log)
            )
        if time.monotonic() - t0 > timeout:
            if answered_by_other:
                raise PortTaken(f"{server.name}: another process answers on port {port}{hint}")
            raise StackError(
                f"{server.name} did not become ready within {timeout:.0f} s{hint}. Last lines of {server.log}:\n"
                + log_tail(server.log)
            )
        time.sleep(0.05)


def start_listening(
    name: str,
    argv_for: Callable[[int], Sequence[str]],
    ready: Callable[[int], bool],
    *,
    state_dir: Path,
    env: dict[str, str],
    timeout: float = 20.0,
    host: str = "127.0.0.1",
    attempts: int = 3,
) -> tuple[Server, int]:
    """Start a server on a free port and wait until `ready(port)` holds and its own group listens there;
    when the port is taken between choosing and binding it, stop it and try a fresh port (up to `attempts`)."""
    for attempt in range(1, attempts + 1):
        port = free_port(host)
        server = start(name, argv_for(port), state_dir=state_dir, env=env)
        try:
            wait_ready(server, functools.partial(ready, port), timeout, hint=f" on port {port}", port=port)
        except PortTaken:
            stop_group(server.pid, popen=server.popen, grace=2.0)
            if attempt == attempts:
                raise
            continue
        except BaseException:
            stop_group(server.pid, popen=server.popen, grace=2.0)
            raise
        return server, port
    raise AssertionError("unreachable")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is pgid (Linux /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ... — comm may contain spaces/parens: split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def group_alive(pgid: int) -> bool:
    if Path("/proc").is_dir():
        return bool(group_members(pgid))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, *, popen: subprocess.Popen[bytes] | None = None, grace: float = 8.0) -> bool:
    """SIGTERM the process group, wait up to `grace` s, then SIGKILL it. True when it had to be killed."""
    if pgid <= 1 or pgid == os.getpgrp():
        raise StackError(f"refusing to signal process group {pgid}")
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        _reap(popen)
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(popen, block=False)
        if not group_alive(pgid):
            _reap(popen)
            return False
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    _reap(popen)
    return True


def stop_groups(groups: list[tuple[int, subprocess.Popen[bytes] | None]], grace: float = 8.0) -> list[int]:
    """SIGTERM every group at once, wait for all (up to `grace` s), SIGKILL the rest. Returns the killed pgids."""
    for pgid, _ in groups:
        if pgid <= 1 or pgid == os.getpgrp():
            raise StackError(f"refusing to signal process group {pgid}")
    for pgid, _ in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    pending = list(groups)
    while pending and time.monotonic() < deadline:
        for _, popen in pending:
            _reap(popen, block=False)
        pending = [(g, p) for g, p in pending if group_alive(g)]
        if pending:
            time.sleep(0.05)
    for pgid, _ in pending:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    for _, popen in groups:
        _reap(popen)
    return [g for g, _ in pending]


def _reap(popen: subprocess.Popen[bytes] | None, block: bool = True) -> None:
    if popen is None:
        return
    if block:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=5)
    else:
        popen.poll()


def require_executable(name: str, fix: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise StackError(f"`{name}` was not found on PATH. {fix}")
    return path
