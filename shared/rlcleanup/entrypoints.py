"""Cloud Run function entry points (functions-framework, CloudEvent signature). No logic lives here.

Inside the package so that it ships in the wheel: `rlcleanup stack up` serves this file (functions-framework
`--source`) from wherever rlcleanup is installed; the Cloud Run bundle's functions/main.py re-exports these names.

Every function of runtime/topology.yaml gets its entry point here, by name. Each decodes the Pub/Sub message, then hands it to `rlcleanup.runtime.handlers.dispatch`, which
guards idempotency, runs the step and publishes the next messages. Heavy clients are built on first use.
A transient error answers HTTP 500 (Pub/Sub redelivers; one ERROR line logged); bad input is recorded and
dead-lettered (HTTP 200).
"""

from __future__ import annotations

from collections.abc import Callable

import functions_framework
from cloudevents.http import CloudEvent

from rlcleanup.runtime.functions import serve_cloud_event
from rlcleanup.runtime.topology import load_topology


def _entry(entry_point: str) -> Callable[[CloudEvent], None]:
    def entry(cloud_event: CloudEvent) -> None:
        serve_cloud_event(entry_point, cloud_event)

    # Name it before registering: functions-framework looks the target up by name in its registry.
    entry.__name__ = entry.__qualname__ = entry_point
    registered: Callable[[CloudEvent], None] = functions_framework.cloud_event(entry)
    return registered


# One per function of topology.yaml (each has its stage table row: runtime/stage_table.py), named as its entry point
# at the top level of this module, where functions-framework looks a target up.
ENTRY_POINTS: dict[str, Callable[[CloudEvent], None]] = {
    fn.entry_point: _entry(fn.entry_point) for fn in load_topology().functions
}
globals().update(ENTRY_POINTS)
__all__ = sorted(ENTRY_POINTS)
