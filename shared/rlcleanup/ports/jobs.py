"""Starting a job that outlives the function deciding to run it: work too large for one function invocation
(docs/runtime.md "Inline or job"). Each job has a kind, its entry point and its Cloud Run job:
`hub-upload` (runtime/hub_job.py: large Hub hand-offs) and `large-copy` (runtime/copy_job.py: capture parts
whose planned copy exceeds the copy threshold, split across the execution's tasks).

apply-grant (or capture-part) starts one execution with per-grant environment overrides and returns at once; the job files its own
progress and outcome on the run. adapters/cloud_run_jobs.py implements this with the Cloud Run Admin API
(`jobs:run`), adapters/local_jobs.py runs the same entry point on this machine (the embedded and local stacks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class JobLauncher(Protocol):
    """Errors: `PermanentError` when the job cannot be started at all (no such job, no permission),
    `TransientError` when trying again later may work."""

    def start(self, env: Mapping[str, str], *, tasks: int = 1) -> str:
        """Start one execution with these environment overrides and `tasks` tasks (each told its index and the
        count: CLOUD_RUN_TASK_INDEX / CLOUD_RUN_TASK_COUNT); returns its name (for the run's record)."""
