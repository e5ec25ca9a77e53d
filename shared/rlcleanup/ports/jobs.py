"""Starting a job that outlives the function deciding to run it (the Hub upload job for large hand-offs).

apply-grant starts one execution with per-grant environment overrides and returns at once; the job files its own
progress and outcome on the run. adapters/cloud_run_jobs.py implements this with the Cloud Run Admin API
(`jobs:run`), adapters/local_jobs.py runs the same entry point on this machine (the embedded and local stacks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class JobLauncher(Protocol):
    """Errors: `PermanentError` when the job cannot be started at all (no such job, no permission),
    `TransientError` when trying again later may work."""

    def start(self, env: Mapping[str, str]) -> str:
        """Start one execution with these environment overrides; returns its name (for the run's record)."""
