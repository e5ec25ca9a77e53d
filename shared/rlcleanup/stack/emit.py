"""Publish a job-state change to `job-events` (what a controller watcher does), e.g. on the local stack."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from rlcleanup.models.events import JobEvent


def job_event(
    run_uri: str,
    state: str,
    *,
    source: str = "iris",
    job_id: str | None = None,
    observed_at: datetime | None = None,
    **extra: object,
) -> JobEvent:
    return JobEvent.model_validate(
        {
            "source": source,
            "job_id": job_id or f"{source}:{run_uri}",
            "run_uri": run_uri,
            "state": state,
            "observed_at": observed_at or datetime.now(UTC),
            **extra,
        }
    )


def publish_event(event: JobEvent, project: str | None = None, topic: str = "job-events") -> str:
    """Publish with the Pub/Sub client (PUBSUB_EMULATOR_HOST honoured); returns the message id."""
    from rlcleanup.adapters.pubsub_bus import PubSubBus

    bus = PubSubBus(project=project or os.environ.get("GOOGLE_CLOUD_PROJECT", "rlcleanup-local"))
    return bus.publish(topic, event.model_dump_json().encode(), {"source": event.source, "state": event.state})
