"""The stage table: for every function of topology.yaml, its handler, the message its trigger carries, what its own
claim stores, and, for a fan-out member, what it stores when it fails. Member keys, member sets, barrier claims and
what each function publishes are topology.yaml's; what a barrier does is its stage module's `@barrier_work`.

Dispatch reads this table (handler lookup, the message it decodes each payload with, member failures, whether a
failure fails the run) and hands it to the handler on its ports (`Ports.stages`: the dead-letter recorder reads the
failed function's row there); the entry points, the reconciling sweep (`Topology.pipeline_keys`) and `rlcleanup watch`
(`Topology.progress`) read the topology it is checked against.
`StageTable` checks the rows against the topology when it is built and fails closed: a function without a row, a
row without a function, a member row whose function is no fan-out's member (or the reverse), a barrier without
its work, a message that is neither a pydantic model nor `bytes`. Adding a stage is a row here, its function in
topology.yaml, and one module under runtime/stages/.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel

from rlcleanup.models.events import CandidateMessage, CapturePartsMessage, JobEvent, LogScanPartsMessage, RunMessage
from rlcleanup.models.notifications import NotificationSent
from rlcleanup.models.plans import (
    CapturePlan,
    Classified,
    LogScanPlan,
    RecordFinished,
)
from rlcleanup.runtime import authority_handlers, dead_letters, notify_handler, source_handlers
from rlcleanup.runtime.envelope import decode
from rlcleanup.runtime.failures import FailedMember, FailureRoute
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages import barrier, capture, classify, select, terminal, validate
from rlcleanup.runtime.topology import Topology, load_topology

M = TypeVar("M")  # the message a row's handler takes: a pydantic model, or `bytes` for a foreign shape
Handler = Callable[[Ports, Any, dict[str, str]], str]


class UnknownEntryPoint(KeyError):
    """An entry point the stage table has no row for: nothing runs (a deployment defect, never a default)."""


@dataclass(frozen=True)
class StageRow(Generic[M]):
    """One function's row. Dispatch decodes every delivery's payload with `message` (a payload that does not match
    is InvalidMessage, before the handler runs) and hands the handler the model: no stage decodes by hand. A row
    whose trigger carries a foreign shape (a grant, a storage notification, a log entry) names `bytes`, and its
    handler parses it under its own rules. mypy holds each row's handler to its message."""

    entry_point: str
    handler: Callable[[Ports, M, dict[str, str]], str]
    message: type[M]  # what its trigger carries (`bytes`: a foreign shape the handler parses itself)
    result: type[BaseModel] | None = None  # what its own claim (topology.yaml `claim`) stores
    failed_member: FailedMember | None = None  # a fan-out member: what it stores when it fails for good

    def payload(self, data: bytes) -> M:
        """The delivery's payload as this row's message (InvalidMessage when it does not match)."""
        if self.message is bytes:
            return cast(M, data)
        return cast(M, decode(cast(type[BaseModel], self.message), data))

    def run(self, p: Ports, data: bytes, attributes: dict[str, str]) -> str:
        """The handler on the decoded payload: the one way dispatch and the embedded stack's dead letters call it."""
        return self.handler(p, self.payload(data), attributes)


ROWS: tuple[StageRow[Any], ...] = (
    StageRow("on_job_event", classify.on_job_event, JobEvent, Classified),
    StageRow("establish_terminal_state", terminal.establish_terminal_state, RunMessage, LogScanPlan),
    StageRow("scan_log_part", terminal.scan_log_part, LogScanPartsMessage, failed_member=terminal.failed_scan),
    StageRow("plan_capture", capture.plan_capture, RunMessage, CapturePlan),
    StageRow("capture_part", capture.capture_part, CapturePartsMessage, failed_member=capture.failed_copy),
    StageRow("validate_candidate", validate.validate_one, CandidateMessage, failed_member=validate.failed_validation),
    StageRow("select_candidate", select.select_candidate, RunMessage, RecordFinished),
    StageRow("apply_grant", authority_handlers.apply_grant, bytes),
    StageRow("capture_pre_cancel", authority_handlers.capture_pre_cancel, JobEvent),
    StageRow("retry_waiting_grants", authority_handlers.retry_waiting_grants, bytes),
    StageRow("notify", notify_handler.notify, bytes, NotificationSent),  # record-ready: {"run_id", "status"}
    StageRow("on_storage_event", source_handlers.on_storage_event, bytes),
    StageRow("sweep", source_handlers.sweep, bytes),
    StageRow("on_k8s_log_entry", source_handlers.on_k8s_log_entry, bytes),
    # Another function's dead letter: the recorder reads that function's row and route from the table dispatch
    # serves (`Ports.stages`), so runtime/dead_letters.py never imports the table that names it.
    StageRow("record_dead_letter", dead_letters.record_dead_letter, bytes),
)


