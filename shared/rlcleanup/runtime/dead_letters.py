"""The dead-letter recorder: every message Pub/Sub dead-lettered lands on its run's record, and its step ends.

A function records a permanent error itself (runtime/failures.py) and parks a copy on its `<function>-dlq` topic.
What it cannot record is a delivery that never succeeded: a transient error that never cleared, a push that timed
out, a server that was down for every attempt. Pub/Sub forwards that message to the same `<function>-dlq` topic after
`max_delivery_attempts`, and without this the run stayed `in_progress` with `errors: []`. Each dead-letter topic
(but the recorder's own) is therefore also pushed to this function through `<function>-dlq-record`
(topology.yaml `dead_letters`); the parked copy stays on `<function>-dlq-sub` for a person, whatever happens here.

For such a dead letter it does what the failing function would have done with a permanent error (runtime/failures.py
`finish_failed`, the same FailureRoute): the error `retries_exhausted` (the step, the attempts, the last error where
the function could note it, `failures.note_transient`, and the fix) on the run,
then a fan-out member's claims completed as failed (and its fan-ins tried, so the run goes on) or, in any other
stage of the run's pipeline, the run marked `failed`. A copy the function parked after recording (attribute
`rlcleanup_error`) is recorded already: skipped. At-least-once delivery is harmless: the same error is stored once
(errors are deduplicated on step, code and message), a dead letter whose members are all stored records and fails
nothing, and a run that has ended is not failed again.

The Pub/Sub attribute `CloudPubSubDeadLetterSourceDeliveryCount` (set by Pub/Sub on a forwarded message) gives the
attempts; where it is missing (the emulator) the subscription's `max_delivery_attempts` from the topology does.
"""

from __future__ import annotations

import json
import logging
import os
import re
from functools import partial
from typing import Any, Protocol

from pydantic import RootModel

from rlcleanup.errors import InvalidMessage, PermanentError, RunErrorCode
from rlcleanup.models.documents import LastTransientError
from rlcleanup.models.events import SCOPE_PATTERN
from rlcleanup.ports.collections import DELIVERY_LAST_ERRORS
from rlcleanup.runtime.attempt_scope import scoped
from rlcleanup.runtime.claims import tag_failed_claim
from rlcleanup.runtime.failures import (
    FailureRoute,
    RetriesExhausted,
    finish_failed,
    last_error_key,
)
from rlcleanup.runtime.poison import RECORDED_ERROR, record_poison
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages.barrier import advance, member_key
from rlcleanup.runtime.topology import FunctionSpec

log = logging.getLogger(__name__)
SCOPE = re.compile(SCOPE_PATTERN)

# Which dead-letter topic a delivery came from: set by the entry point from the push's topic (never the sender's).
DEAD_LETTER_TOPIC = "rlcleanup_dead_letter_topic"
# Set by Pub/Sub on every message it dead-letters: how many deliveries were attempted.
PUBSUB_DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"


def pubsub_fix(fn: FunctionSpec) -> str:
    """What a person does about a message Pub/Sub gave up on, in the deployed modes."""
    return (
        f"the cause in {fn.name}'s log (a storage or service that kept failing, a push that timed out, a function "
        f"that was down), then re-emit the run's terminal event (`rlcleanup emit --run-uri ... --state ...`); the "
        f"message stays parked on {fn.dead_letter_subscription}"
    )


class StageRows(Protocol):
    """What the recorder reads of the stage table it is served from (`Ports.stages`, set by dispatch)."""

    def route(self, entry_point: str) -> FailureRoute: ...

    def row(self, entry_point: str) -> Any: ...


def served_stages(p: Ports) -> StageRows:
    """The stage table this delivery was dispatched through: the packaged one, or a development stack's
    (`stack up --stages`), whose new stages' dead letters have rows only there."""
    if p.stages is None:
        raise RuntimeError("the dead-letter recorder ran outside dispatch: no stage table was handed to it")
    return p.stages


