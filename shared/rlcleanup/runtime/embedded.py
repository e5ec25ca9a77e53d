"""The embedded default: the same handlers wired by the same topology, over in-process bus + SQLite + files."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from rlcleanup.adapters.inprocess_bus import Delivered, Handler, InProcessBus
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.errors import PermanentError, defect_message
from rlcleanup.models.documents import PoisonMessage
from rlcleanup.models.events import JobEvent
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.paths import default_db, default_preserve_root
from rlcleanup.ports.collections import POISON_MESSAGES
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import Storage
from rlcleanup.runtime import admission, resume
from rlcleanup.runtime.failures import RetriesExhausted, finish_failed, gave_up
from rlcleanup.runtime.handlers import dispatch, resolve_run_id
from rlcleanup.runtime.poison import poison_key, record_poison
from rlcleanup.runtime.ports import Ports, hub_upload_job, large_copy_job
from rlcleanup.runtime.stage_table import StageTable, stage_table
from rlcleanup.runtime.topology import FunctionSpec
from rlcleanup.settings import DeploymentSettings, load_settings
from rlcleanup.steps.facts import run_facts
from rlcleanup.steps.layout import discover

log = logging.getLogger(__name__)

__all__ = [
    "EmbeddedStack",
    "RetriesExhausted",
    "RunNotAdmitted",
    "bound_run_id_of",
    "gave_up",
    "manual_event",
    "resolve_run_id",
    "run_embedded",
]


@dataclass
class EmbeddedStack:
    ports: Ports
    bus: InProcessBus
    # called after every handled message (`run`'s progress on stderr reads the run's claims there)
    after_each: Callable[[Ports], None] | None = None
    table: StageTable | None = None  # the stage table it serves (None: the packaged one)

    @classmethod
    def create(
        cls,
        db_path: str | Path,
        preserve_root: str,
        *,
        bus: InProcessBus | None = None,
        storage: Storage | None = None,
        settings: DeploymentSettings | None = None,
        table: StageTable | None = None,
    ) -> EmbeddedStack:
        """One process serving every function of the stage table's topology: the deployment settings are read
        here, once (unless given)."""
        # Message ids name this process: they are the leases' owners, so a later `run` knows whether the process
        # that holds a step is still alive (runtime/resume.py).
        bus = bus or InProcessBus(id_prefix=resume.this_process_prefix())
        table = table or stage_table()
        topology = table.topology
        settings = settings or load_settings()
        job_args = ("--sqlite", str(db_path), "--preserve-root", preserve_root)  # the child opens the same store
        ports = Ports(
            storage=storage or RoutingStorage(),
            records=SqliteRunRecords(db_path),
            claims=SqliteIdempotencyStore(db_path),
            bus=bus,
            settings=settings.model_copy(update={"preserve_root": preserve_root}),
            hub_upload_job=hub_upload_job(settings, job_args),
            # Awaited: this stack has no later redelivery to see the job's outcome (runtime/copy_job.py).
            large_copy_job=large_copy_job(settings, job_args, wait=True),
            topology=topology,
            embedded=True,
        )
        stack = cls(ports=ports, bus=bus, table=table)
        functions = topology.functions
        # Every function has its stage table row (runtime/stage_table.py). The dead-letter recorder has no trigger:
        # this bus knows the exception it gave up on, and records it itself (_dead_letter).
        triggered = [(fn.trigger, fn) for fn in functions if fn.trigger is not None]
        for trigger, fn in triggered:
            bus.subscribe(trigger, stack._handler(fn))
        by_trigger = dict(triggered)
        if bus.on_dead_letter is None:
            bus.on_dead_letter = lambda msg, exc: stack._dead_letter(by_trigger.get(msg.topic), msg, exc)
        return stack

    def _dead_letter(self, fn: FunctionSpec | None, msg: Delivered, exc: Exception) -> None:
        """A message the bus gave up on (it kept raising: a transient error that never cleared, or a defect the
        failure rule kept retrying) fails its step exactly as a permanent error does, with the reason on the run:
        Pub/Sub's dead-lettering leaves a trace through the sweep (a stalled run names what is missing), and the
        embedded default has no sweep, so without this its record would stay `in_progress` with `errors: []`."""
        if fn is None:
            return
        error = gave_up(fn.name, self.bus.max_attempts, exc)
        log.warning("%s: gave up on message %s: %s", fn.name, msg.message_id, error)
        try:
            p = replace(self.ports, delivery_id=msg.message_id)
            record_poison(p, fn.entry_point, fn.dead_letter_topic, msg.data, msg.attributes, error)
            table = self.table or stage_table()  # one built by hand (not `create`) serves the packaged table
            row = table.row(fn.entry_point)
            finish_failed(
                p, table.route(fn.entry_point), msg.data, exc, error, lambda: row.run(p, msg.data, msg.attributes)
            )
        except Exception as again:  # the record store itself failing: the log keeps the reason
            log.error("could not record the dead letter of %s: %s", fn.name, defect_message(again), exc_info=again)

    def _handler(self, fn: FunctionSpec) -> Handler:
        def handle(data: bytes, attributes: dict[str, str], message_id: str) -> None:
            outcome = dispatch(
                self.ports,
                fn.entry_point,
                fn.dead_letter_topic,
                data,
                attributes,
                message_id=message_id,
                table=self.table,
            )
            log.debug("%s: %s", fn.name, outcome)
            if self.after_each is not None:
                self.after_each(self.ports)

        return handle

    def emit(self, event: JobEvent) -> None:
        self.bus.publish(self.ports.topology.entry_topic, event.model_dump_json().encode(), {"source": event.source})
        self.bus.drain()


def manual_event(run_uri: str, state: str | None = None, source: str = "manual") -> JobEvent:
    """An operator-triggered run: no controller verdict unless --state gives one."""
    return JobEvent(
        source=source if state else "manual",
        job_id=f"manual:{run_uri}",
        run_uri=run_uri,
        state=state or "ENDED",
        observed_at=datetime.now(UTC),
    )


def bound_run_id_of(records: RunRecords, storage: Storage, run_uri: str) -> str | None:
    """The id the run at `run_uri` is recorded under (None: no record of it), for `run --rerun`: its location's
    binding, else (a record from before the identity documents) the id its files give, if bound to this root."""
    bound = admission.location_binding(records, run_uri)
    if bound is not None:
        return bound
    try:
        legacy = run_facts(discover(storage, run_uri)).run_id
    except Exception:
        return None
    record = records.get(legacy)
    return legacy if record is not None and admission.same_location(record.run_uri, run_uri) else None


class RunNotAdmitted(PermanentError):
    """`run` refused the run before any record was made for it (admission: identity conflict, roots outside the
    run buckets, ...): the reason is what the pipeline filed, not another run's record."""


