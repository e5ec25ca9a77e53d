"""The events rlcleanup sends downstream when a verified model changes place: `model-published` (a verified publish
or hand-off), `model-reclaimed` and `model-restored`, on the `model-events` topic (docs/events-out.md).

Each is a CloudEvents 1.0 event in the JSON event format, sent in the Pub/Sub binding's *structured* content mode:
the whole event is the message data and the `Content-Type` attribute is `application/cloudevents+json`; the
binding allows the binary mode's `ce-` attributes beside it (its section 3.2.3), and we set them for `id`, `type`,
`source`, `subject`, `time` and `specversion` so a subscription can filter on the type without reading the data.
Binding followed: cloudevents/spec `pubsub-protocol-binding.md` at 1011acc9e362168f68026e5d152fc2ef73a5e900
(sections 3.1.3.1 attribute names, 3.2 structured mode).

Delivery is at least once (a redelivered grant application publishes again): the event `id` is the dedupe key, a
digest of the event type, the grant, the destination and the manifest digest, so every copy of one announcement
carries the same id and two different announcements never share one.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SPECVERSION: Literal["1.0"] = "1.0"
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
DATA_CONTENT_TYPE: Literal["application/json"] = "application/json"


class ModelEventType(StrEnum):
    published = "dev.rlcleanup.model.published"
    reclaimed = "dev.rlcleanup.model.reclaimed"
    restored = "dev.rlcleanup.model.restored"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GrantRef(_Strict):
    """The signed grant that made the change (a restore names the reclaim grant whose quarantine it undid)."""

    grant_id: str = Field(description="The grant's id (its ledger document: runs/{run_id}/grants/{grant_id}).")
    action: str = Field(description="publish | handoff | reclaim (the grant's action).")
    granted_by: str | None = Field(default=None, description="The approver who signed it.")


class ModelEventData(_Strict):
    """What a subscriber needs to act on the model without reading rlcleanup's record store."""

    run_id: str = Field(description="The run's id in the record store.")
    run_uri: str = Field(description="The run's durable root R (gs://, s3:// or a path).")
    step: int | None = Field(description="The training step of the exported model.")
    destination: str | None = Field(
        description="Where the model now is: the publish or hand-off destination (gs://, s3://, hf://, a path); for "
        "a reclaim or restore, the grant's destination if it named one."
    )
    manifest_digest: str | None = Field(
        description="The digest the grant signed: sha256 over the export's object names, sizes and checksums."
    )
    model_identity: str | None = Field(
        description="sha256:<hex> identity of the export's .marinskyrl-model-manifest.json; null without a manifest."
    )
    base_model: str | None = Field(description="The model it was trained from (an adapter's base model).")
    kind: str | None = Field(description="full (a whole model) or adapter (a LoRA adapter of base_model).")
    provenance_uri: str | None = Field(
        description="The publish's provenance.json (or the Hub commit; for a reclaim, the stored reclaim plan)."
    )
    verified_objects: int = Field(default=0, description="Objects verified at the destination (deleted: reclaim).")
    reclaimed_bytes: int = Field(default=0, description="Bytes a reclaim freed (0 for the other events).")
    restored_objects: list[str] = Field(default_factory=list, description="What a restore put back (restore only).")
    grant: GrantRef = Field(
        description="The signed grant that made the change (a restore names the reclaim grant it undid)."
    )
    record_url: str | None = Field(
        description="The run's completion record in the Cloud Console (Firestore); null for a local record store."
    )


class ModelEvent(_Strict):
    """A CloudEvents 1.0 event (JSON format). `id` is the dedupe key: the same for every copy of one announcement."""

    specversion: Literal["1.0"] = SPECVERSION
    type: ModelEventType = Field(description="dev.rlcleanup.model.published | .reclaimed | .restored")
    source: str = Field(description="The deployment that sent it: //rlcleanup/projects/{project} (or /local).")
    id: str = Field(description="Dedupe key: sha256 of type, grant id, destination and manifest digest (hex).")
    time: datetime = Field(description="When the change was recorded (RFC 3339).")
    subject: str = Field(description="runs/{run_id}/steps/{step}")
    datacontenttype: Literal["application/json"] = DATA_CONTENT_TYPE
    data: ModelEventData

    def pubsub_attributes(self) -> dict[str, str]:
        """The structured mode's Content-Type, and the binary mode's `ce-` attributes for the context fields."""
        return {
            "Content-Type": STRUCTURED_CONTENT_TYPE,
            "ce-specversion": self.specversion,
            "ce-id": self.id,
            "ce-type": self.type.value,
            "ce-source": self.source,
            "ce-subject": self.subject,
            "ce-time": self.time.isoformat(),
            "run_id": self.data.run_id,
        }

    def message(self) -> bytes:
        return self.model_dump_json().encode()


def event_id(
    kind: ModelEventType,
    grant_id: str,
    destination: str | None,
    manifest_digest: str | None,
    objects: tuple[str, ...] = (),
) -> str:
    """The dedupe key: the same inputs (a redelivery, a re-run of the same grant) always give the same id.
    `objects`: what a restore put back, so a partial restore and the later restore of the rest are two events."""
    parts = [kind.value, grant_id, destination or "", manifest_digest or "", *objects]
    key = json.dumps(parts, separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()


def event_source(project: str | None) -> str:
    return f"//rlcleanup/projects/{project}" if project else "//rlcleanup/local"


def model_event_schema() -> str:
    """The ModelEvent JSON Schema as published in docs/model-event.schema.json (a unit test checks for drift)."""
    schema = ModelEvent.model_json_schema()
    # What a subscriber receives: every field is always sent, those defaulted when we build one (specversion,
    # datacontenttype) included, so the published schema requires them all.
    schema["required"] = list(ModelEvent.model_fields)
    schema["title"] = "ModelEvent"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(model_event_schema())
