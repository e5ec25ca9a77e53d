"""The sweep's re-check of runs with a deadline (steps/expiry.py): a finished record that is `needs_person`
because evidence or an owed export's checkpoint dies soon is looked at again on every records sweep.

Per deadline of an owed export, the checkpoint's `hf_export_request.json` is read again: a request that is now
`complete` (the export job ran) closes the item. A deadline that has passed since the last look is said once, as
an error on the record (`deadline_passed`), and its item says the evidence died; nothing is re-driven (the
pipeline's work is done; only a person, or the run's own export job, can meet the deadline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rlcleanup.errors import RunErrorCode
from rlcleanup.models.record import CompletionRecord, Deadline, ExportRequestState, RunError
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.records import RunRecords
from rlcleanup.steps.expiry import DEADLINE_PREFIX, earliest, stamp
from rlcleanup.steps.remaining import Remaining

COMPLETE = "complete"


@dataclass(frozen=True)
class Recheck:
    """What the sweep changes on one record: its fields and the errors it adds (both empty: nothing changed)."""

    fields: dict[str, Any]
    errors: list[RunError]


def deadline_records(records: RunRecords, limit: int) -> list[CompletionRecord]:
    """Finished records waiting on a person against a deadline (the records scan's second question)."""
    return [r for r in records.list_runs(limit=limit) if r.status is RecordStatus.needs_person and r.deadlines]


def recheck(
    record: CompletionRecord, now: datetime, read_request: Callable[[str], ExportRequestState | None]
) -> Recheck:
    """The record's deadlines against `now` and the export requests as they are now. `read_request(checkpoint
    uri)` reads the request beside a checkpoint the record already names (no location comes from elsewhere)."""
    kept: list[Deadline] = []
    items = list(record.remaining_work)
    errors: list[RunError] = []
    for deadline in record.deadlines:
        if deadline.source == "export" and deadline.checkpoint is not None:
            request = read_request(deadline.checkpoint)
            if request is not None and request.status == COMPLETE:  # the export job ran: nothing is owed
                items = [item for item in items if item != deadline.item]
                continue
        if deadline.at <= now and not deadline.item.startswith(_passed(deadline.at)):
            passed = deadline.item.replace(f"{DEADLINE_PREFIX}{stamp(deadline.at)}:", _passed(deadline.at), 1)
            errors.append(RunError(step="sweep", code=RunErrorCode.deadline_passed, message=passed[:2000]))
            items = [passed if item == deadline.item else item for item in items]
            deadline = deadline.model_copy(update={"item": passed})
        kept.append(deadline)
    if kept == record.deadlines:
        return Recheck({}, [])
    return Recheck(
        {
            "deadlines": [d.model_dump(mode="json") for d in kept],
            "evidence_deadline": earliest(d.at for d in kept),
            "remaining_work": items,
            "status": Remaining(items).status.value,
        },
        errors,
    )


def _passed(at: datetime) -> str:
    return f"{DEADLINE_PREFIX}{stamp(at)} (passed):"
