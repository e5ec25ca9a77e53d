"""The evidence parts of the completion record: preserved objects, what a capture found missing, skipped or
expired, the deadlines a person must meet, the audit of a run's own Hub publishes and the pre-cancel capture."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from rlcleanup.models.record_base import RunText, _Model, utcnow


class PreservedObject(_Model):
    source: str
    destination: str
    size: int
    crc32c: str | None = None
    md5: str | None = None
    kind: str = "object"


class IncompleteEvidence(_Model):
    """A file a node's `sync-manifest.json` accounts for but the rendezvous does not hold (run-layout-v3.md §4)."""

    node_id: str | None = None
    manifest_uri: str
    path: str = Field(description="as the manifest names it, relative to the node's debug_artifacts/<node_id>/")
    status: str = Field(description="`missing` (listed as copied, absent) | `skipped` (the node did not copy it)")
    reason: str | None = Field(default=None, description="the manifest's reason for a skip ('budget', an error)")
    bytes: int | None = None


class ExpiredEvidence(_Model):
    """Evidence under a `tmp/ttl=<N>d/` root that was gone when rlcleanup looked (run-layout-v3.md §1): what it
    was, where, and when it died (bounds: a lifecycle rule deletes N days after creation, so not before the run's
    earliest durable object + N days, and by the time it was found missing)."""

    what: str = Field(description="the evidence class: checkpoints, attempt logs, rendezvous evidence, ...")
    uri: str
    ttl_days: int
    expired_after: datetime | None = Field(
        default=None, description="the earliest it can have expired: the run's earliest durable object + N days"
    )
    found_gone_at: datetime = Field(description="when rlcleanup listed it and found nothing")


class Deadline(_Model):
    """A needs-person item with the time after which it can no longer be done (steps/expiry.py)."""

    at: datetime
    source: str = Field(description="capture (temp evidence not preserved) | export (an owed export's checkpoint)")
    item: str = Field(description="the remaining-work item, `needs person by <at>: ...`")
    checkpoint: str | None = Field(
        default=None, description="export: the checkpoint whose `hf_export_request.json` the sweep re-reads"
    )


class HubAudit(_Model):
    """A Hub repo the run's own export job published to, read back read-only (never written): its visibility
    against what was requested, its files against the export's model manifest, a secret scan of its small text
    files and whether it loads with `from_pretrained`. `status`: checked (no problem) | problems | unreachable
    (the Hub did not answer after retries: not a pass) | not_configured (the deployment enables no audit)."""

    repo_id: RunText
    named_by: str = Field(description="where the repo was named: an export request's URI, or the training config key")
    step: int | None = Field(default=None, description="the export step whose files the repo root should hold")
    revision: RunText = "main"
    endpoint: str | None = Field(default=None, description="the Hub the deployment configures (never the run's)")
    status: str
    expected_private: bool | None = None
    visibility: str | None = Field(default=None, description="private | public as the Hub says now")
    files_checked: int = 0
    text_files_scanned: int = 0
    problems: list[RunText] = Field(default_factory=list, description="`<code>: <detail>`, hub_* codes")
    problem_codes: list[str] = Field(default_factory=list, description="the hub_* codes of `problems`, sorted, once")
    attempts: int = Field(default=0, description="read attempts (transient Hub failures are retried)")
    checked_at: datetime = Field(default_factory=utcnow)


# ---------------------------------------------------------------- end of the Hub audit block


class PreCancelCapture(_Model):
    capture_uri: str
    controller_state: str | None = None
    ranks: int = 0
    min_mean_utilization: float | None = None
    copied_objects: int = 0
    unexplained_reproducing: list[RunText] = Field(default_factory=list)
    problems: list[RunText] = Field(default_factory=list)
    # Whether every node's last sync-manifest.json was final before the capture (false: the bounded wait ran out;
    # null: the run has no rendezvous debug artifacts), and what the cancel destroys unsynced.
    final_sync: bool | None = None
    not_synced: list[RunText] = Field(default_factory=list)
