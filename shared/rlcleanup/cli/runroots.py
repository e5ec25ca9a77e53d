"""Is this path a run? Checked before anything is written, so a wrong path leaves no record behind."""

from __future__ import annotations

import os
from pathlib import Path

from rlcleanup.ports.storage import Storage
from rlcleanup.steps.layout import CONFIG_NAMES_A, CONFIG_NAMES_C, LayoutError, discover

CONFIG_NAMES = CONFIG_NAMES_A + CONFIG_NAMES_C
_SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", "checkpoints", "exports", "logs"}


def has_run_config(storage: Storage, run_uri: str) -> bool:
    """False only when layout discovery finds no resolved configuration (also not in a 3-step run's sibling
    -training step); any other layout problem is the pipeline's to record on the run."""
    try:
        discover(storage, run_uri)
    except LayoutError as exc:
        return not str(exc).startswith("no resolved configuration")
    return True


def run_roots_below(path: Path, *, limit: int = 5, max_depth: int = 5, max_dirs: int = 5000) -> list[Path]:
    """Directories under `path` holding a resolved configuration, shallowest first; bounded, so `/` is cheap."""
    found: list[Path] = []
    frontier, seen = [path], 0
    for _depth in range(max_depth):
        nxt: list[Path] = []
        for directory in frontier:
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False) or entry.name in _SKIP_DIRS:
                    continue
                seen += 1
                child = Path(entry.path)
                if any((child / name).is_file() for name in CONFIG_NAMES):
                    found.append(child)
                    if len(found) >= limit:
                        return found
                else:
                    nxt.append(child)
                if seen >= max_dirs:
                    return found
        frontier = nxt
    return found
