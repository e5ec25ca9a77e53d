"""Cloud Storage Pub/Sub notifications of the run buckets → `JobEvent` hints (source `gcs`).

Wire shape (cloud.google.com/storage/docs/pubsub-notifications; run-layout-v2.md §9): the message attributes
carry `eventType`, `bucketId`, `objectId`, `objectGeneration`, `payloadFormat`, and from the real service also
`notificationConfig` and `resource`; on an overwrite the new object's OBJECT_FINALIZE carries
`overwroteGeneration`. With payload `JSON_API_V1` the data is the object resource (`name`, `bucket`,
`generation`, `metageneration`, `size`, `md5Hash`, `crc32c`, `updated`, ...; int64s as strings).
fake-gcs-server (v1.54, `internal/notification/event.go`) sends the same attributes plus `eventTime` but no
`notificationConfig`/`resource`, and its payload has no `metageneration` and an `id` without the generation.
Both shapes parse into `GcsNotification`; `shape` says which one arrived.

Only the writes that mark a run's end become events (`classify_object`): a terminal `.executor_status` token
(read at the notified generation), `terminal.json`, a training or export receipt, an attempt record whose state
is terminal. Everything else (the `.executor_status.lock` heartbeat rewritten every ~30 s, RUNNING tokens,
checkpoints, logs) is dropped by name before any read. Delivery is at-least-once: `dedupe_key` is
(bucket, object, generation), and the event's `observed_at` is the object's own `updated` time so a redelivery
yields the same `JobEvent.event_key` too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlcleanup.models.events import JobEvent
from rlcleanup.steps.layout import parse_executor_status

SOURCE = "gcs"
FINALIZE = "OBJECT_FINALIZE"
# Marin's terminal tokens (run-layout-v2.md §4), legacy JSON-lines spelling included.
TERMINAL_TOKENS = frozenset({"SUCCESS", "FAILED", "DEP_FAILED", "CANCELLED"})
# Protocol attempt states (`response.state`): prepared | submitted | succeeded | failed.
_ATTEMPT_STATES = {"succeeded": "SUCCESS", "failed": "FAILED"}
_ATTEMPT_ID = re.compile(r"^[0-9a-f]{12}$")
STATUS_FILE = ".executor_status"
MAX_MARKER_BYTES = 1024 * 1024  # status tokens are a word; attempt records and receipts a few KiB


class NotificationError(ValueError):
    """The message is not a Cloud Storage notification we can read (bad input, never retried)."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class NotificationAttributes(_Wire):
    """The Pub/Sub message attributes of a storage notification (all strings on the wire)."""

    event_type: str = Field(alias="eventType", min_length=1, max_length=64)
    bucket_id: str = Field(alias="bucketId", min_length=3, max_length=222)
    object_id: str = Field(alias="objectId", min_length=1, max_length=1024)
    object_generation: int = Field(alias="objectGeneration", ge=0)
    payload_format: str = Field(alias="payloadFormat", default="JSON_API_V1")
    event_time: datetime | None = Field(alias="eventTime", default=None)
    notification_config: str | None = Field(alias="notificationConfig", default=None)  # real service only
    resource: str | None = None  # real service only
    overwrote_generation: int | None = Field(alias="overwroteGeneration", default=None)
    overwritten_by_generation: int | None = Field(alias="overwrittenByGeneration", default=None)


class ObjectResource(_Wire):
    """The JSON_API_V1 payload: the object resource as of the notified generation."""

    name: str = Field(min_length=1, max_length=1024)
    bucket: str = Field(min_length=3, max_length=222)
    generation: int = Field(ge=0)
    metageneration: int | None = None  # fake-gcs-server omits it
    size: int = Field(default=0, ge=0)
    md5_hash: str | None = Field(alias="md5Hash", default=None)
    crc32c: str | None = None
    updated: datetime | None = None
    time_created: datetime | None = Field(alias="timeCreated", default=None)


