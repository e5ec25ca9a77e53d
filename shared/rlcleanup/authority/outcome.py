"""What carrying out (or refusing) one grant produced; the handler files it on the grant and the record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlcleanup.authority.grants import Refusal
from rlcleanup.errors import redact_credentials


@dataclass
class Outcome:
    state: str  # published | handed_off | registered | reclaimed | cleared | refused | not_applicable | withheld
    refusal: Refusal | None = None
    detail: str = ""
    destination: str | None = None
    verified_objects: int = 0
    uri: str | None = None  # provenance.json, reclaim plan or capture summary
    reclaimed_bytes: int = 0
    # What an action adds (each stored only when set; models/claims.py GrantApplied has one field per fact):
    twins: list[dict[str, Any]] | None = None  # publish: per exported object its pinned source and its copy's proof
    model_manifest: dict[str, Any] | None = None  # publish, hand-off: the model manifest's check (ManifestCheck)
    purged: list[str] | None = None  # purge: the quarantined objects deleted
    deleted: list[str] | None = None  # reclaim: the objects deleted (moved to quarantine)
    kept_changed: list[str] | None = None  # reclaim: objects changed after the plan, kept
    quarantined: list[str] | None = None  # reclaim: where each moved object is now
    refused_objects: list[dict[str, Any]] | None = None  # reclaim: what the retention plan would not let go
    export_job: dict[str, Any] | None = None  # export: the job submitted on the run's controller (ExportJob)
    preserved: dict[str, Any] | None = None  # preserve: the checkpoint's verified durable copy (PreservedCheckpoint)

    @property
    def refused(self) -> bool:
        return self.refusal is not None

    def as_doc(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "refusal": self.refusal.value if self.refusal else None,
            "detail": self.detail,
            "destination": self.destination,
            "verified_objects": self.verified_objects,
            "uri": self.uri,
            "reclaimed_bytes": self.reclaimed_bytes,
            **{name: value for name in ACTION_FACTS if (value := getattr(self, name)) is not None},
        }


ACTION_FACTS = (
    "twins",
    "model_manifest",
    "purged",
    "deleted",
    "kept_changed",
    "quarantined",
    "refused_objects",
    "export_job",
    "preserved",
)


def refuse(reason: Refusal, detail: str, destination: str | None = None) -> Outcome:
    return Outcome(state="refused", refusal=reason, detail=redact_credentials(detail)[:2000], destination=destination)
