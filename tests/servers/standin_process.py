"""One stand-in server as a process of its own: started on a free port in its own process group (so the suite can
stop all of it), waited for until it answers, stopped when the `with` block ends."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rlcleanup.stack import procs

SERVERS = Path(__file__).resolve().parent


@contextmanager
def running(
    script: str, args: Callable[[int], Sequence[str]], ready: Callable[[int], bool], state_dir: Path
) -> Iterator[int]:
    """Run `tests/servers/<script> --port P <args(P)>` until the block ends; yields P once `ready(P)` holds."""
    state_dir.mkdir(parents=True, exist_ok=True)
    server, port = procs.start_listening(
        Path(script).stem,
        lambda port: [sys.executable, str(SERVERS / script), "--port", str(port), *args(port)],
        ready,
        state_dir=state_dir,
        env=dict(os.environ),
    )
    try:
        yield port
    finally:
        procs.stop_group(server.pid, popen=server.popen, grace=2)
