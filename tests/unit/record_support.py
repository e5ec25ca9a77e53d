"""Shared by the tests that compare two pipelines' records (chaotic vs clean delivery, the large-copy job vs inline):
a record as JSON with its timestamps left out and the run's own temporary directory replaced by a placeholder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcleanup.models.record import CompletionRecord

TIMESTAMPS = ("created_at", "updated_at", "checked_at", "measured_at")  # when, not what: differ run to run


def comparable(record: CompletionRecord | None, root: Path) -> Any:
    """`record` as JSON without its timestamps (at any depth), paths under `root` written as `<root>`."""
    assert record is not None
    return _strip(record.model_dump(mode="json"), str(root))


def _strip(value: Any, root: str) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, root) for k, v in value.items() if k not in TIMESTAMPS}
    if isinstance(value, list):
        return [_strip(v, root) for v in value]
    return value.replace(root, "<root>") if isinstance(value, str) else value
