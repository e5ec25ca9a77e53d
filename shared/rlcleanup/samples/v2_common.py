"""What every v2 sample run writes the same way (split from samples/v2.py): Marin's durable and temp roots per step
(run-layout-v2.md §3), executor status files, the checkpoint marker, a chain of attempts rendered into logs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rlcleanup.samples.chain import Link, LinkLogs, RunCtx, hexid, render_link
from rlcleanup.samples.curves import reward_curve

VERSION = "2026.11.30"
BUCKET = "marin-us-central2"
T0 = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
RUNTIME = {"commit": hexid("marinskyrl", n=40), "profile": "fsdp"}


def dump_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class MarinStep:
    name: str
    r: Path
    t: Path

    @property
    def run_id(self) -> str:
        return f"{self.name}-{VERSION}"


def marin_step(dest: Path, name: str) -> MarinStep:
    bucket = dest / BUCKET
    return MarinStep(name, bucket / name / VERSION, bucket / "tmp" / "ttl=14d" / "skyrl" / name / VERSION)


def run_ctx(budget: int, ckpt_root: Path, export_root: Path, *, hf_interval: int, interval: int = 5) -> RunCtx:
    return RunCtx(
        budget=budget,
        interval=interval,
        hf_interval=hf_interval,
        ckpt_dir=lambda s: str(ckpt_root / f"global_step_{s}"),
        export_dir=lambda s: str(export_root / f"global_step_{s}" / "policy"),
        reward=lambda s, stream: reward_curve(s, stream, "rise"),
    )


def render_links(ctx: RunCtx, links: list[Link], key: str) -> list[LinkLogs]:
    out: list[LinkLogs] = []
    start = T0
    for i, link in enumerate(links):
        logs = render_link(ctx, link, start, pid=4100 + 37 * i, run_key=f"{key}/{i}")
        out.append(logs)
        start = logs.ended + timedelta(minutes=7)
    return out


def write_logs(attempts_root: Path, aid: str, logs: LinkLogs, banner: list[str]) -> None:
    log_dir = attempts_root / aid / "logs"
    write_lines(log_dir / "finelog.log", banner + logs.driver)
    for name, lines in logs.workers.items():
        write_lines(log_dir / "ray_session_logs" / name, lines)


def executor_files(step: MarinStep, status: str, fn: str, *, deps: list[str] | None = None, result: Any = None) -> None:
    step.r.mkdir(parents=True, exist_ok=True)
    (step.r / ".executor_status").write_text(status + "\n")
    dump_json(
        step.r / ".executor_info",
        {"executor_version": "step_runner", "name": step.name, "version": VERSION, "output_path": str(step.r)}
        | {"fn": fn, "scheduled_at": iso(T0 - timedelta(minutes=4))},
    )
    if status == "SUCCESS":
        dump_json(
            step.r / ".artifact.json",
            {"name": step.name, "version": VERSION, "output_path": str(step.r), "deps": deps or [], "result": result},
        )


def write_marker(ckpt_root: Path, step: int) -> None:
    ckpt_root.mkdir(parents=True, exist_ok=True)
    (ckpt_root / "latest_ckpt_global_step.txt").write_text(str(step))
