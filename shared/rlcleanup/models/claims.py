"""What the claims outside the pipeline's stages store (the stages' own are models/plans.py and models/outcomes.py):
typed, so `once(..., model=...)` writes and reads them back as these models. The stored form is
`model_dump(mode="json")`, the same JSON these claims held as plain dicts, so older claims still read."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from rlcleanup.models.export_jobs import ExportJob, PreservedCheckpoint

PRE_CANCEL = "pre-cancel:"  # the key prefix of a run's pre-cancel captures (PreCancelCaptured)


class _Stored(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StorageNoticeHandled(_Stored):
    """`storage:<bucket/object#generation>`: what one Cloud Storage notification came to."""

    object: str
    generation: int | None = None
    shape: str
    outcome: str
    published: bool


class K8sEndPublished(_Stored):
    """`k8s:<job end>`: the job event a Kubernetes Job's end was published as."""

    job: str
    state: str


class ReproducingFailure(_Stored):
    """A failure that reproduced across attempts, as a pre-cancel capture saw it."""

    signature: str
    signature_id: str
    attempts: list[str] = []
    cause_recorded: bool = False


class PreCancelCaptured(_Stored):
    """`pre-cancel:<event key>`: one pre-cancel capture (authority/precancel.py `clearance` reads these)."""

    capture_uri: str
    job_id: str
    source: str
    captured_at: str
    reproducing: list[ReproducingFailure] = []
    run_uri: str
    layout_read: bool


class ManifestCheck(_Stored):
    """A published model manifest's check (authority/manifest_check.py `ManifestVerdict.as_doc`)."""

    identity: str
    sha256_verified: list[str] = []
    sha256_not_checked: list[str] = []
    statement: str


class GrantApplied(BaseModel):
    """`grant:<id>`: how carrying out a grant ended (authority/outcome.py `Outcome.as_doc`), or the job that was
    started to finish it (its `state`: `uploading`, `reclaiming`, with the job's `execution`). Each fact an action
    adds is a field of its own (`Outcome.ACTION_FACTS`); a claim holding anything else is refused, never kept
    as an untyped extra."""

    model_config = ConfigDict(extra="forbid")

    state: str
    refusal: str | None = None
    detail: str = ""
    destination: str | None = None
    verified_objects: int = 0
    uri: str | None = None
    reclaimed_bytes: int = 0
    execution: str | None = None  # the upload job started to finish it
    twins: list[dict[str, Any]] | None = None  # publish: per exported object its pinned source and its copy's proof
    model_manifest: ManifestCheck | None = None  # publish, hand-off
    purged: list[str] | None = None  # purge: the quarantined objects deleted
    deleted: list[str] | None = None  # reclaim: the objects moved to quarantine
    kept_changed: list[str] | None = None  # reclaim: changed after the plan, kept
    quarantined: list[str] | None = None  # reclaim: where each moved object is now
    refused_objects: list[dict[str, Any]] | None = None  # reclaim: what the retention plan would not let go
    export_job: ExportJob | None = None  # export: the job submitted on the run's controller
    preserved: PreservedCheckpoint | None = None  # preserve: the checkpoint's verified durable copy
