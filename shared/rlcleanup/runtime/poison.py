"""Where a permanent error goes: onto the run the message's own location is bound to, else under poison_messages,
and a copy parked on the function's dead-letter topic. Split from runtime/handlers.py so that the dead-letter
recorder (runtime/dead_letters.py) records the same way without importing dispatch."""

from __future__ import annotations

import hashlib
import logging

from rlcleanup.errors import PermanentError, RecordStoreLost
from rlcleanup.models.documents import PoisonMessage
from rlcleanup.models.record import RunError
from rlcleanup.ports.collections import POISON_MESSAGES
from rlcleanup.runtime.admission import attachable_run
from rlcleanup.runtime.envelope import identify
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.recovery import keep_lost_run

log = logging.getLogger("rlcleanup.runtime.handlers")  # the name operators filter dispatch's refusals by

# The attributes of a copy a function parks on its dead-letter topic after recording its error (the dead-letter
# recorder skips those: recorded already).
RECORDED_ERROR = "rlcleanup_error"
RECORDED_STEP = "rlcleanup_step"


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
