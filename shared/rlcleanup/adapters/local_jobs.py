"""The job-launcher port on one machine: the job's entry point as a child process in its own process group.

Used by the embedded stack and the local emulator stack (RLCLEANUP_HUB_UPLOAD_JOB=local) in place of Cloud Run:
the same `python -m rlcleanup.runtime.<kind>_job` the Cloud Run job runs, with the same environment overrides, and
one child per task told its index and the count as Cloud Run tells a task (CLOUD_RUN_TASK_INDEX/_COUNT). The
child gets its own session (a signal to the caller's group, e.g. Ctrl-C on `rlcleanup grant`, does not stop an
upload), its output goes to a log file named in the execution, and a reaper thread waits for it so no zombie
is left while the caller lives. `wait=True` (the embedded stack, which has no redelivery to come back later)
returns only when every task has exited, as an execution's completion.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlcleanup.errors import TransientError


class SubprocessJobLauncher:
    def __init__(
        self,
        module: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_dir: str | Path | None = None,
        *,
        wait: bool = False,
    ) -> None:
        self.module, self.args = module, list(args)
        self.env = dict(env) if env is not None else None  # None: this process's environment
        self.log_dir = Path(log_dir or tempfile.gettempdir())
        self.wait = wait
        self.started: list[subprocess.Popen[bytes]] = []  # this process's executions (tests wait on them)

    def start(self, env: Mapping[str, str], *, tasks: int = 1) -> str:
        count = {"CLOUD_RUN_TASK_COUNT": str(tasks)}
        names = [self._start_task({**env, **count, "CLOUD_RUN_TASK_INDEX": str(i)}) for i in range(tasks)]
        if self.wait:
            for popen in self.started[-tasks:]:
                popen.wait()
        return names[0] if tasks == 1 else f"{tasks} tasks: " + "; ".join(names)

    def _start_task(self, env: Mapping[str, str]) -> str:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fd, log_path = tempfile.mkstemp(prefix="rlcleanup-job-", suffix=".log", dir=self.log_dir)
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", self.module, *self.args],
                env={**(self.env if self.env is not None else os.environ), **env},
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped by its pgid, never by name
            )
        except OSError as exc:
            raise TransientError(f"could not start {self.module}: {exc}") from exc
        finally:
            os.close(fd)
        self.started.append(popen)
        threading.Thread(target=popen.wait, name=f"reap-{popen.pid}", daemon=True).start()
        return f"local pid {popen.pid} (pgid {popen.pid}, log {log_path})"
