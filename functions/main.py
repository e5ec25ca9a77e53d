"""Cloud Run function entry points for the bundle (functions-framework `--target NAME --source main.py`).

The entry points live in the package (`rlcleanup/entrypoints.py`, which also ships in the wheel for
`rlcleanup stack up`); this file only names them at the top level, where functions-framework looks.
"""

from __future__ import annotations

from rlcleanup.entrypoints import (
    apply_grant,
    capture_part,
    capture_pre_cancel,
    establish_terminal_state,
    on_job_event,
    on_k8s_log_entry,
    on_storage_event,
    plan_capture,
    retry_waiting_grants,
    scan_log_part,
    select_candidate,
    sweep,
    validate_candidate,
)

__all__ = [
    "apply_grant",
    "capture_part",
    "capture_pre_cancel",
    "establish_terminal_state",
    "on_job_event",
    "on_k8s_log_entry",
    "on_storage_event",
    "plan_capture",
    "retry_waiting_grants",
    "scan_log_part",
    "select_candidate",
    "sweep",
    "validate_candidate",
]
