"""Handlers of the event sources: Cloud Storage notifications (on-storage-event) → job-events.

Each source handler turns what it received into `JobEvent` hints on `job-events` and nothing else: classifying,
settling and capturing stay with on-job-event and the stages after it, whose claim keys make a duplicate or late
hint harmless. Dropped notifications (heartbeat locks, logs, checkpoints) cost one attribute check: no read, no
record-store call.
"""

from __future__ import annotations

import logging
from typing import Any

from rlcleanup.models.events import JobEvent
from rlcleanup.runtime.claims import once
from rlcleanup.runtime.errors import PermanentError
from rlcleanup.runtime.ports import Ports
from rlcleanup.sources import gcs_notifications as gcsn
from rlcleanup.steps.facts import safe_run_id
from rlcleanup.uris import basename, parent

log = logging.getLogger(__name__)
JOB_EVENTS = "job-events"


def publish_job_event(p: Ports, event: JobEvent) -> None:
    p.bus.publish(JOB_EVENTS, event.model_dump_json().encode(), {"source": event.source, "state": event.state})


def run_id_hint(run_uri: str) -> str:
    """The id a Layout A run gets (`<name>-<version>`), used only to file a source's claims beside the run."""
    return safe_run_id(f"{basename(parent(run_uri))}-{basename(run_uri)}")


def on_storage_event(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    try:
        notification = gcsn.parse_notification(data, attributes)
    except gcsn.NotificationError as exc:
        raise PermanentError("bad_notification", str(exc)) from exc
    cls = gcsn.classify_object(notification.name)
    if notification.attributes.event_type != gcsn.FINALIZE or cls.marker is None:
        return gcsn.decide(notification, _no_read).reason  # decided from attributes alone: cheap, no claim

    def read(uri: str, generation: int | None) -> bytes | None:
        return read_generation(p, uri, generation, gcsn.MAX_MARKER_BYTES)

    def work() -> dict[str, Any]:
        decision = gcsn.decide(notification, read)
        if decision.event is not None:
            publish_job_event(p, decision.event)
        return {
            "object": notification.uri,
            "generation": notification.generation,
            "shape": notification.shape,
            "outcome": decision.reason,
            "published": decision.event is not None,
        }

    # Dedupe on (bucket, object, generation): the claim is filed beside the run the object belongs to.
    run_root = f"gs://{notification.bucket}/{cls.run_key}" if cls.run_key else parent(parent(notification.uri))
    hint = run_id_hint(run_root)
    result = once(p, hint, f"storage:{notification.dedupe_key}", work)
    if result is None:
        return f"duplicate: {notification.uri}#{notification.generation} already handled"
    prefix = "published" if result["published"] else "recorded"
    return f"{prefix}: {result['outcome']} ({notification.shape} notification)"


def read_generation(p: Ports, uri: str, generation: int | None, max_bytes: int) -> bytes | None:
    """The object at a generation when the storage can (GCS), else the live object (local files have one)."""
    reader = getattr(p.storage, "read_generation", None)
    if reader is not None:
        data: bytes | None = reader(uri, generation, max_bytes)
        return data
    if p.storage.stat(uri) is None:
        return None
    return p.storage.read_range(uri, 0, max_bytes)


def _no_read(uri: str, generation: int | None) -> bytes | None:
    raise AssertionError("decided from the attributes alone")  # pragma: no cover - guarded by the caller
