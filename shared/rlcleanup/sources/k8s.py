"""GKE / Kubernetes Job endings → `JobEvent`s, from Cloud Logging LogEntries a log sink publishes to Pub/Sub.

In-cluster Kubernetes events expire after about an hour; GKE copies them to Cloud Logging, and a
`google_logging_project_sink` with a Pub/Sub destination publishes each matching `LogEntry` (the message data is
the LogEntry JSON: `logName`, `resource{type, labels}`, `timestamp`, `jsonPayload` or `protoPayload`). Two entry
kinds carry a Job's end, and both are read:
- the **events** log (`projects/P/logs/events`): `jsonPayload` is the Kubernetes `Event` (`involvedObject{kind:
  Job, name, namespace, uid}`, `reason`, `message`, `type`, `lastTimestamp`). The job controller's reasons:
  `Completed` ends a Job successfully; `BackoffLimitExceeded`, `DeadlineExceeded`, `PodFailurePolicy`,
  `MaxFailedIndexesExceeded` fail it. An Event does not carry the Job's annotations, so its run URI comes from the
  deployment's template over `{cluster}`, `{namespace}` and `{job_name}` (RLCLEANUP_K8S_RUN_URI_TEMPLATE).
- the **audit** log (`cloudaudit.googleapis.com%2Factivity`): `protoPayload.methodName`
  `io.k8s.batch.v1.jobs.status.update` / `.patch` with `protoPayload.response` the Job object itself: its
  `status.conditions[]` (`type` Complete | Failed, `status` "True") and `metadata.annotations`, whose
  `rlcleanup.dev/run-uri` names the run (the contract's annotation; docs/events.md).
Everything else (other reasons, pods, other resources) is dropped. Dedupe key: (cluster, job uid, condition).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlcleanup.models.events import JobEvent

SOURCE = "k8s"
RUN_URI_ANNOTATION = "rlcleanup.dev/run-uri"
COMPLETE_REASONS = frozenset({"Completed"})
FAILED_REASONS = frozenset({"BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy", "MaxFailedIndexesExceeded"})
STATUS_METHODS = ("io.k8s.batch.v1.jobs.status.update", "io.k8s.batch.v1.jobs.status.patch")


class LogEntryError(ValueError):
    """Not a LogEntry (bad input)."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class MonitoredResource(_Wire):
    type: str = ""
    labels: dict[str, str] = {}


class LogEntry(_Wire):
    log_name: str = Field(alias="logName", min_length=1)
    resource: MonitoredResource = MonitoredResource()
    timestamp: datetime
    insert_id: str | None = Field(alias="insertId", default=None)
    json_payload: dict[str, Any] | None = Field(alias="jsonPayload", default=None)
    proto_payload: dict[str, Any] | None = Field(alias="protoPayload", default=None)

    @property
    def cluster(self) -> str:
        labels = self.resource.labels
        return "/".join(x for x in (labels.get("project_id"), labels.get("location"), labels.get("cluster_name")) if x)


def parse_log_entry(data: bytes) -> LogEntry:
    try:
        return LogEntry.model_validate(json.loads(data))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)[:200]
        raise LogEntryError(f"not a Cloud Logging LogEntry: {detail}") from exc


@dataclass(frozen=True)
class JobEnd:
    cluster: str
    namespace: str
    name: str
    uid: str
    condition: str  # Complete | Failed
    reason: str
    message: str | None
    at: datetime
    run_uri: str | None

    @property
    def dedupe_key(self) -> str:
        raw = f"{self.cluster}\x00{self.uid or self.namespace + '/' + self.name}\x00{self.condition}"
        return "k8s-" + hashlib.sha256(raw.encode()).hexdigest()[:32]


def job_end(entry: LogEntry) -> JobEnd | str:
    """The Job end this entry reports, or why it reports none."""
    if entry.json_payload is not None and entry.json_payload.get("kind") == "Event":
        return _from_event(entry, entry.json_payload)
    if entry.proto_payload is not None and str(entry.proto_payload.get("methodName", "")).startswith(STATUS_METHODS):
        return _from_audit(entry, entry.proto_payload)
    return "dropped: neither a Kubernetes Event nor a Job status audit entry"


def _from_event(entry: LogEntry, event: dict[str, Any]) -> JobEnd | str:
    involved = event.get("involvedObject") or {}
    if involved.get("kind") != "Job":
        return f"dropped: an event about a {involved.get('kind') or 'nameless object'}, not a Job"
    reason = str(event.get("reason", ""))
    if reason in COMPLETE_REASONS:
        condition = "Complete"
    elif reason in FAILED_REASONS:
        condition = "Failed"
    else:
        return f"dropped: Job event {reason or '(no reason)'} does not end the Job"
    return JobEnd(
        cluster=entry.cluster,
        namespace=str(involved.get("namespace", "")),
        name=str(involved.get("name", "")),
        uid=str(involved.get("uid", "")),
        condition=condition,
        reason=reason,
        message=event.get("message"),
        at=entry.timestamp,
        run_uri=None,
    )


def _from_audit(entry: LogEntry, proto: dict[str, Any]) -> JobEnd | str:
    job = proto.get("response") or {}
    if job.get("kind") != "Job":
        return "dropped: the audit entry carries no Job object (response)"
    conditions = (job.get("status") or {}).get("conditions") or []
    done = [c for c in conditions if c.get("type") in ("Complete", "Failed") and str(c.get("status")) == "True"]
    if not done:
        return "dropped: the Job has no Complete or Failed condition yet"
    meta = job.get("metadata") or {}
    cond = done[-1]
    return JobEnd(
        cluster=entry.cluster,
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        condition=str(cond["type"]),
        reason=str(cond.get("reason", "")),
        message=cond.get("message"),
        at=entry.timestamp,
        run_uri=(meta.get("annotations") or {}).get(RUN_URI_ANNOTATION),
    )


def to_event(end: JobEnd, run_uri_template: str | None) -> JobEvent | str:
    run_uri = end.run_uri
    if not run_uri and run_uri_template:
        cluster_name = end.cluster.rsplit("/", 1)[-1]
        run_uri = run_uri_template.format(cluster=cluster_name, namespace=end.namespace, job_name=end.name)
    if not run_uri:
        return (
            f"dropped: Job {end.namespace}/{end.name} names no run (no {RUN_URI_ANNOTATION} annotation in the entry, "
            "no RLCLEANUP_K8S_RUN_URI_TEMPLATE)"
        )
    return JobEvent(
        source=SOURCE,
        job_id=f"{end.cluster}/{end.namespace}/{end.name}" + (f"#{end.uid}" if end.uid else ""),
        run_uri=run_uri.rstrip("/"),
        state=end.condition,
        observed_at=end.at,
        error=f"{end.reason}: {end.message}" if end.condition == "Failed" and end.message else None,
    )