class StageTable:
    """The rows, checked against a topology (fails closed on any mismatch)."""

    def __init__(self, rows: Sequence[StageRow[Any]], topology: Topology) -> None:
        self.topology = topology
        self.rows = {row.entry_point: row for row in rows}
        if len(self.rows) != len(rows):
            raise ValueError("stage table: an entry point has two rows")
        functions = {fn.entry_point for fn in topology.functions}
        if set(self.rows) != functions:
            raise ValueError(
                f"stage table and topology disagree: functions without a row {sorted(functions - set(self.rows))}, "
                f"rows without a function {sorted(set(self.rows) - functions)}"
            )
        for row in rows:
            if row.message is not bytes and not (isinstance(row.message, type) and issubclass(row.message, BaseModel)):
                raise ValueError(f"stage table: {row.entry_point}'s message must be a pydantic model or bytes")
            fan = topology.fan_out_of_member(row.entry_point)
            if (fan is None) != (row.failed_member is None):
                raise ValueError(f"stage table: {row.entry_point} must have failed_member iff it is a fan-out member")
        missing = {b.name for b in topology.barriers} - set(barrier.barrier_works())
        if missing:
            raise ValueError(f"stage table: barriers without @barrier_work {sorted(missing)}")
        for row in rows:
            declared = topology.function(row.entry_point).claim
            if (row.result is None) != (declared is None):
                raise ValueError(
                    f"stage table: {row.entry_point} stores a result model iff topology.yaml names its claim"
                )

    def row(self, entry_point: str) -> StageRow[Any]:
        try:
            return self.rows[entry_point]
        except KeyError:
            raise UnknownEntryPoint(
                f"no stage serves entry point {entry_point!r} (known: {sorted(self.rows)})"
            ) from None

    def route(self, entry_point: str) -> FailureRoute:
        """Where a permanent failure of this function goes: a fan-out member's claim is completed as failed (what
        it stores is its row's `failed_member`); in a stage of the run's pipeline an unfinished run is marked
        `failed`; authority and sources never fail a run (a bad grant or signal must not)."""
        fan = self.topology.fan_out_of_member(entry_point)
        return FailureRoute(
            entry_point=entry_point,
            in_pipeline=self.topology.in_pipeline(entry_point),
            member_prefix=fan.member_prefix if fan else None,
            failed_member=self.row(entry_point).failed_member,
            decode=self.row(entry_point).payload,
        )


@cache
def stage_table() -> StageTable:
    """The built-in table over the packaged topology."""
    return StageTable(ROWS, load_topology())


class StageTableSpecError(ValueError):
    """A `MODULE:ATTR` that names no importable `StageTable` (the operator's `stack up --stages` argument)."""


def import_stage_table(spec: str) -> StageTable:
    """The `StageTable` named `MODULE:ATTR`, importable on PYTHONPATH; anything else is refused. Only a development
    stack's operator names one (`rlcleanup stack up --stages`): it is wiring's to import, so the faces import no
    module they cannot name (the whiteboard's "faces get backends from the wiring" stays provable)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise StageTableSpecError(f"--stages {spec!r}: name a stage table as MODULE:ATTR (e.g. mystages.table:TABLE)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StageTableSpecError(
            f"--stages {spec!r}: cannot import {module_name} ({exc}); is it on PYTHONPATH?"
        ) from exc
    table = getattr(module, attr, None)
    if not isinstance(table, StageTable):
        raise StageTableSpecError(
            f"--stages {spec!r}: {module_name}.{attr} is {type(table).__name__}, not a StageTable"
        )
    return table
