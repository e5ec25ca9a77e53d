"""GKE LogEntries (from a Cloud Logging sink) → job events: the events log and the Job status audit log, in the
shapes Cloud Logging writes them, plus the on-k8s-log-entry handler's dedupe and dead-lettering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.models.events import JobEvent
from rlcleanup.runtime.handlers import dispatch
from rlcleanup.runtime.ports import Ports
from rlcleanup.settings import DeploymentSettings
from rlcleanup.sources import k8s

UID = "6d2c1f0e-4a7b-4f0e-9a51-0c8f5f7b2a11"
RESOURCE_LABELS = {"project_id": "ml-prod", "location": "us-central1", "cluster_name": "train-1"}


def event_entry(reason: str, kind: str = "Job", event_type: str = "Normal", message: str = "Job completed") -> bytes:
    """An entry of the GKE events log: jsonPayload is the Kubernetes Event (core/v1)."""
    return json.dumps(
        {
            "insertId": "1x2y3z",
            "logName": "projects/ml-prod/logs/events",
            "resource": {"type": "k8s_cluster", "labels": RESOURCE_LABELS},
            "timestamp": "2026-12-01T10:00:00Z",
            "receiveTimestamp": "2026-12-01T10:00:01.5Z",
            "severity": "INFO" if event_type == "Normal" else "WARNING",
            "jsonPayload": {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "math-rl.17d0", "namespace": "rl", "uid": "ev-1"},
                "involvedObject": {
                    "kind": kind,
                    "namespace": "rl",
                    "name": "math-rl",
                    "uid": UID,
                    "apiVersion": "batch/v1",
                },
                "reason": reason,
                "message": message,
                "source": {"component": "job-controller"},
                "type": event_type,
                "count": 1,
                "firstTimestamp": "2026-12-01T10:00:00Z",
                "lastTimestamp": "2026-12-01T10:00:00Z",
            },
        }
    ).encode()


def audit_entry(conditions: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> bytes:
    """A GKE Admin Activity audit entry of the job controller's status update: response is the Job."""
    return json.dumps(
        {
            "insertId": "a1",
            "logName": "projects/ml-prod/logs/cloudaudit.googleapis.com%2Factivity",
            "resource": {"type": "k8s_cluster", "labels": RESOURCE_LABELS},
            "timestamp": "2026-12-01T10:00:02Z",
            "protoPayload": {
                "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
                "serviceName": "k8s.io",
                "methodName": "io.k8s.batch.v1.jobs.status.update",
                "resourceName": "batch/v1/namespaces/rl/jobs/math-rl/status",
                "authenticationInfo": {"principalEmail": "system:serviceaccount:kube-system:job-controller"},
                "response": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": "math-rl", "namespace": "rl", "uid": UID, "annotations": annotations or {}},
                    "status": {"conditions": conditions, "failed": 3},
                },
            },
        }
    ).encode()


FAILED = [
    {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
    {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    },
]


def test_completed_event_maps_through_the_template() -> None:
    end = k8s.job_end(k8s.parse_log_entry(event_entry("Completed")))
    assert isinstance(end, k8s.JobEnd) and (end.condition, end.uid, end.cluster) == (
        "Complete",
        UID,
        "ml-prod/us-central1/train-1",
    )
    event = k8s.to_event(end, "gs://runs/{cluster}/{namespace}/{job_name}")
    assert isinstance(event, JobEvent)
    assert (event.source, event.state, event.run_uri) == ("k8s", "Complete", "gs://runs/train-1/rl/math-rl")
    assert event.is_terminal and event.verdict.value == "succeeded"


@pytest.mark.parametrize("reason", ["BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy"])
def test_failing_reasons(reason: str) -> None:
    end = k8s.job_end(k8s.parse_log_entry(event_entry(reason, event_type="Warning", message="boom")))
    assert isinstance(end, k8s.JobEnd) and end.condition == "Failed"
    event = k8s.to_event(end, "gs://runs/{job_name}")
    assert isinstance(event, JobEvent) and event.verdict.value == "failed" and event.error == f"{reason}: boom"


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (event_entry("SuccessfulCreate"), "does not end the Job"),
        (event_entry("Killing", kind="Pod"), "about a Pod"),
        (audit_entry([{"type": "Suspended", "status": "True"}]), "no Complete or Failed condition"),
        (audit_entry([{"type": "Failed", "status": "False"}]), "no Complete or Failed condition"),
    ],
)
def test_entries_that_end_no_job_are_dropped(data: bytes, why: str) -> None:
    end = k8s.job_end(k8s.parse_log_entry(data))
    assert isinstance(end, str) and why in end


def test_audit_entry_names_the_run_by_annotation() -> None:
    end = k8s.job_end(k8s.parse_log_entry(audit_entry(FAILED, {k8s.RUN_URI_ANNOTATION: "gs://b/exp/math/v1/"})))
    assert isinstance(end, k8s.JobEnd) and end.run_uri == "gs://b/exp/math/v1/"
    event = k8s.to_event(end, None)
    assert isinstance(event, JobEvent) and (event.state, event.run_uri) == ("Failed", "gs://b/exp/math/v1")
    assert event.error == "BackoffLimitExceeded: Job has reached the specified backoff limit"


def test_no_annotation_and_no_template_names_no_run() -> None:
    end = k8s.job_end(k8s.parse_log_entry(event_entry("Completed")))
    assert isinstance(end, k8s.JobEnd)
    assert "names no run" in str(k8s.to_event(end, None))


def _ports(tmp_path: Path, **settings: Any) -> tuple[Ports, list[JobEvent]]:
    bus = InProcessBus()
    seen: list[JobEvent] = []
    bus.subscribe("job-events", lambda data, attrs, mid: seen.append(JobEvent.model_validate_json(data)))
    db = tmp_path / "r.db"
    ports = Ports(
        storage=None,  # type: ignore[arg-type]
        records=SqliteRunRecords(db),
        claims=SqliteIdempotencyStore(db),
        bus=bus,
        settings=DeploymentSettings(**settings),
    )
    return ports, seen


def test_handler_publishes_one_event_per_job_end(tmp_path: Path) -> None:
    ports, seen = _ports(tmp_path, k8s_run_uri_template="gs://b/exp/{job_name}/v1")
    annotated = audit_entry(FAILED, {k8s.RUN_URI_ANNOTATION: "gs://b/exp/math-rl/v1"})
    failed_event = event_entry("BackoffLimitExceeded", event_type="Warning")
    outs = [
        dispatch(ports, "on_k8s_log_entry", "on-k8s-log-entry-dlq", d, {})
        for d in (failed_event, annotated, failed_event)
    ]
    ports.bus.drain()  # type: ignore[attr-defined]
    assert outs[0].startswith("published: ") and all(o.startswith("duplicate: ") for o in outs[1:])
    assert [(e.state, e.run_uri) for e in seen] == [("Failed", "gs://b/exp/math-rl/v1")]
    dropped = dispatch(ports, "on_k8s_log_entry", "on-k8s-log-entry-dlq", event_entry("SuccessfulCreate"), {})
    assert dropped.startswith("dropped: ")


def test_handler_dead_letters_what_is_not_a_log_entry(tmp_path: Path) -> None:
    ports, seen = _ports(tmp_path)
    out = dispatch(ports, "on_k8s_log_entry", "on-k8s-log-entry-dlq", b'{"logName": 3}', {})
    assert out == "permanent error recorded: bad_log_entry" and seen == []
