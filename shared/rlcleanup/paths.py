"""Where rlcleanup keeps things by default: XDG base directories, never relative to the working directory.

Resolved at call time (not import time) so `XDG_*` / `RLCLEANUP_*` set by a test or a shell apply at once.

    records + preserved evidence (embedded)   $XDG_STATE_HOME/rlcleanup/   (~/.local/state/rlcleanup)
    approver keys                             $XDG_CONFIG_HOME/rlcleanup/keys/   (~/.config/rlcleanup/keys)
    local stack pids, logs, state.json        $XDG_CACHE_HOME/rlcleanup/stack   (~/.cache/rlcleanup/stack)
    reports opened by `report --web`          $XDG_CACHE_HOME/rlcleanup/reports/<run id>/
    tensor-layout verdicts (a cache)          $XDG_CACHE_HOME/rlcleanup/tensor-layout/   (RLCLEANUP_LAYOUT_VERDICTS_DIR)
"""

from __future__ import annotations

from pathlib import Path

from rlcleanup.settings import LocalPaths, read


def _xdg(value: Path | None, fallback: str) -> Path:
    # The spec says relative values are invalid and must be ignored.
    base = value if value and value.is_absolute() else Path.home() / fallback
    return base / "rlcleanup"


def state_home() -> Path:
    return _xdg(read(LocalPaths).xdg_state_home, ".local/state")


def config_home() -> Path:
    return _xdg(read(LocalPaths).xdg_config_home, ".config")


def cache_home() -> Path:
    return _xdg(read(LocalPaths).xdg_cache_home, ".cache")


def default_db() -> Path:
    """The embedded records file (`RLCLEANUP_DB` overrides)."""
    explicit = read(LocalPaths).db
    return explicit if explicit else state_home() / "records.db"


def default_preserve_root() -> Path:
    # Its real path: the local backend walks every path without following a link (docs/authority.md P3), so a home
    # or state directory reached through a symlinked mount (`/home -> /mnt/home`) is resolved once here, where the
    # operator's own setting names it, never below it.
    return (state_home() / "preserved").resolve()


def keys_dir() -> Path:
    return config_home() / "keys"


def reports_dir() -> Path:
    """Where `report --web` renders a report to open it (rendered again each time: a cache, never the evidence)."""
    return cache_home() / "reports"


def stack_dir() -> Path:
    """One local stack per user, found from any directory (`RLCLEANUP_STACK_DIR` overrides)."""
    explicit = read(LocalPaths).stack_dir
    return explicit.resolve() if explicit else cache_home() / "stack"


def layout_verdicts_dir() -> Path:
    """Tensor-layout verdicts kept between processes (formats/checkpoints/layout_verdicts.py; a cache, safe to delete):
    `RLCLEANUP_LAYOUT_VERDICTS_DIR` overrides, so processes with different cache homes can share one."""
    explicit = read(LocalPaths).layout_verdicts_dir
    return explicit if explicit else cache_home() / "tensor-layout"
