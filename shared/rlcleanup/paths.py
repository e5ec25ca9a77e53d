"""Where rlcleanup keeps things by default: XDG base directories, never relative to the working directory.

Resolved at call time (not import time) so `XDG_*` / `RLCLEANUP_*` set by a test or a shell apply at once.

    records + preserved evidence (embedded)   $XDG_STATE_HOME/rlcleanup/   (~/.local/state/rlcleanup)
    approver keys                             $XDG_CONFIG_HOME/rlcleanup/keys/   (~/.config/rlcleanup/keys)
    local stack pids, logs, state.json        $XDG_CACHE_HOME/rlcleanup/stack   (~/.cache/rlcleanup/stack)
"""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    # The spec says relative values are invalid and must be ignored.
    base = Path(value) if value and Path(value).is_absolute() else Path.home() / fallback
    return base / "rlcleanup"


def state_home() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state")


def config_home() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config")


def cache_home() -> Path:
    return _xdg("XDG_CACHE_HOME", ".cache")


def default_db() -> Path:
    """The embedded records file (`RLCLEANUP_DB` overrides)."""
    explicit = os.environ.get("RLCLEANUP_DB")
    return Path(explicit) if explicit else state_home() / "records.db"


def default_preserve_root() -> Path:
    return state_home() / "preserved"


def keys_dir() -> Path:
    return config_home() / "keys"


def stack_dir() -> Path:
    """One local stack per user, found from any directory (`RLCLEANUP_STACK_DIR` overrides)."""
    explicit = os.environ.get("RLCLEANUP_STACK_DIR")
    return Path(explicit).resolve() if explicit else cache_home() / "stack"