def record_dead_letter(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    """Record one dead letter of another function on its run and finish its step as failed."""
    table = served_stages(p)
    topic = attributes.get(DEAD_LETTER_TOPIC)
    source = p.topology.dead_letter_source(topic)
    if source is None:
        raise PermanentError(
            RunErrorCode.unknown_dead_letter_topic, f"no function's dead letters are recorded from {topic!r}"
        )
    if attributes.get(RECORDED_ERROR):
        return f"{source.name} recorded it already ({attributes[RECORDED_ERROR]})"
    count = attributes.get(PUBSUB_DELIVERY_COUNT, "")
    attempts = int(count) if count.isdigit() else source.max_delivery_attempts
    noted = DELIVERY_LAST_ERRORS.bind(p.records, LastTransientError).get(last_error_key(source.entry_point, data))
    last = noted.last_error if noted else None  # None: the function never ran far enough to note one
    error = RetriesExhausted(source.entry_point, attempts, last, fix=pubsub_fix(source))
    log.warning("%s: Pub/Sub gave up on a message after %d deliveries", source.name, attempts)
    route = table.route(source.entry_point)
    members = _unfinished_members(p, source, data, route, table)
    if members == [] or (members is None and _step_done(p, source, data)):
        # a duplicate, or the work was stored after all (its ack lost): nothing failed
        return f"{source.name}: the step this message carries is stored already"
    record_poison(p, source.entry_point, source.dead_letter_topic, data, attributes, error, park=False)
    if members is None:  # not a fan-out member's message: its step fails the run (in a run's pipeline)
        return finish_failed(p, route, data, error, error, lambda: "")
    outcomes = []
    for run_id, scope, key, fan_out in members:
        failed = RetriesExhausted(source.entry_point, attempts, last, fix=pubsub_fix(source))
        tag_failed_claim(failed, run_id, key)
        outcomes.append(finish_failed(p, route, data, failed, error, partial(advance, p, run_id, scope, fan_out)))
    return "; ".join(outcomes)


def _step_done(p: Ports, source: FunctionSpec, data: bytes) -> bool:
    """Whether the function's own claim for the run and pass the message names is stored (read only: a payload
    that names another run can make the recorder skip, never write)."""
    if source.claim is None:
        return False
    try:
        payload = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    run_id = payload.get("run_id") if isinstance(payload, dict) else None
    scope = payload.get("scope", "") if isinstance(payload, dict) else ""
    if not isinstance(run_id, str) or not isinstance(scope, str) or not SCOPE.fullmatch(scope):
        return False
    key = scoped(scope, source.claim)
    return key in p.claims.done_keys(run_id, key)


def _unfinished_members(
    p: Ports, source: FunctionSpec, data: bytes, route: FailureRoute, table: StageRows
) -> list[tuple[str, str, str, str]] | None:
    """(run id, scope, claim key, fan-out) of each fan-out member the dead letter carries that has stored no
    outcome yet; None when the function is no fan-out's member or the message is not one of its members (a paged
    plan's continuation on the same topic)."""

    fan = p.topology.fan_out_of_member(source.name)
    row = table.row(source.entry_point)
    if fan is None or row.message is bytes or route.member_prefix is None:
        return None
    try:
        decoded = row.payload(data)  # the row's own decoding, as dispatch does
    except InvalidMessage:
        return None
    msg = decoded.root if isinstance(decoded, RootModel) else decoded  # a parts topic's union: the part or a page
    run_id, scope = getattr(msg, "run_id", None), getattr(msg, "scope", "")
    ids = getattr(msg, "members", None)
    if not isinstance(run_id, str) or not isinstance(ids, list):
        return None
    keys = [member_key(p, scope, fan.name, str(member)) for member in ids]
    # One read for the whole message (a validation batch carries up to 8 members): the done claims under the
    # longest prefix its members' keys share, never wider than the fan-out's member prefix (what a fan-in reads).
    shared = os.path.commonprefix(keys)  # noqa: RUF071 - claim keys are strings: done_keys takes a string prefix
    done = p.claims.done_keys(run_id, shared) if keys else set()
    return [(run_id, scope, key, fan.name) for key in keys if key not in done]
