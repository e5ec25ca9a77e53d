"""Cloud Run function entry points for the bundle (functions-framework `--target NAME --source main.py`).

The entry points live in the package (`rlcleanup/entrypoints.py`, which also ships in the wheel for
`rlcleanup stack up`); this file only names them at the top level, where functions-framework looks.
"""

from __future__ import annotations

from rlcleanup.entrypoints import ENTRY_POINTS

# Every function of runtime/topology.yaml, at the top level (functions-framework's --target looks here).
globals().update(ENTRY_POINTS)
__all__ = sorted(ENTRY_POINTS)
