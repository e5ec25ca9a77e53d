"""The embedded default: the same handlers wired by the same topology, over in-process bus + SQLite + files."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rlcleanup.adapters.inprocess_bus import Handler, InProcessBus
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.errors import PermanentError
from rlcleanup.models.events import JobEvent
from rlcleanup.models.record import CompletionRecord
from rlcleanup.paths import default_db, default_preserve_root
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import Storage
from rlcleanup.runtime import admission
from rlcleanup.runtime.handlers import POISON_COLLECTION, dispatch, poison_key, resolve_run_id
from rlcleanup.runtime.ports import Ports, hub_upload_job, large_copy_job
from rlcleanup.runtime.stage_table import StageTable, stage_table
from rlcleanup.runtime.topology import FunctionSpec
from rlcleanup.settings import DeploymentSettings, load_settings
from rlcleanup.steps.facts import run_facts
from rlcleanup.steps.layout import discover

log = logging.getLogger(__name__)

__all__ = ["EmbeddedStack", "RunNotAdmitted", "bound_run_id_of", "manual_event", "resolve_run_id", "run_embedded"]


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
        bus = bus or InProcessBus()
        topology = (table or stage_table()).topology
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
        )
        stack = cls(ports=ports, bus=bus, table=table)
        for fn in topology.functions:  # every function has its stage table row (runtime/stage_table.py)
            bus.subscribe(fn.trigger, stack._handler(fn))
        return stack

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
) -> CompletionRecord | None:
    """Defaults: the records file and preserve root under $XDG_STATE_HOME/rlcleanup (see rlcleanup.paths).
    `run_id`: the id a person chose for this root (`run --run-id`), bound through the same admission as an event's
    run before the event is handled. Returns the record bound to this root, never another run's; raises
    RunNotAdmitted with the refusal when the run was refused before it had one. `after_each`: called after every
    handled message (`run` shows its progress from it)."""
    preserve = preserve_root or str(default_preserve_root())
    stack = EmbeddedStack.create(db_path or default_db(), preserve)
    stack.after_each = after_each
    if run_id is not None:
        admission.admit_run(stack.ports, discover(stack.ports.storage, run_uri), requested=run_id)
    event = manual_event(run_uri, state)
    stack.emit(event)
    bound = admission.bound_run_id(stack.ports, run_uri) or _admitted_root_id(stack.ports, run_uri)
    if bound is not None:
        return stack.ports.records.get(bound)
    filed = stack.ports.records.get_doc(POISON_COLLECTION, poison_key(event.model_dump_json().encode()))
    if filed is not None:
        raise RunNotAdmitted(str(filed.get("code") or "refused"), str(filed.get("message") or ""))
    return None


def _admitted_root_id(p: Ports, run_uri: str) -> str | None:
    """The id of the root a run was admitted under when `run_uri` names it another way (Layout D: a temp root names
    its durable root, run-layout-v3.md §1)."""
    try:
        root = discover(p.storage, run_uri).run_uri
    except Exception:  # not a run root at all: the refusal, if any, was filed under the event
        return None
    return admission.bound_run_id(p, root) if root != run_uri else None
