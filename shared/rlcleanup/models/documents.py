"""The auxiliary documents of the record store, one model per collection (ports/collections.py names each
collection and binds it to its model through `Documents`). Documents written before a model existed read as they
were: every field a reader did not always find has a default."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from rlcleanup.models.events import JobEvent
from rlcleanup.models.record import CompletionRecord


class Document(BaseModel):
    """A stored document or a part of one: a field no model names is refused, never kept unread."""

    model_config = ConfigDict(extra="forbid")


class KeptRecord(Document):
    """runs/{run_id}/history/{n}: an earlier record `run --rerun` kept, oldest first."""

    archived_at: datetime
    record: CompletionRecord


class RunIdBinding(Document):
    """run_ids/{id}: where the run holding this id lives."""

    run_uri: str


class RunLocation(Document):
    """run_locations/{sha256 of a location}: the id the run at that location holds."""

    run_id: str
    run_uri: str


class RunIdConflictNote(Document):
    """run_id_conflicts/{located id}: the id a run declared and was not given (another run holds it)."""

    holder: str
    run_uri: str


class EndedGrant(Document):
    """ended_grants/{grant id}: a grant that ended (used, refused, expired); kept when its run is forgotten."""

    run_id: str
    state: str
    at: datetime


class LostRun(Document):
    """lost_runs/{run_id}: a run the record store lost, the event that re-drives it, and whether it was."""

    run_id: str
    run_uri: str | None = None
    event: JobEvent | None = None  # the origin that started it; None: re-driven by its URI as a manual end
    step: str
    lost_at: datetime
    recovered_at: datetime | None = None  # re-driven from scratch (its claims dropped)
    redriven_at: datetime | None = None  # the sweep published its event once


class AttemptCount(Document):
    """delivery_attempts/{entry point:message} (a message's deliveries that hit a defect) and
    notify_attempts/{run:state:channel} (a notification's tries)."""

    attempts: int = 0
    entry_point: str | None = None


class LastTransientError(Document):
    """delivery_last_errors/{entry point:last:message hash}: the last transient error a message's deliveries hit,
    which the dead-letter recorder names if Pub/Sub gives up on it (runtime/failures.py note_transient)."""

    entry_point: str
    last_error: str


class PoisonMessage(Document):
    """poison_messages/{hash}: a delivery refused for good that names no run it could be recorded on."""

    step: str
    code: str
    message: str
    size: int
    named_run_id: str | None = None
    named_run_uri: str | None = None


class SourceSeen(Document):
    """source_seen/{hint key}: a hint a source already gave (a status version, a controller job's end, a re-drive
    or stall report), so it is given once."""

    source: str
    outcome: str | None = None
