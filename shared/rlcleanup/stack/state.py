"""What `up` records about a running stack (`state.json` in the state dir), and where its servers listen.

`down`, `status` and the tests read it back from any directory: each server's port and process group, the
buckets, and the environment a client exports to use the stack.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

HOST = "127.0.0.1"  # every server of the stack listens here only

# Every variable `stack up` prints for a shell to export (`client_env` builds them; a unit test holds the two
# together): `stack down` prints `unset` for all of them, so a shell that evals it keeps no dead emulator's address
# even when the stack's state is already gone. The S3 server is one rlcleanup variable (s3_server.stack_endpoint_env),
# never the standard AWS_* ones: those stay the user's, for CoreWeave and every other S3 tool in the same shell.
# The Google emulators' *_EMULATOR_HOST names are the Google client libraries' own switch (only emulator-aware
# clients read them), and the functions and `rlcleanup emit/watch/run` reach the stack through them.
CLIENT_ENV_NAMES = (
    "FIRESTORE_EMULATOR_HOST",
    "GOOGLE_CLOUD_PROJECT",
    "PUBSUB_EMULATOR_HOST",
    "RLCLEANUP_PRESERVE_ROOT",
    "RLCLEANUP_RUNS_BUCKET",
    "RLCLEANUP_S3_ENDPOINT_STACK",
    "STORAGE_EMULATOR_HOST",
)


def client_env(project: str, ports: dict[str, int], buckets: dict[str, str], s3_env: dict[str, str]) -> dict[str, str]:
    """What a client exports to use the stack: the emulators' addresses, the project, the buckets, the S3 server's
    named endpoint (`s3_env`: s3_server.stack_endpoint_env)."""
    return {
        "PUBSUB_EMULATOR_HOST": f"{HOST}:{ports['pubsub']}",
        "FIRESTORE_EMULATOR_HOST": f"{HOST}:{ports['firestore']}",
        "STORAGE_EMULATOR_HOST": f"http://{HOST}:{ports['gcs']}",
        "GOOGLE_CLOUD_PROJECT": project,
        "RLCLEANUP_PRESERVE_ROOT": f"gs://{buckets['preserve']}",
        "RLCLEANUP_RUNS_BUCKET": buckets["watched-runs"],
        **s3_env,  # the S3 server (SeaweedFS) stands in for CoreWeave object storage
    }


def unset_line(state: StackState | None) -> str:
    """The shell line that forgets the stack's variables (`eval "$(rlcleanup stack down)"`): exactly the names this
    stack exported (its state.json), else the names `stack up` exports. Never a name it did not set: an older
    stack's AWS_* exports are in its own state.json, and unsetting AWS_* blindly would drop a user's own keys."""
    names = set(state.env) if state and state.env else set(CLIENT_ENV_NAMES)
    return "unset " + " ".join(sorted(names))


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
    stages: str | None = (
        None  # `stack up --stages MODULE:ATTR`: the development stage table served (stack/served_table.py)
    )

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

    @property
    def s3_endpoint(self) -> str:
        """The stack's S3 server (SeaweedFS), path-style on 127.0.0.1."""
        return f"http://{HOST}:{self.ports['s3']}"

    def exports(self) -> str:
        return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))


def launch_file(state_dir: Path, name: str) -> Path:
    return Path(state_dir) / f"{name}.launch.json"


def save_launch(state_dir: Path, name: str, argv: list[str], env: dict[str, str], probe: str) -> None:
    """How `up` started a server (argv, environment, readiness URL), so any later process can start it again on
    the same port (`stack restart NAME`). Owner-only: the environment is the stack's (local keys included)."""
    path = launch_file(state_dir, name)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"argv": argv, "env": env, "probe": probe}, out)
    tmp.replace(path)


def load_launch(state_dir: Path, name: str) -> tuple[list[str], dict[str, str], str] | None:
    path = launch_file(state_dir, name)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return list(data["argv"]), dict(data["env"]), str(data["probe"])
