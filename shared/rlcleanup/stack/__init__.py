"""Local stack on real servers (emulators + functions-framework), started and stopped by process group."""

from rlcleanup.stack.local import (
    DEFAULT_PROJECT,
    DEFAULT_STATE_DIR,
    down,
    kill_server,
    reset_firestore,
    restart_function,
    start_server,
    status,
    up,
)
from rlcleanup.stack.procs import StackError
from rlcleanup.stack.state import StackState

__all__ = [
    "DEFAULT_PROJECT",
    "DEFAULT_STATE_DIR",
    "StackError",
    "StackState",
    "down",
    "kill_server",
    "reset_firestore",
    "restart_function",
    "start_server",
    "status",
    "up",
]
