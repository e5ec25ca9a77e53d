"""Per-trial outputs of an agentic (terminal_bench / harbor) run: `trace_jobs/<trial>/{config.json,result.json}`."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path

_TASKS = ("hello-world", "fix-permissions", "csv-to-parquet", "git-merge-conflict", "nginx-config", "sqlite-index")


def write_trace_jobs(root: Path, key: str, t0: datetime) -> None:
    for i, task in enumerate(_TASKS):
        trial = f"{task}__{hashlib.sha256(f'{key}/{task}'.encode()).hexdigest()[:7]}"
        started = t0 + timedelta(minutes=4 + 3 * i)
        finished = started + timedelta(minutes=2, seconds=17 * i)
        reward = 1.0 if i % 3 != 1 else 0.0
        out = root / trial
        out.mkdir(parents=True, exist_ok=True)
        config = {
            "trial_name": trial,
            "task": {"id": task, "dataset": "terminal-bench-core", "version": "0.1.1"},
            "agent": {"name": "terminus-2", "model": "hosted_vllm/policy", "max_turns": 40},
            "environment": {"type": "daytona", "snapshot": "tbench-base-2026-11", "target": "us"},
            "timeout_multiplier": 1.5,
        }
        result = {
            "trial_name": trial,
            "task_name": task,
            "started_at": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "finished_at": finished.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "verifier_result": {"reward": reward, "tests_passed": int(reward) * 3, "tests_total": 3},
            "exception_info": None,
        }
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
