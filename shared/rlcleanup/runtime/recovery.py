"""Recovery from a record store that lost a run (the Firestore emulator restarted empty; real Firestore never loses
committed data): what it needs travels where the loss cannot take it.

- **The origin travels in every stage message.** The job event that started a run's pass is the one thing needed
  to redo the run from scratch. `on-job-event` takes it from the event it classifies; every later delivery from
  its message's `origin` (models/events.py `_StageMsg`). The delivery's bus (`carrying_origin`) adds it to every
  message the stage publishes on a pipeline topic that lacks one, so no stage has to pass it on by hand. Which
  topics carry stage messages, and which function classifies, is read from the topology (`stage_message_topics`,
  `is_entry`): a stage added in topology.yaml alone gets the origin too.
- **A lost record is rebuilt from the message.** A stage message that finds its run's record gone (RecordMissing,
  a typed transient error, from any stage) carries its run's origin, so its record existed: the loss is
  `RecordStoreLost`. `keep_lost_run` writes the run's record again (status `failed`, the run's URI, what remains:
  the exact recover command) and keeps the origin in `lost_runs/{run_id}`.
- **Re-driven with nothing to supply.** `redrive_lost_run` publishes the kept origin on the pipeline's entry topic
  (`job-events`):
  `rlcleanup recover RUN_ID` and the sweep's records pass call it. The re-emitted event is never a duplicate:
  `on-job-event` sees the run lost (`is_lost`) and `start_over` drops the claims written since the reset before it
  classifies the run again (preserved evidence is write-once, so the redo reuses it).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from rlcleanup.errors import RecordMissing, RecordStoreLost
from rlcleanup.models.documents import LostRun
from rlcleanup.models.events import JobEvent
from rlcleanup.models.record import UNKNOWN_RUN_URI, CompletionRecord, utcnow
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports import collections
from rlcleanup.ports.bus import Bus
from rlcleanup.ports.collections import Documents
from rlcleanup.ports.records import RunRecords
from rlcleanup.runtime.envelope import identify
from rlcleanup.runtime.guard import GuardedBus
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.topology import Topology

log = logging.getLogger(__name__)

LOST_RUNS = collections.LOST_RUNS.name  # a run the record store lost, and the event that re-drives it


def _lost_runs(records: RunRecords) -> Documents[LostRun]:
    return collections.LOST_RUNS.bind(records, LostRun)


def recover_command(run_id: str) -> str:
    return f"rlcleanup recover {run_id}"


# ----------------------------------------------------------------- the origin travels with every stage message


def delivery_origin(topology: Topology, entry_point: str, data: bytes) -> JobEvent | None:
    """The job event that started the run this delivery works on: the event itself for `on-job-event` (a terminal
    one), else the stage message's `origin`. None when there is none to read (validation of the message proper is
    its stage's, not this)."""
    try:
        payload = json.loads(data)
        if not isinstance(payload, dict):
            return None
        if topology.is_entry(entry_point):
            event = JobEvent.model_validate(payload)
            return event if event.is_terminal and event.intent is None else None
        origin = payload.get("origin")
        return JobEvent.model_validate(origin) if isinstance(origin, dict) else None
    except (ValueError, UnicodeDecodeError, RecursionError, ValidationError):
        return None


@dataclass(frozen=True)
class OriginBus:
    """A bus that adds `origin` to every stage message published without one (context propagation, as a trace
    header is: the stages publish their messages as before)."""

    inner: Bus
    origin: dict[str, Any]
    stage_topics: frozenset[str]  # the topology's `stage_message_topics`

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        if topic in self.stage_topics:
            data = with_origin(data, self.origin)
        return self.inner.publish(topic, data, attributes)


def with_origin(data: bytes, origin: dict[str, Any]) -> bytes:
    """`data` (a JSON object) with `origin` added, unless it has one."""
    try:
        payload = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return data
    if not isinstance(payload, dict) or payload.get("origin") is not None:
        return data
    return json.dumps({**payload, "origin": origin}).encode()


def carrying_origin(p: Ports, origin: JobEvent | None) -> Ports:
    """A per-delivery copy of `p` whose bus carries `origin` on; inside the publish guard, which still decides."""
    if origin is None:
        return p
    carried = origin.model_dump(mode="json")
    topics = p.topology.stage_message_topics
    bus = p.bus
    if isinstance(bus, GuardedBus):
        return replace(p, bus=replace(bus, inner=OriginBus(bus.inner, carried, topics)))
    return replace(p, bus=OriginBus(bus, carried, topics))


# ----------------------------------------------------------------- a lost record, rebuilt from the message


def check_not_lost(p: Ports, entry_point: str, data: bytes, origin: JobEvent | None) -> None:
    """Raise RecordStoreLost for a stage message (it carries its run's origin: `on-job-event` created the record
    before publishing it) whose run has no record: the store lost it. Checked before the stage runs, so a worker
    that never saw the database before its reset still notices (one cheap read per stage delivery)."""
    if origin is None or p.topology.is_entry(entry_point):
        return
    run_id = identify(data)[0]
    if run_id is None or p.records.has_record(run_id):
        return
    raise _lost(p, run_id, entry_point)


