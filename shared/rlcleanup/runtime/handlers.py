"""Dispatch: one delivery of a function's message to its stage's handler (the stage table, runtime/stage_table.py),
with the publish guard on, and the one failure rule: transient errors (and defects within their retry budget)
raise, so the delivery is retried; permanent ones are recorded, dead-lettered, and the failed step is completed as
failed (a fan-out member's outcome, or the run marked failed), so every run finishes.

The stage handlers live in runtime/stages/ (one module per stage); the same handlers run under functions-framework
(Pub/Sub + Firestore + GCS) and in the embedded default (in-process bus + SQLite + local files).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from rlcleanup.models.events import JobEvent
from rlcleanup.runtime.admission import bound_run_id, choose_run_id
from rlcleanup.runtime.envelope import identify
from rlcleanup.runtime.failures import finish_failed, to_permanent
from rlcleanup.runtime.guard import guarded_ports
from rlcleanup.runtime.poison import record_poison
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.recovery import as_lost, carrying_origin, check_not_lost, delivery_origin
from rlcleanup.runtime.stage_table import StageTable, stage_table
from rlcleanup.steps.layout import discover

log = logging.getLogger(__name__)


def dispatch(
    p: Ports,
    entry_point: str,
    dead_letter_topic: str,
    data: bytes,
    attributes: dict[str, str],
    *,
    message_id: str | None = None,
    table: StageTable | None = None,
) -> str:
    """Run a handler. Transient errors (and defects within their retry budget) raise: the delivery is retried.
    Permanent ones are recorded and dead-lettered, the failed step is completed as failed, and the message acked."""
    table = table or stage_table()
    row = table.row(entry_point)
    p = guarded_ports(p, table.topology.function(entry_point))  # publishes only what topology.yaml declares
    # This delivery's own copy: claims name it as their lease owner; its stages read the table's graph, and a
    # handler that reads the table (the dead-letter recorder) reads this one.
    p = replace(p, delivery_id=message_id, topology=table.topology, stages=table)
    origin = delivery_origin(p.topology, entry_point, data)
    p = carrying_origin(p, origin)  # every stage message it publishes carries it on
    try:
        check_not_lost(p, entry_point, data, origin)  # a stage message whose run's record is gone: lost
        return row.run(p, data, attributes)  # decoded as the row's message (InvalidMessage if it is not)
    except Exception as raised:
        exc = as_lost(p, entry_point, data, raised)  # a stage message whose run's record is gone: lost
        permanent = to_permanent(p, entry_point, data, message_id, exc)  # re-raises what should be retried
        record_poison(p, entry_point, dead_letter_topic, data, attributes, permanent)
        return finish_failed(p, table.route(entry_point), data, exc, permanent, lambda: row.run(p, data, attributes))


def resolve_run_id(p: Ports, event: JobEvent) -> str:
    """The run id the pipeline files a run under: the id its location was admitted under, else the one admission
    would choose now (a run refused before its identity was bound has no record under it)."""
    bound = bound_run_id(p, event.run_uri)
    if bound is not None:
        return bound
    try:
        return choose_run_id(p, discover(p.storage, event.run_uri))
    except Exception:
        return identify(event.model_dump_json().encode())[0] or "unnamed-run"
