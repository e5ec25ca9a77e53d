"""The small files discovery reads in a run: JSON records, `.executor_status`, the latest-checkpoint marker, and
the `global_step_<N>` directories under a root (from its children alone)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from rlcleanup.errors import PermanentError
from rlcleanup.formats.config import parse_int
from rlcleanup.ports.storage import Storage, child_names
from rlcleanup.uris import basename

_STEP_DIR = re.compile(r"^global_step_(\d+)$")
# The run's JSON records (terminal.json, attempt records, receipts, locks) nest a few levels; the run's writer
# controls their bytes, and json.loads of a 200,000-deep `[[[...` exhausts the stack (RecursionError: no record).
MAX_RUN_JSON_DEPTH = 64


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _deepest(text: str) -> int:
    """The deepest bracket nesting outside strings (a truncated file's open brackets count as they go)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_JSON_STRING.sub("", text)):
        depth = depth + 1 if bracket in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


def loads_run_json(data: bytes, uri: str) -> Any:
    """A run's JSON file parsed; None when it is not JSON (or cut short). Nested past MAX_RUN_JSON_DEPTH it is
    refused as `unreadable_run` (the run is recorded failed with the reason), never parsed."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _deepest(text) > MAX_RUN_JSON_DEPTH:
        raise PermanentError(
            "unreadable_run", f"{uri[:300]}: JSON nested deeper than {MAX_RUN_JSON_DEPTH} levels: refused"
        )
    try:
        return json.loads(text)
    except ValueError:
        return None


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def read_json(storage: Storage, uri: str, max_bytes: int = 16 * 1024 * 1024) -> dict[str, Any] | None:
    if storage.stat(uri) is None:
        return None
    value = loads_run_json(storage.read_bytes(uri, max_bytes), uri)
    return value if isinstance(value, dict) else None


def read_executor_status(storage: Storage, uri: str) -> str | None:
    """One token, or legacy JSON lines `{"status": ...}` where the last line wins."""
    if storage.stat(uri) is None:
        return None
    return parse_executor_status(storage.read_bytes(uri, 1024 * 1024).decode("utf-8", errors="replace"))


def parse_executor_status(text: str) -> str | None:
    """The token of a `.executor_status` body (also what a storage notification's generation held)."""
    text = text.strip()
    status: str | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                value = json.loads(line).get("status")
            except (ValueError, AttributeError, RecursionError):  # a line nested past the stack: not a status
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


# Megatron-LM megatron/core/dist_checkpointing/serialization.py @0057095 `save`: with `async_sharded_save` the
# `metadata.json` write (core.CONFIG_FNAME) is a finalize function of the async request, "written only if the
# checkpoint is complete"; SkyRL @a956457 megatron_strategy.save_checkpoint schedules that request and returns, and the
# trainer then writes data.pt, trainer_state.pt and the marker: the marker can name a save that never finished.
MEGATRON_FINISHED = "policy/metadata.json"


def committed_steps(
    storage: Storage, checkpoints_root: str, marker: int | None, steps: list[int], strategy: object
) -> tuple[int | None, int | None]:
    """(the marker's step if its save never finished, else None; the latest step whose save finished). Only a
    Megatron save can be left so (its async save is the one whose marker precedes its last file): one stat for the
    marker's dir, and for an unfinished one a stat per earlier dir until a finished one is found."""
    if marker is None or str(strategy).lower() != "megatron":
        return None, marker
    if storage.stat(f"{checkpoints_root.rstrip('/')}/global_step_{marker}/{MEGATRON_FINISHED}") is not None:
        return None, marker
    for step in sorted((s for s in steps if s < marker), reverse=True):
        if storage.stat(f"{checkpoints_root.rstrip('/')}/global_step_{step}/{MEGATRON_FINISHED}") is not None:
            return marker, step
    return marker, None


def step_dirs(storage: Storage, root: str) -> list[int]:
    """The N of every `global_step_<N>` child of root, from its children alone (ports.storage.child_names): the
    files inside a step (1,500 of a 500-rank checkpoint) are never listed by discovery."""
    steps: set[int] = set()
    for uri in child_names(storage, root):
        match = _STEP_DIR.match(basename(uri))
        if match:
            steps.add(int(match.group(1)))
    return sorted(steps)


EXPORT_REQUEST_NAME = "hf_export_request.json"  # formats/export_request.py reads it; discovery only notes where


def export_request_steps(storage: Storage, checkpoints_root: str, steps: list[int]) -> list[int]:
    """The checkpoint steps holding a deferred HF export request (run-layout-v3.md §2): one stat per checkpoint
    dir, whose count retention bounds (upstream keeps `max_ckpts_to_keep` plus those with a pending export)."""
    root = checkpoints_root.rstrip("/")
    return [s for s in steps if storage.stat(f"{root}/global_step_{s}/{EXPORT_REQUEST_NAME}") is not None]
