"""The auxiliary documents of the record store, one model per collection (ports/collections.py names each
collection and binds it to its model through `Documents`). Documents written before a model existed read as they
were: every field a reader did not always find has a default."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from rlcleanup.models.record import CompletionRecord


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KeptRecord(_Document):
    """runs/{run_id}/history/{n}: an earlier record `run --rerun` kept, oldest first."""

    archived_at: datetime
    record: CompletionRecord


class RunIdBinding(_Document):
    """run_ids/{id}: where the run holding this id lives."""

    run_uri: str


class RunLocation(_Document):
    """run_locations/{sha256 of a location}: the id the run at that location holds."""

    run_id: str
    run_uri: str


class RunIdConflictNote(_Document):
    """run_id_conflicts/{located id}: the id a run declared and was not given (another run holds it)."""

    holder: str
    run_uri: str


class EndedGrant(_Document):
    """ended_grants/{grant id}: a grant that ended (used, refused, expired); kept when its run is forgotten."""

    run_id: str
    state: str
    at: datetime
