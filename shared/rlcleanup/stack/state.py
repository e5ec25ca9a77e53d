"""What `up` records about a running stack (`state.json` in the state dir), and where its servers listen.

`down`, `status` and the tests read it back from any directory: each server's port and process group, the
buckets, and the environment a client exports to use the stack.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

HOST = "127.0.0.1"  # every server of the stack listens here only


@dataclass
class StackState:
    state_dir: str
    project: str
    stack_id: str
    ports: dict[str, int] = field(default_factory=dict)  # server name -> port
    pgids: dict[str, int] = field(default_factory=dict)  # server name -> process group id
    functions: dict[str, str] = field(default_factory=dict)  # function name -> its base URL
    buckets: dict[str, str] = field(default_factory=dict)  # role (runs, preserve) -> bucket name
    env: dict[str, str] = field(default_factory=dict)  # what a client exports to use the stack
    startup_seconds: dict[str, float] = field(default_factory=dict)
    leftovers: list[str] = field(default_factory=list)  # files a server leaves outside state_dir: `down` removes them

    @property
    def path(self) -> Path:
        return Path(self.state_dir) / "state.json"

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True))
        tmp.replace(self.path)

    @classmethod
    def load(cls, state_dir: Path) -> StackState | None:
        path = Path(state_dir) / "state.json"
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))

    def exports(self) -> str:
        return "\n".join(f"export {k}={v}" for k, v in sorted(self.env.items()))
