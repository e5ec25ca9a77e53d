"""What carrying out (or refusing) one grant produced; the handler files it on the grant and the record."""

from __future__ import annotations

from dataclasses import dataclass, field
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
    extra: dict[str, Any] = field(default_factory=dict)

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
            **self.extra,
        }


def refuse(reason: Refusal, detail: str, destination: str | None = None) -> Outcome:
    return Outcome(state="refused", refusal=reason, detail=redact_credentials(detail)[:2000], destination=destination)