def _lost(p: Ports, run_id: str, entry_point: str) -> RecordStoreLost:
    created = p.claims.database_created_at()
    lost = RecordStoreLost(run_id, entry_point, created.isoformat(timespec="seconds") if created else None)
    log.error("%s", lost, extra={"run_id": run_id, "error": {"type": "RecordStoreLost"}})
    return lost


def as_lost(p: Ports, entry_point: str, data: bytes, exc: Exception) -> Exception:
    """RecordStoreLost for a stage message whose run's record is gone (it carries its origin or its run's URI, so
    the record existed when it was published); `exc` unchanged otherwise (RecordMissing stays transient)."""
    if not isinstance(exc, RecordMissing) or p.topology.is_entry(entry_point):
        return exc
    if delivery_origin(p.topology, entry_point, data) is None and identify(data)[1] is None:
        return exc
    if p.records.has_record(exc.run_id):  # there again (a concurrent re-drive): retry as usual
        return exc
    lost = _lost(p, exc.run_id, entry_point)
    lost.__cause__ = exc
    return lost


def keep_lost_run(p: Ports, run_id: str, step: str, data: bytes) -> None:
    """The run's record again, as far as the message knows it (its URI; the rest is gone), `failed` with the exact
    recover command, and lost_runs/{run_id} holding the origin that re-drives it."""
    origin = delivery_origin(p.topology, step, data)
    run_uri = origin.run_uri if origin else identify(data)[1]
    command = recover_command(run_id)
    p.records.create_if_absent(
        CompletionRecord(
            run_id=run_id,
            run_uri=run_uri or UNKNOWN_RUN_URI,
            status=RecordStatus.failed,
            remaining_work=[
                f"the record store lost this run's progress: re-drive it with `{command}` (the sweep does it on "
                "its next records pass; preserved evidence is reused)"
            ],
        )
    )
    lost_runs = _lost_runs(p.records)
    kept = lost_runs.get(run_id)
    if kept is not None and kept.recovered_at is None and (kept.event or origin is None):
        return  # this loss is kept already
    lost_runs.put(run_id, LostRun(run_id=run_id, run_uri=run_uri, event=origin, step=step, lost_at=utcnow()))


# ----------------------------------------------------------------- re-driving a lost run


class NotLost(LookupError):
    """recover was asked for a run the record store did not lose (or whose loss says nothing to re-drive it)."""


def is_lost(p: Ports, run_id: str) -> bool:
    """A run lost to a reset of the record store and not re-driven since (one document read per terminal event)."""
    kept = _lost_runs(p.records).get(run_id)
    return kept is not None and kept.recovered_at is None


def start_over(p: Ports, run_id: str) -> int:
    """Before a lost run's event is classified again: drop the claims written since the reset (the lost ones are
    gone already), so none of them makes the event a duplicate, and mark the loss re-driven."""
    dropped = p.claims.forget_claims(run_id)
    lost_runs = _lost_runs(p.records)
    kept = lost_runs.get(run_id)
    if kept is not None:
        lost_runs.put(run_id, kept.model_copy(update={"recovered_at": utcnow()}))
    log.warning("run %s was lost by the record store: re-driven from scratch (%d claims dropped)", run_id, dropped)
    return dropped


def lost_run_event(records: RunRecords, run_id: str) -> JobEvent:
    """The event that re-drives a lost run: the one that started it, else one naming its URI (a manual end)."""
    kept = _lost_runs(records).get(run_id)
    if kept is None or kept.recovered_at is not None:
        raise NotLost(f"run {run_id!r} was not lost by the record store (no pending {LOST_RUNS}/{run_id})")
    if kept.event is not None:
        return kept.event
    run_uri = kept.run_uri
    if run_uri is None or run_uri == UNKNOWN_RUN_URI:
        raise NotLost(
            f"run {run_id!r} was lost with no URI kept: re-emit its terminal event "
            "(`rlcleanup emit --run-uri URI --state STATE`)"
        )
    return JobEvent(source="manual", job_id=f"recover:{run_id}", run_uri=run_uri, state="ENDED", observed_at=utcnow())


def redrive_lost_run(p: Ports, run_id: str) -> JobEvent:
    """Publish the lost run's event where job events enter the pipeline (NotLost when there is nothing to
    re-drive)."""
    event = lost_run_event(p.records, run_id)
    p.bus.publish(
        p.topology.entry_topic, event.model_dump_json().encode(), {"source": event.source, "state": event.state}
    )
    return event


def redrive_lost_runs(p: Ports, now: datetime) -> int:
    """The sweep's part: every lost run not re-driven yet, once each (`redriven_at`); a run still lost at the next
    pass was re-driven already and is left to `rlcleanup recover`."""
    count = 0
    lost_runs = _lost_runs(p.records)
    for run_id, kept in lost_runs.list():
        if kept.recovered_at is not None or kept.redriven_at is not None:
            continue
        try:
            event = redrive_lost_run(p, run_id)
        except NotLost as exc:
            log.warning("sweep cannot re-drive lost run %s: %s", run_id, exc, extra={"run_id": run_id})
            continue
        lost_runs.put(run_id, kept.model_copy(update={"redriven_at": now}))
        log.info("sweep re-drove lost run %s from its %s %s event", run_id, event.source, event.state)
        count += 1
    return count
