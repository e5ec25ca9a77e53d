"""What the claims outside the pipeline's stages store (the stages' own are models/plans.py and models/outcomes.py):
typed, so `once(..., model=...)` writes and reads them back as these models. The stored form is
`model_dump(mode="json")`, the same JSON these claims held as plain dicts, so older claims still read."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


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


class PreCancelCaptured(_Stored):
    """`pre-cancel:<event key>`: one pre-cancel capture (authority/precancel.py `clearance` reads these)."""

    capture_uri: str
    job_id: str
    source: str
    captured_at: str
    reproducing: list[Any] = []
    run_uri: str
    layout_read: bool


class GrantApplied(BaseModel):
    """`grant:<id>`: how carrying out a grant ended (authority/outcome.py `Outcome.as_doc`), or the job that was
    started to finish it (its `state`: `uploading`, `reclaiming`). An action's own facts ride along as extra
    fields (an outcome's `extra`), kept as they were stored."""

    model_config = ConfigDict(extra="allow")

    state: str
    refusal: str | None = None
