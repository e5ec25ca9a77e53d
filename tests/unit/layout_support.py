"""A RunLayout for tests that validate one export or checkpoint under `tmp_path` (no discovery needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcleanup.steps.layout import RunLayout


def bare_layout(tmp_path: Path, **fields: Any) -> RunLayout:
    """exports/ and checkpoints/ under tmp_path, marker 5, no attempts; `fields` override any of it."""
    values: dict[str, Any] = {
        "run_uri": str(tmp_path),
        "kind": "A",
        "config_uri": str(tmp_path / "c.json"),
        "config_bytes": b"{}",
        "config": {},
        "skyrl": {},
        "temp_root": None,
        "checkpoints_root": str(tmp_path / "checkpoints"),
        "exports_root": str(tmp_path / "exports"),
        "attempts": [],
        "marker_step": 5,
    }
    return RunLayout(**(values | fields))