def run_embedded(
    run_uri: str,
    *,
    db_path: str | Path | None = None,
    preserve_root: str | None = None,
    state: str | None = None,
    run_id: str | None = None,
    after_each: Callable[[Ports], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> CompletionRecord | None:
    """Defaults: the records file and preserve root under $XDG_STATE_HOME/rlcleanup (see rlcleanup.paths).
    `run_id`: the id a person chose for this root (`run --run-id`), bound through the same admission as an event's
    run before the event is handled. Returns the record bound to this root, never another run's; raises
    RunNotAdmitted with the refusal when the run was refused before it had one. `after_each`: called after every
    handled message (`run` shows its progress from it). A run whose pass was interrupted (its record still
    `in_progress`, no live process holding it) is resumed, not started again (runtime/resume.py); one a live
    process holds raises RunHeld. `say`: told, in one sentence, what was resumed."""
    preserve = preserve_root or str(default_preserve_root())
    stack = EmbeddedStack.create(db_path or default_db(), preserve)
    stack.after_each = after_each
    if run_id is not None:
        admission.admit_run(stack.ports, discover(stack.ports.storage, run_uri), requested=run_id)
    bound = admission.bound_run_id(stack.ports, run_uri)
    moves = _resume(stack, bound) if bound is not None else []
    if moves:
        if say is not None:
            say(f"resuming {bound}: its last pass was interrupted; re-driving {', '.join(moves)} (done steps are kept)")
        stack.bus.drain()
        assert bound is not None
        return stack.ports.records.get(bound)
    event = manual_event(run_uri, state)
    stack.emit(event)
    bound = admission.bound_run_id(stack.ports, run_uri) or _admitted_root_id(stack.ports, run_uri)
    if bound is not None:
        return stack.ports.records.get(bound)
    filed = POISON_MESSAGES.bind(stack.ports.records, PoisonMessage).get(poison_key(event.model_dump_json().encode()))
    if filed is not None:
        raise RunNotAdmitted(filed.code or "refused", filed.message)
    return None


def _resume(stack: EmbeddedStack, run_id: str) -> list[str]:
    """Take over an interrupted pass's leases (RunHeld when a live process holds one) and publish the stage
    messages that move it on; returns their topics (none: nothing to resume)."""
    record = stack.ports.records.get(run_id)
    if record is None or record.status is not RecordStatus.in_progress:
        return []
    resume.take_over(stack.ports, run_id)
    messages = resume.resume_messages(stack.ports, run_id)
    for topic, payload in messages:
        stack.bus.publish(topic, json.dumps(payload).encode(), {"run_id": run_id, "redrive": "resume"})
    return [topic for topic, _ in messages]


def _admitted_root_id(p: Ports, run_uri: str) -> str | None:
    """The id of the root a run was admitted under when `run_uri` names it another way (Layout D: a temp root names
    its durable root, run-layout-v3.md §1)."""
    try:
        root = discover(p.storage, run_uri).run_uri
    except Exception:  # not a run root at all: the refusal, if any, was filed under the event
        return None
    return admission.bound_run_id(p, root) if root != run_uri else None