class GcsNotification(_Wire):
    attributes: NotificationAttributes
    object: ObjectResource | None = None  # None for payloadFormat NONE

    @property
    def shape(self) -> str:
        """`gcs` for the real service's shape, `fake-gcs-server` for the emulator's (no notificationConfig)."""
        return SOURCE if self.attributes.notification_config else "fake-gcs-server"

    @property
    def bucket(self) -> str:
        return self.attributes.bucket_id

    @property
    def name(self) -> str:
        return self.attributes.object_id

    @property
    def generation(self) -> int:
        return self.attributes.object_generation

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}"

    @property
    def dedupe_key(self) -> str:
        """(bucket, object, generation): a notification delivered twice is one write."""
        raw = f"{self.bucket}\x00{self.name}\x00{self.generation}"
        return hashlib.sha256(raw.encode()).hexdigest()[:32]

    @property
    def observed_at(self) -> datetime:
        """When the object was written: stable across redeliveries (eventTime is too, the clock is not)."""
        for value in (self.object.updated if self.object else None, self.attributes.event_time):
            if value is not None:
                return value if value.tzinfo else value.replace(tzinfo=UTC)
        # Neither field: the generation is the write time in microseconds on GCS (and in fake-gcs-server).
        return datetime.fromtimestamp(self.generation / 1e6, UTC)


def parse_notification(data: bytes, attributes: dict[str, str]) -> GcsNotification:
    """Both shapes; NotificationError (with what is wrong) for anything else."""
    try:
        attrs = NotificationAttributes.model_validate(attributes)
    except ValidationError as exc:
        raise NotificationError(f"not a storage notification: {_first_error(exc)}") from exc
    resource: ObjectResource | None = None
    if attrs.payload_format == "JSON_API_V1" and data:
        try:
            payload = json.loads(data)
            resource = ObjectResource.model_validate(payload)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            detail = _first_error(exc) if isinstance(exc, ValidationError) else str(exc)[:200]
            raise NotificationError(f"JSON_API_V1 payload is not an object resource: {detail}") from exc
        if (resource.bucket, resource.name, resource.generation) != (
            attrs.bucket_id,
            attrs.object_id,
            attrs.object_generation,
        ):
            raise NotificationError(
                f"payload names gs://{resource.bucket}/{resource.name}#{resource.generation}, attributes "
                f"gs://{attrs.bucket_id}/{attrs.object_id}#{attrs.object_generation}"
            )
    return GcsNotification(attributes=attrs, object=resource)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"


# ---------------------------------------------------------------- which writes mark a run's end


class RunMarker(StrEnum):
    executor_status = "executor_status"  # R/.executor_status: read the token
    terminal_manifest = "terminal_manifest"  # R/terminal.json: written once, on success
    training_receipt = "training_receipt"  # R/receipts/<attempt_id>.json (protocol v2)
    export_receipt = "export_receipt"  # R/exports/receipts/<fingerprint>.json
    attempt_record = "attempt_record"  # <attempts_root>/<attempt_id>.json: read response.state


@dataclass(frozen=True)
class ObjectClass:
    marker: RunMarker | None
    run_key: str | None  # the run root's object prefix inside the bucket (None: not a marker, or unknown yet)
    reason: str
    attempt_id: str | None = None


def classify_object(name: str) -> ObjectClass:
    """Decide from the object name alone (no read): is this write one that can mark a run's end?"""
    parts = name.split("/")
    base = parts[-1]
    parent_dir = parts[-2] if len(parts) >= 2 else ""
    root = "/".join(parts[:-1])
    if base == f"{STATUS_FILE}.lock":
        return ObjectClass(None, None, "executor heartbeat lock (rewritten every ~30 s)")
    if base == STATUS_FILE:
        return ObjectClass(RunMarker.executor_status, root, "executor status token")
    if base == "terminal.json":
        return ObjectClass(RunMarker.terminal_manifest, root, "terminal manifest (written on success)")
    if parent_dir == "receipts" and base.endswith(".json"):
        if len(parts) >= 3 and parts[-3] == "exports":
            return ObjectClass(RunMarker.export_receipt, "/".join(parts[:-3]), "export receipt")
        stem = base[: -len(".json")]
        attempt = stem if _ATTEMPT_ID.match(stem) else None
        return ObjectClass(RunMarker.training_receipt, "/".join(parts[:-2]), "training receipt", attempt)
    if parent_dir == "attempts" and base.endswith(".json") and _ATTEMPT_ID.match(base[: -len(".json")]):
        # The attempts root is R/attempts (export steps) or T/attempts (temp root): the record names R.
        return ObjectClass(RunMarker.attempt_record, None, "attempt record", base[: -len(".json")])
    return ObjectClass(None, None, "not a run-end marker (checkpoint, log, config or other output)")


@dataclass(frozen=True)
class Decision:
    """What one notification came to: an event to publish, or why it was dropped."""

    event: JobEvent | None
    reason: str


Reader = Callable[[str, int | None], bytes | None]  # (uri, generation or None for the live one) -> bytes | None


