"""Heal one server of a running stack (`rlcleanup stack restart NAME`), from any process.

`stack up` keeps how it started each server (`<name>.launch.json` in the state dir, stack/state.py), so a server
can be stopped and started again on the same port by a later command: push subscriptions and clients keep
reaching it. An emulator keeps its state in memory, so a restarted Pub/Sub or fake-gcs-server is provisioned again
from the topology (topics, subscriptions, buckets: stack/provision.py); a restarted Firestore emulator comes back
empty, which the pipeline notices (docs/runtime.md "Record store outage": `rlcleanup recover RUN_ID`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from rlcleanup.paths import stack_dir
from rlcleanup.stack.local import SUPERVISOR, _owned, _pgid, kill_server, start_server
from rlcleanup.stack.procs import StackError
from rlcleanup.stack.provision import provision
from rlcleanup.stack.served_table import served_topology
from rlcleanup.stack.state import StackState

PROVISIONED = ("pubsub", "gcs")  # in-memory servers that hold what provisioning made
EMPTY_AFTER = {
    "firestore": "the Firestore emulator came back empty: runs in flight find their records gone and are recorded "
    "record_store_lost; re-drive each with `rlcleanup recover RUN_ID` (or let the sweep do it)",
    "pubsub": "the Pub/Sub emulator came back empty: topics and subscriptions were provisioned again; messages "
    "that were queued in it are gone",
    "gcs": "fake-gcs-server came back empty (memory backend): its buckets were created again; objects are gone",
}


@dataclass(frozen=True)
class Restarted:
    name: str
    seconds: float  # until it answered again
    note: str | None  # what a restart of this server lost, when it keeps its state in memory


def server_name(state: StackState, name: str) -> str:
    """The state's name for `name`: a server's own (`firestore`, `fn-capture-part`) or a function's
    (`capture-part`)."""
    for candidate in (name, f"fn-{name}"):
        if candidate in state.pgids:
            return candidate
    raise StackError(f"no server {name!r} in the stack; servers: {', '.join(sorted(state.pgids))}")


def restart(state_dir: Path | None, name: str, *, timeout: float = 90.0) -> Restarted:
    """Stop one server (SIGTERM, then SIGKILL) if it runs, start it again on its port, wait until it answers."""
    where = Path(state_dir or stack_dir()).resolve()
    state = StackState.load(where)
    if state is None:
        raise StackError(f"no stack recorded in {where} (start one with `rlcleanup stack up`)")
    server = server_name(state, name)
    if server == SUPERVISOR:
        raise StackError(
            "the supervisor holds every function's port: restart a function by its name, or the whole stack "
            "(`rlcleanup stack down`, then `stack up`)"
        )
    if _owned(_pgid(state, server), state.stack_id):
        kill_server(state, server, signal.SIGTERM)
        if _owned(_pgid(state, server), state.stack_id):
            kill_server(state, server, signal.SIGKILL)
    seconds = start_server(state, server, timeout=timeout)
    if server in PROVISIONED:
        topology = served_topology(state.stages)  # the stack's own (a development stage table's, if it has one)
        provision(state, topology, [topology.function(fn) for fn in state.functions])
    return Restarted(server, round(seconds, 2), EMPTY_AFTER.get(server))
