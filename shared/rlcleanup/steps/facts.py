"""Identity and provenance facts read straight off the layout: run id, revision, base model, launch command."""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from rlcleanup.formats.config import get
from rlcleanup.models.record import ResolvedConfigRef
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import basename, parent

_SAFE_ID = re.compile(r"[^A-Za-z0-9._=-]+")


@dataclass
class RunFacts:
    run_id: str  # the id the run declares (its terminal/attempt records), else the one its location spells
    source_revision: dict[str, str] = field(default_factory=dict)
    base_model: str | None = None
    launch_command: str | None = None
    resolved_config: ResolvedConfigRef | None = None
    declared: bool = False  # run_id is one the run itself declares, not read off its path


_MAX_ID = 200
_LOCATION_TAG = 8  # hex digits of the run URI's hash that set a location id apart from a same-named run's


def location_run_id(run_uri: str, kind: str = "A") -> str:
    """The readable id a run's location spells: `<experiment>-<version>` (Layout A), else the root's name."""
    return safe_run_id(f"{basename(parent(run_uri))}-{basename(run_uri)}" if kind == "A" else basename(run_uri))


def located_run_id(run_id: str, location: str) -> str:
    """`run_id` set apart by a short hash of where the run lives: the id of a second root whose readable id is
    already another root's (two roots never share a record)."""
    tag = hashlib.sha256(location.encode("utf-8", "surrogatepass")).hexdigest()[:_LOCATION_TAG]
    return safe_run_id(f"{run_id[: _MAX_ID - _LOCATION_TAG - 1]}-{tag}")


def safe_run_id(value: str) -> str:
    """Run ids become document ids and path segments: keep them to a safe alphabet. Never a collision by
    construction: an id that had to be changed (characters replaced, or cut to fit) carries a hash of the original,
    so two runs equal in their first 200 characters, or differing only in unsafe characters, stay two runs."""
    cleaned = _SAFE_ID.sub("-", value).strip("-.")
    if cleaned == value and len(cleaned) <= _MAX_ID:
        return cleaned or "unnamed-run"
    tag = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{cleaned[: _MAX_ID - len(tag) - 1].rstrip('-.')}-{tag}".lstrip("-")


def _command(value: Any) -> str | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return shlex.join(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def run_facts(layout: RunLayout) -> RunFacts:
    records: list[dict[str, Any]] = [layout.terminal or {}] + [a.record for a in reversed(layout.attempts)]
    run_id = next(
        (
            r
            for r in (get(rec, "response.run_id") or get(rec, "result.run_id") for rec in records)
            if isinstance(r, str) and r
        ),
        None,
    )
    declared = run_id is not None
    if run_id is None:
        run_id = location_run_id(layout.run_uri, layout.kind)
    revision: dict[str, str] = {}
    for rec in records:
        runtime = get(rec, "response.runtime") or get(rec, "result.runtime")
        if isinstance(runtime, dict):
            for key in ("trainer_commit", "launcher_commit", "task_image"):
                if isinstance(runtime.get(key), str) and key not in revision:
                    revision[key] = runtime[key]
    for key in ("runtime.trainer_commit", "runtime.launcher_commit", "runtime.task_image"):
        value = get(layout.config, key)
        if isinstance(value, str) and key.split(".")[1] not in revision:
            revision[key.split(".")[1]] = value
    base_model = get(layout.skyrl, "trainer.policy.model.path")
    command = None
    for rec in records:
        command = _command(get(rec, "request.command")) or _command(get(rec, "request.argv"))
        if command:
            break
    if command is None:
        command = _command(get(layout.config, "run.command")) or _command(get(layout.config, "launch_command"))
    return RunFacts(
        run_id=safe_run_id(run_id),
        source_revision=revision,
        base_model=base_model if isinstance(base_model, str) else None,
        launch_command=command,
        resolved_config=ResolvedConfigRef(uri=layout.config_uri, sha256=layout.config_sha256),
        declared=declared,
    )
