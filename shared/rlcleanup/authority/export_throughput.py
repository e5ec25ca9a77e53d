"""The throughput an export grant's expiry preflight divides a checkpoint's bytes by (docs/authority.md §9).

Issue 49: "its bytes over the measured throughput of earlier exports of that model size, else a stated default".
An earlier export is an export grant's job whose end is recorded on its run's record
(`authority_actions[].export_job`: `bytes` the checkpoint bytes it converted, set at submission; `submitted_at`;
`ended_at` filled when its end is recorded) and that succeeded (exit 0 or Ray's `SUCCEEDED`): a failed job's
duration says nothing about how long an export takes. Its throughput is bytes / (ended_at - submitted_at).

"That model size" is the record's parameter-count class: the largest parameter count its candidates were
validated with (counted, else estimated from the shard headers), bucketed by decade ("1B-10B params"), so a 7B
and an 8B run share measurements and a 70B run does not. The median of the class's measurements is used (one
slow cluster day does not move it as a mean would); with none, or a run whose size is unknown, the deployment's
stated default (RLCLEANUP_EXPORT_THROUGHPUT_BYTES_PER_SECOND). The refusal and the preview say which, with the
numbers.

The measurements come from the records store through its port (`list_runs`: the most recently updated
MAX_LOOKUP records, newest first), never from SQL here.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlcleanup.formats.checkpoints.base import size_label
from rlcleanup.models.export_jobs import ExportJob
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.records import MAX_LOOKUP
from rlcleanup.settings import ExportSettings

_SUCCEEDED = "SUCCEEDED"  # Ray's JobStatus for a job that exited 0


class ListsRuns(Protocol):
    """What the measurement reads of the records store (RunRecords has it)."""

    def list_runs(self, limit: int = 100) -> Iterator[CompletionRecord]: ...


@dataclass(frozen=True)
class Throughput:
    """The bytes per second an export is estimated at, and where the figure comes from."""

    bytes_per_second: float
    size_class: str | None  # the record's model size class; None: unknown
    measured: list[float] = field(default_factory=list)  # the class's earlier jobs, B/s (empty: the default)

    @property
    def basis(self) -> str:
        return "measured" if self.measured else "default"

    def describe(self) -> str:
        if self.measured:
            low, high = min(self.measured), max(self.measured)
            return (
                f"the median of {len(self.measured)} earlier export job(s) of {self.size_class} models "
                f"({low:.0f}-{high:.0f} B/s)"
            )
        why = (
            f"no earlier export job of {self.size_class} models has a recorded end"
            if self.size_class
            else "the run's model size is unknown"
        )
        return f"the stated default throughput (RLCLEANUP_EXPORT_THROUGHPUT_BYTES_PER_SECOND; {why})"

    def as_doc(self) -> dict[str, Any]:
        return {
            "bytes_per_second": round(self.bytes_per_second),
            "basis": self.basis,
            "size_class": self.size_class,
            "measured_jobs": len(self.measured),
            "measured_bytes_per_second": [round(m) for m in self.measured],
            "said": self.describe(),
        }


def default_throughput(settings: ExportSettings, size_class: str | None = None) -> Throughput:
    return Throughput(settings.throughput_bytes_per_second, size_class)


def size_class(parameters: int) -> str:
    """The decade a parameter count lies in, as people name model sizes: 7.6e9 -> "1B-10B params"."""
    low = 10 ** (len(str(max(parameters, 1))) - 1)  # exact: no float log at a decade's edge
    return f"{size_label(low)}-{size_label(low * 10)} params"


def model_size_class(record: CompletionRecord) -> str | None:
    """The record's model size class: from the largest parameter count any of its candidates was validated with."""
    counts = [c.parameter_count or c.estimated_parameter_count for c in record.candidates]
    known = [n for n in counts if n]
    return size_class(max(known)) if known else None


def job_throughput(job: ExportJob) -> float | None:
    """B/s of a job that succeeded and whose end is recorded; None otherwise."""
    if job.ended_at is None or job.submitted_at is None or not job.bytes:
        return None
    if not (job.exit_code == 0 or job.state.upper() == _SUCCEEDED):
        return None
    seconds = (job.ended_at - job.submitted_at).total_seconds()
    return job.bytes / seconds if seconds > 0 else None


def measurements(records: Iterable[CompletionRecord], wanted: str) -> list[float]:
    """The throughput of every finished, successful export job on a record of the `wanted` size class."""
    found: list[float] = []
    for record in records:
        if model_size_class(record) != wanted:
            continue
        for action in record.authority_actions:
            measured = job_throughput(action.export_job) if action.export_job and action.refusal is None else None
            if measured is not None:
                found.append(measured)
    return found


def for_record(records: ListsRuns, record: CompletionRecord, settings: ExportSettings) -> Throughput:
    """The throughput this record's export grant estimates with: the median measured for its size class, else the
    stated default. The record in hand stands for its stored copy (it may be fresher)."""
    wanted = model_size_class(record)
    if wanted is None:
        return default_throughput(settings)
    others = (r for r in records.list_runs(limit=MAX_LOOKUP) if r.run_id != record.run_id)
    found = measurements([record, *others], wanted)
    if not found:
        return default_throughput(settings, wanted)
    return Throughput(statistics.median(found), wanted, sorted(found))
