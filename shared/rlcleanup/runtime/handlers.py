"""Dispatch: one delivery of a function's message to its stage's handler (the stage table, runtime/stage_table.py),
with the publish guard on, and the one failure rule: transient errors (and defects within their retry budget)
raise, so the delivery is retried; permanent ones are recorded, dead-lettered, and the failed step is completed as
failed (a fan-out member's outcome, or the run marked failed), so every run finishes.

The stage handlers live in runtime/stages/ (one module per stage); the same handlers run under functions-framework
(Pub/Sub + Firestore + GCS) and in the embedded default (in-process bus + SQLite + local files).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace

from rlcleanup.errors import PermanentError, RecordStoreLost
from rlcleanup.models.documents import PoisonMessage
from rlcleanup.models.events import JobEvent
from rlcleanup.models.record import RunError
from rlcleanup.ports.collections import POISON_MESSAGES
from rlcleanup.runtime.admission import attachable_run, bound_run_id, choose_run_id
from rlcleanup.runtime.envelope import identify
from rlcleanup.runtime.failures import finish_failed, to_permanent
from rlcleanup.runtime.guard import guarded_ports
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.recovery import as_lost, carrying_origin, check_not_lost, delivery_origin, keep_lost_run
from rlcleanup.runtime.stage_table import Handler, StageTable, stage_table
from rlcleanup.steps.layout import discover

log = logging.getLogger(__name__)

# The attributes of a copy a function parks on its dead-letter topic after recording its error (the dead-letter
# recorder skips those: recorded already).
RECORDED_ERROR = "rlcleanup_error"
RECORDED_STEP = "rlcleanup_step"


def handler(entry_point: str) -> Handler:
    """The handler serving `entry_point` (UnknownEntryPoint for one the stage table has no row for)."""
    return stage_table().row(entry_point).handler


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
    # This delivery's own copy: claims name it as their lease owner; its stages read the table's graph.
    p = replace(p, delivery_id=message_id, topology=table.topology)
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


def record_poison(
    p: Ports,
    step: str,
    dead_letter_topic: str,
    data: bytes,
    attributes: dict[str, str],
    error: PermanentError,
    *,
    park: bool = True,
) -> None:
    """Attach the error to the run whose record the message's own location is bound to (admission.attachable_run),
    else file it under poison_messages; park a copy on the dead-letter topic (unless `park` is False: a dead letter
    Pub/Sub forwarded there itself is parked already). A refusal never creates a record nor binds an id: a message
    naming another run's id is refused without touching that run."""
    run_id = attachable_run(p, data)
    message = f"{error}"[:2000]
    named_id, named_uri = identify(data)
    if isinstance(error, RecordStoreLost) and named_id and (run_id is None or run_id == named_id):
        # The store lost the run under one of our own stage messages (its identity documents too, so a location the
        # message names is bound to nothing now): the record is written again from what the message carries (the
        # run's URI and the event that started it, runtime/recovery.py), failed with the recover command; it binds
        # no identity. RecordStoreLost is raised only for a store seen to come back empty, never by a refusal.
        keep_lost_run(p, named_id, step, data)
        run_id = named_id
    if run_id:
        p.records.add_errors(run_id, [RunError(step=step, code=error.code, message=message)])
    else:
        poison = PoisonMessage(
            step=step,
            code=error.code,
            message=message,
            size=len(data),
            named_run_id=named_id,
            named_run_uri=named_uri[:2000] if named_uri else None,
        )
        POISON_MESSAGES.bind(p.records, PoisonMessage).put(poison_key(data), poison)
    if park:
        p.bus.publish(dead_letter_topic, data, {**attributes, RECORDED_ERROR: error.code, RECORDED_STEP: step})
    # The log names the run the payload names (as data) when the error went on no record: an operator searching
    # the function's log for a run finds its refusals too.
    who = run_id or (f"? (the message names {named_id})" if named_id else "?")
    log.warning("permanent error in %s for run %s: %s: %s", step, who, error.code, message)


def poison_key(data: bytes) -> str:
    """Where record_poison files a message no admitted run can take (the payload's hash)."""
    return hashlib.sha256(data).hexdigest()[:32]


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
