"""An export job an export grant submitted (authority/export.py), as the record keeps it on the grant's action."""

from __future__ import annotations

from pydantic import Field

from rlcleanup.models.record_base import RunText, _Model


class ExportJob(_Model):
    """Which controller runs it, under which id, with which command; `state` as the controller last said."""

    controller: str = Field(description="the job-state controller that runs it (`ray`)")
    job_id: str = Field(description="the controller's id for it (Ray: the submission id, derived from the grant)")
    argv: list[str] = Field(
        description="the command the job runs: the deployment's converter, then the request's fields"
    )
    request_digest: str = Field(description="sha256 of hf_export_request.json as the grant pinned it")
    state: str = "PENDING"
    exit_code: int | None = None
    message: RunText | None = None
