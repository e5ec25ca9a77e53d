"""The stage table: for every function of topology.yaml, its handler, the message its trigger carries, what its own
claim stores, and, for a fan-out member, what it stores when it fails. Member keys, member sets, barrier claims and
what each function publishes are topology.yaml's; what a barrier does is its stage module's `@barrier_work`.

Dispatch reads this table (handler lookup, member failures, whether a failure fails the run); the entry points, the
reconciling sweep (`Topology.pipeline_keys`) and `rlcleanup watch` (`Topology.progress`) read the topology it is
checked against.
`StageTable` checks the rows against the topology when it is built and fails closed: a function without a row, a
row without a function, a member row whose function is no fan-out's member (or the reverse), a barrier without
its work. Adding a stage is a row here, its function in topology.yaml, and one module under runtime/stages/.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel

from rlcleanup.models.events import CandidateMessage, CapturePartMessage, JobEvent, LogScanPartMessage, RunMessage
from rlcleanup.models.notifications import NotificationSent
from rlcleanup.models.plans import (
    CapturePlan,
    Classified,
    LogScanPlan,
    RecordFinished,
)
from rlcleanup.runtime import authority_handlers, dead_letters, notify_handler, source_handlers
from rlcleanup.runtime.failures import FailedMember, FailureRoute
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages import barrier, capture, classify, select, terminal, validate
from rlcleanup.runtime.topology import Topology, load_topology

Handler = Callable[[Ports, bytes, dict[str, str]], str]


class UnknownEntryPoint(KeyError):
    """An entry point the stage table has no row for: nothing runs (a deployment defect, never a default)."""


@dataclass(frozen=True)
class StageRow:
    entry_point: str
    handler: Handler
    message: type[BaseModel] | None  # what its trigger carries (None: a foreign shape the handler parses itself)
    result: type[BaseModel] | None = None  # what its own claim (topology.yaml `claim`) stores
    failed_member: FailedMember | None = None  # a fan-out member: what it stores when it fails for good


ROWS: tuple[StageRow, ...] = (
    StageRow("on_job_event", classify.on_job_event, JobEvent, Classified),
    StageRow("establish_terminal_state", terminal.establish_terminal_state, RunMessage, LogScanPlan),
    StageRow("scan_log_part", terminal.scan_log_part, LogScanPartMessage, failed_member=terminal.failed_scan),
    StageRow("plan_capture", capture.plan_capture, RunMessage, CapturePlan),
    StageRow("capture_part", capture.capture_part, CapturePartMessage, failed_member=capture.failed_copy),
    StageRow("validate_candidate", validate.validate_one, CandidateMessage, failed_member=validate.failed_validation),
    StageRow("select_candidate", select.select_candidate, RunMessage, RecordFinished),
    StageRow("apply_grant", authority_handlers.apply_grant, None),
    StageRow("capture_pre_cancel", authority_handlers.capture_pre_cancel, JobEvent),
    StageRow("retry_waiting_grants", authority_handlers.retry_waiting_grants, None),
    StageRow("notify", notify_handler.notify, None, NotificationSent),  # record-ready: {"run_id", "status"}
    StageRow("on_storage_event", source_handlers.on_storage_event, None),
    StageRow("sweep", source_handlers.sweep, None),
    StageRow("on_k8s_log_entry", source_handlers.on_k8s_log_entry, None),
    StageRow("record_dead_letter", dead_letters.record_dead_letter, None),  # another function's dead letter
)


class StageTable:
    """The rows, checked against a topology (fails closed on any mismatch)."""

    def __init__(self, rows: Sequence[StageRow], topology: Topology) -> None:
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

    def row(self, entry_point: str) -> StageRow:
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
        )


@cache
def stage_table() -> StageTable:
    """The built-in table over the packaged topology."""
    return StageTable(ROWS, load_topology())
