"""Registration: a `model_registry/{id}` row, only when the experiment declares `cleanup.registration`
and the artifact was published (its destination carries a completion marker for the same digest).

The declaration is the record's (`declared_registration`, read from the classified configuration at wrap-up): the
grant acts on what the record shows its approver, and a config edited after the run changes nothing."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rlcleanup.authority import artifact
from rlcleanup.authority.grants import Grant, Refusal
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.publish import read_marker
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.collections import MODEL_REGISTRY
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.facts import safe_run_id

REGISTRY = MODEL_REGISTRY.name


class RegistryRow(BaseModel):
    """model_registry/{row id}: one checkpoint a register grant recorded."""

    model_config = ConfigDict(extra="forbid")
    registry: str
    model_name: str | None = None
    training_type: str = "RL"  # registry tools default to SFT
    run_id: str
    step: int | None = None
    digest: str | None = None
    location: str | None = None
    grant_id: str
    base_model: str | None = None
    source_revision: dict[str, str] = Field(default_factory=dict)


DOES_NOT_APPLY = "registration does not apply: the experiment declares no cleanup.registration"


def register(storage: Storage, records: RunRecords, record: CompletionRecord, grant: Grant) -> Outcome:
    decl = record.declared_registration
    if decl is None:
        return Outcome(state="not_applicable", refusal=Refusal.not_applicable, detail=DOES_NOT_APPLY)
    pinned = artifact.pin(storage, record, grant)
    if isinstance(pinned, Outcome):
        return pinned
    candidate = pinned.candidate
    assert grant.destination is not None
    marker = read_marker(storage, grant.destination)
    if marker is None or marker.get("digest") != candidate.digest or marker.get("step") != candidate.step:
        return refuse(
            Refusal.destination_unverified,
            f"{grant.destination} holds no completed publish of digest {candidate.digest}",
            grant.destination,
        )
    row_id = safe_run_id(f"{decl.model_name or record.run_id}-{record.run_id}-step{candidate.step}")
    row = RegistryRow(
        registry=decl.registry,
        model_name=decl.model_name,
        run_id=record.run_id,
        step=candidate.step,
        digest=candidate.digest,
        location=grant.destination,
        grant_id=grant.grant_id,
        base_model=record.base_model,
        source_revision=dict(record.source_revision),
    )
    rows = MODEL_REGISTRY.bind(records, RegistryRow)
    created = rows.put(row_id, row, only_if_absent=True)
    existing = rows.get(row_id)
    if not created and (existing is None or existing.digest != candidate.digest):
        return refuse(Refusal.destination_conflict, f"{REGISTRY}/{row_id} exists for another artifact")
    return Outcome(
        state="registered",
        destination=grant.destination,
        uri=f"{REGISTRY}/{row_id}",
        detail=f"registry {decl.registry}, model {decl.model_name}",
    )
