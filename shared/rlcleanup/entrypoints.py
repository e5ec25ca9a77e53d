"""Cloud Run function entry points (functions-framework, CloudEvent signature). No logic lives here.

Inside the package so that it ships in the wheel: `rlcleanup stack up` serves this file (functions-framework
`--source`) from wherever rlcleanup is installed; the Cloud Run bundle's functions/main.py re-exports these names.

Each entry point decodes the Pub/Sub message, then hands it to `rlcleanup.runtime.handlers.dispatch`, which
guards idempotency, runs the step and publishes the next messages. Heavy clients are built on first use.
A transient error answers HTTP 500 (Pub/Sub redelivers; one ERROR line logged); bad input is recorded and
dead-lettered (HTTP 200).
"""

from __future__ import annotations

from collections.abc import Callable

import functions_framework
from cloudevents.http import CloudEvent

from rlcleanup.runtime.functions import serve_cloud_event


def _entry(entry_point: str) -> Callable[[CloudEvent], None]:
    def entry(cloud_event: CloudEvent) -> None:
        serve_cloud_event(entry_point, cloud_event)

    # Name it before registering: functions-framework looks the target up by name in its registry.
    entry.__name__ = entry.__qualname__ = entry_point
    registered: Callable[[CloudEvent], None] = functions_framework.cloud_event(entry)
    return registered


on_job_event = _entry("on_job_event")
establish_terminal_state = _entry("establish_terminal_state")
scan_log_part = _entry("scan_log_part")
plan_capture = _entry("plan_capture")
capture_part = _entry("capture_part")
validate_candidate = _entry("validate_candidate")
select_candidate = _entry("select_candidate")
capture_pre_cancel = _entry("capture_pre_cancel")
apply_grant = _entry("apply_grant")
retry_waiting_grants = _entry("retry_waiting_grants")
on_storage_event = _entry("on_storage_event")
sweep = _entry("sweep")
on_k8s_log_entry = _entry("on_k8s_log_entry")