def decide(notification: GcsNotification, read: Reader) -> Decision:
    """Turn a notification into a `JobEvent` hint, or say why not. `read(uri, generation)` reads an object at a
    generation (None: the live one) and returns None when it does not exist (any more)."""
    attrs = notification.attributes
    if attrs.event_type != FINALIZE:
        return Decision(None, f"dropped: {attrs.event_type} (only OBJECT_FINALIZE can mark a run's end)")
    cls = classify_object(notification.name)
    if cls.marker is None:
        return Decision(None, f"dropped: {cls.reason}")
    bucket = notification.bucket
    if cls.marker is RunMarker.executor_status:
        raw = read(notification.uri, notification.generation)
        if raw is None:
            return Decision(None, f"dropped: {notification.uri}#{notification.generation} is gone (overwritten)")
        token = parse_executor_status(raw.decode("utf-8", errors="replace")) or "EMPTY"
        if token not in TERMINAL_TOKENS:
            overwrote = f" over generation {attrs.overwrote_generation}" if attrs.overwrote_generation else ""
            return Decision(
                None,
                f"dropped: non-terminal token {token}{overwrote} (a RUNNING over a terminal token is a resubmitted "
                "step: the finished record is kept, its next terminal token is a new event)",
            )
        return Decision(_event(notification, _run_uri(bucket, cls.run_key), token, cls), f"terminal token {token}")
    if cls.marker is RunMarker.attempt_record:
        raw = read(notification.uri, notification.generation)
        record = _json_object(raw)
        if record is None:
            return Decision(None, "dropped: attempt record unreadable or not a JSON object")
        response = _sub(record, "response")
        state = _ATTEMPT_STATES.get(str(response.get("state", "")).strip().lower())
        if state is None:
            return Decision(None, f"dropped: attempt state {response.get('state')!r} is not terminal")
        run_uri = _attempt_run_uri(record, bucket, notification.name)
        if run_uri is None:
            return Decision(None, "dropped: attempt record in a temp root names no run root (request.output_path)")
        return _unless_executor_running(notification, run_uri, state, cls, read)
    # terminal.json and receipts are written only on success.
    return _unless_executor_running(notification, _run_uri(bucket, cls.run_key), "SUCCESS", cls, read)


def _unless_executor_running(
    notification: GcsNotification, run_uri: str, state: str, cls: ObjectClass, read: Reader
) -> Decision:
    """A success manifest or attempt record is the run's end only when no Marin executor still runs it: under
    Marin the step's own status token follows (an attempt may be retried, outputs still be landing)."""
    raw = read(f"{run_uri}/{STATUS_FILE}", None)
    token = parse_executor_status(raw.decode("utf-8", errors="replace")) if raw is not None else None
    if token is not None and token not in TERMINAL_TOKENS:
        return Decision(None, f"dropped: {cls.reason}, but {STATUS_FILE} reads {token}: its own token will follow")
    return Decision(_event(notification, run_uri, state, cls), cls.reason)


def _event(notification: GcsNotification, run_uri: str, state: str, cls: ObjectClass) -> JobEvent:
    return JobEvent(
        source=SOURCE,
        # The write itself identifies the event: which object at which generation said the run ended.
        job_id=f"{notification.uri}#{notification.generation}",
        run_uri=run_uri,
        state=state,
        observed_at=notification.observed_at,
        attempt_id=cls.attempt_id,
    )


def _run_uri(bucket: str, key: str | None) -> str:
    return f"gs://{bucket}/{key}" if key else f"gs://{bucket}"


def _json_object(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _sub(value: dict[str, Any], key: str) -> dict[str, Any]:
    inner = value.get(key)
    return inner if isinstance(inner, dict) else {}


def _attempt_run_uri(record: dict[str, Any], bucket: str, name: str) -> str | None:
    """R from the record: `request.output_path`, else dirname(response.model.terminal_manifest_uri), else the
    attempts directory's parent when it is not a temp root (`.../tmp/ttl=.../`)."""
    request, model = _sub(record, "request"), _sub(_sub(record, "response"), "model")
    output = request.get("output_path")
    if isinstance(output, str) and output.startswith("gs://"):
        return output.rstrip("/")
    manifest = model.get("terminal_manifest_uri")
    if isinstance(manifest, str) and manifest.startswith("gs://"):
        return manifest.rsplit("/", 1)[0]
    root = name.rsplit("/", 2)[0] if name.count("/") >= 2 else ""
    if not root or "/tmp/ttl=" in f"/{root}/" or root.startswith("tmp/"):
        return None
    return f"gs://{bucket}/{root}"
