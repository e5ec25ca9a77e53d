"""Publish a job-state change to `job-events` (what a controller watcher does), e.g. on the local stack."""

from __future__ import annotations

from datetime import UTC, datetime

from rlcleanup.models.events import JobEvent


def job_event(
    run_uri: str,
    state: str,
    *,
    source: str = "iris",
    job_id: str | None = None,
    observed_at: datetime | str | None = None,
    **extra: object,
) -> JobEvent:
    """A JobEvent; job_id defaults to `<source>:<run_uri>`, observed_at to now. Unset extras are left out."""
    return JobEvent.model_validate(
        {
            "source": source,
            "job_id": job_id or f"{source}:{run_uri}",
            "run_uri": run_uri,
            "state": state,
            "observed_at": observed_at or datetime.now(UTC),
            **{k: v for k, v in extra.items() if v is not None},
        }
    )


def publish_event(event: JobEvent, project: str | None = None, topic: str | None = None) -> str:
    """Publish on the wiring's bus (Pub/Sub, PUBSUB_EMULATOR_HOST honoured) to `topic`, by default where job events
    enter the pipeline (the topology's entry topic); returns the message id."""
    from rlcleanup.runtime.backends import open_bus
    from rlcleanup.runtime.topology import load_topology

    return open_bus(project).publish(
        topic or load_topology().entry_topic,
        event.model_dump_json().encode(),
        {"source": event.source, "state": event.state},
    )


def job_event_schema() -> str:
    """The JobEvent JSON Schema as published in docs/job-event.schema.json (a unit test checks for drift)."""
    import json

    schema = JobEvent.model_json_schema()
    schema["title"] = "JobEvent"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(job_event_schema())
