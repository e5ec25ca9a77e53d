"""Discover a run's layout (A: Marin executor step; C: legacy Slurm) from its durable root.

Everything later steps read is located here once, so they never guess paths themselves.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rlcleanup.formats.config import ConfigError, get, parse_config, parse_int, sha256_hex, skyrl_section
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.uris import basename, join, parent

CONFIG_NAMES_A = ("resolved-skyrl.json", "launch.yaml", "launch.yml")
CONFIG_NAMES_C = ("resolved_config.yaml", "resolved_config.yml", "resolved_config.json")
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_SLURM_LOG = re.compile(r"^(?P<job>.+)_(?P<jobid>\d+)\.out$")


class LayoutError(ValueError):
    """The run cannot be read at all (no config, unreadable root): recorded on the run."""


@dataclass
class AttemptFiles:
    attempt_id: str
    record_uri: str | None = None
    record: dict[str, Any] = field(default_factory=dict)  # {request, execution, response}
    started_at: datetime | None = None
    ended_at: datetime | None = None
    log_uris: list[str] = field(default_factory=list)
    log_objects: list[ObjectInfo] = field(default_factory=list)

    @property
    def response(self) -> dict[str, Any]:
        value = self.record.get("response")
        return value if isinstance(value, dict) else {}


@dataclass
class RunLayout:
    run_uri: str
    kind: str  # "A" | "C"
    config_uri: str
    config_bytes: bytes
    config: dict[str, Any]  # the whole resolved config as written
    skyrl: dict[str, Any]  # the SkyRL part (== config for resolved-skyrl.json)
    temp_root: str | None
    checkpoints_root: str
    exports_root: str
    attempts: list[AttemptFiles]  # in chain order (started_at, then id)
    executor_status: str | None = None
    terminal: dict[str, Any] | None = None
    terminal_uri: str | None = None
    has_artifact_json: bool = False
    marker_step: int | None = None
    marker_uri: str | None = None
    checkpoint_steps: list[int] = field(default_factory=list)
    export_steps: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # non-fatal oddities found while discovering

    @property
    def config_sha256(self) -> str:
        return sha256_hex(self.config_bytes)

    def export_uri(self, step: int) -> str:
        return join(self.exports_root, f"global_step_{step}", "policy")

    def checkpoint_uri(self, step: int) -> str:
        return join(self.checkpoints_root, f"global_step_{step}")


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _read_json(storage: Storage, uri: str, max_bytes: int = 16 * 1024 * 1024) -> dict[str, Any] | None:
    if storage.stat(uri) is None:
        return None
    try:
        value = json.loads(storage.read_bytes(uri, max_bytes))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def read_executor_status(storage: Storage, uri: str) -> str | None:
    """One token, or legacy JSON lines `{"status": ...}` where the last line wins."""
    if storage.stat(uri) is None:
        return None
    text = storage.read_bytes(uri, 1024 * 1024).decode("utf-8", errors="replace").strip()
    status: str | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                value = json.loads(line).get("status")
            except (ValueError, AttributeError):
                continue
            if isinstance(value, str):
                status = value.strip().upper()
        else:
            status = line.split()[0].upper()
    return status


def read_marker(storage: Storage, uri: str) -> int | None:
    if storage.stat(uri) is None:
        return None
    text = storage.read_bytes(uri, 4096).decode("utf-8", errors="replace").strip()
    return parse_int(text)


def _step_dirs(objects: list[ObjectInfo], root: str) -> list[int]:
    steps: set[int] = set()
    prefix = root.rstrip("/") + "/"
    for obj in objects:
        first = obj.uri[len(prefix) :].split("/", 1)[0]
        match = _STEP_DIR.match(first)
        if match:
            steps.add(int(match.group(1)))
    return sorted(steps)


def _find_config(storage: Storage, run_uri: str, names: tuple[str, ...]) -> str | None:
    for name in names:
        uri = join(run_uri, name)
        if storage.stat(uri) is not None:
            return uri
    return None


def discover(storage: Storage, run_uri: str) -> RunLayout:
    run_uri = run_uri.rstrip("/")
    config_uri = _find_config(storage, run_uri, CONFIG_NAMES_A)
    kind = "A"
    if config_uri is None:
        config_uri = _find_config(storage, run_uri, CONFIG_NAMES_C)
        kind = "C"
    if config_uri is None:
        raise LayoutError(
            f"no resolved configuration under {run_uri} (looked for {', '.join(CONFIG_NAMES_A + CONFIG_NAMES_C)})"
        )
    config_bytes = storage.read_bytes(config_uri, 16 * 1024 * 1024)
    try:
        config = parse_config(config_bytes, config_uri)
    except (ConfigError, UnicodeDecodeError) as exc:
        raise LayoutError(f"resolved configuration {config_uri} is unreadable: {exc}") from exc
    skyrl = skyrl_section(config)
    if kind == "A" and storage.stat(join(run_uri, "latest_ckpt_global_step.txt")) is not None:
        kind = "C"  # a Slurm run that happened to save a JSON config beside itself
    return (
        _discover_a(storage, run_uri, config_uri, config_bytes, config, skyrl)
        if kind == "A"
        else _discover_c(storage, run_uri, config_uri, config_bytes, config, skyrl)
    )


def _discover_a(
    storage: Storage, run_uri: str, config_uri: str, config_bytes: bytes, config: dict[str, Any], skyrl: dict[str, Any]
) -> RunLayout:
    terminal_uri = join(run_uri, "terminal.json")
    terminal = _read_json(storage, terminal_uri)
    problems: list[str] = []
    ckpt_path = get(skyrl, "trainer.ckpt_path")
    checkpoint_root_from_terminal = get(terminal or {}, "response.model.checkpoint_root")
    if isinstance(ckpt_path, str) and ckpt_path and not ckpt_path.startswith("$"):
        checkpoints_root = ckpt_path.rstrip("/")
    elif isinstance(checkpoint_root_from_terminal, str) and checkpoint_root_from_terminal:
        checkpoints_root = checkpoint_root_from_terminal.rstrip("/")
    else:
        checkpoints_root = join(run_uri, "checkpoints")
        problems.append(
            "checkpoint root unknown (no trainer.ckpt_path, no terminal.json checkpoint_root); tried R/checkpoints"
        )
    temp_root = parent(checkpoints_root) if basename(checkpoints_root) == "checkpoints" else None
    exports_root = join(run_uri, "exports")

    attempts: list[AttemptFiles] = []
    if temp_root is not None:
        attempts_root = join(temp_root, "attempts")
        by_id: dict[str, AttemptFiles] = {}
        for obj in storage.list(attempts_root):
            rel = obj.uri[len(attempts_root) + 1 :]
            head, _, rest = rel.partition("/")
            if not rest and head.endswith(".json"):
                attempt_id = head[: -len(".json")]
                att = by_id.setdefault(attempt_id, AttemptFiles(attempt_id=attempt_id))
                att.record_uri = obj.uri
                att.record = _read_json(storage, obj.uri) or {}
                att.started_at = parse_time(get(att.record, "execution.started_at"))
                att.ended_at = parse_time(
                    get(att.record, "execution.ended_at") or get(att.record, "execution.finished_at")
                )
            elif rest.startswith("logs/") and head not in ("trajectories", "trace_jobs"):
                att = by_id.setdefault(head, AttemptFiles(attempt_id=head))
                att.log_uris.append(obj.uri)
                att.log_objects.append(obj)
        attempts = sorted(
            by_id.values(), key=lambda a: (a.started_at is None, a.started_at or datetime.min, a.attempt_id)
        )

    ckpt_objects = list(storage.list(checkpoints_root))
    export_objects = list(storage.list(exports_root))
    marker_uri = join(checkpoints_root, "latest_ckpt_global_step.txt")
    return RunLayout(
        run_uri=run_uri,
        kind="A",
        config_uri=config_uri,
        config_bytes=config_bytes,
        config=config,
        skyrl=skyrl,
        temp_root=temp_root,
        checkpoints_root=checkpoints_root,
        exports_root=exports_root,
        attempts=attempts,
        executor_status=read_executor_status(storage, join(run_uri, ".executor_status")),
        terminal=terminal,
        terminal_uri=terminal_uri if terminal is not None else None,
        has_artifact_json=storage.stat(join(run_uri, ".artifact.json")) is not None,
        marker_step=read_marker(storage, marker_uri),
        marker_uri=marker_uri,
        checkpoint_steps=_step_dirs(ckpt_objects, checkpoints_root),
        export_steps=_step_dirs(export_objects, exports_root),
        problems=problems,
    )


def _discover_c(
    storage: Storage, run_uri: str, config_uri: str, config_bytes: bytes, config: dict[str, Any], skyrl: dict[str, Any]
) -> RunLayout:
    logs_root = join(run_uri, "logs")
    attempts: list[AttemptFiles] = []
    for obj in storage.list(logs_root):
        name = basename(obj.uri)
        match = _SLURM_LOG.match(name)
        if not match or "_rayw" in name or "_rayhead" in name:
            continue
        attempts.append(AttemptFiles(attempt_id=match.group("jobid"), log_uris=[obj.uri], log_objects=[obj]))
    # Slurm job ids grow monotonically: chain order = id order.
    attempts.sort(key=lambda a: int(a.attempt_id))
    objects = [o for o in storage.list(run_uri) if not o.uri.startswith(join(run_uri, "exports") + "/")]
    export_objects = list(storage.list(join(run_uri, "exports")))
    marker_uri = join(run_uri, "latest_ckpt_global_step.txt")
    return RunLayout(
        run_uri=run_uri,
        kind="C",
        config_uri=config_uri,
        config_bytes=config_bytes,
        config=config,
        skyrl=skyrl,
        temp_root=None,
        checkpoints_root=run_uri,
        exports_root=join(run_uri, "exports"),
        attempts=attempts,
        marker_step=read_marker(storage, marker_uri),
        marker_uri=marker_uri,
        checkpoint_steps=_step_dirs(objects, run_uri),
        export_steps=_step_dirs(export_objects, join(run_uri, "exports")),
    )
