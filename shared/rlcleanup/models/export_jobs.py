"""An export job an export grant submitted (authority/export.py), as the record keeps it on the grant's action, and
what a later pass measured of it once it found the export the job wrote (steps/export_measure.py)."""

from __future__ import annotations

from datetime import datetime

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
    submitted_at: datetime | None = Field(
        default=None, description="when the grant submitted it (records before: none)"
    )
    checkpoint_bytes: int | None = Field(default=None, ge=0, description="the checkpoint's bytes the preflight listed")


class ExportMeasurement(_Model):
    """One export a grant's job wrote, as a later pass of the run found it: the job's duration runs from its
    submission to the export's newest object, and the checkpoint's bytes over it are the throughput the next export
    grant's expiry preflight uses (the same quantity the preflight divides)."""

    step: int
    job_id: str
    export_uri: str
    export_bytes: int = Field(ge=0, description="the export's bytes as found")
    checkpoint_bytes: int = Field(ge=0, description="the checkpoint's bytes when the job was submitted")
    seconds: float = Field(gt=0, description="submission to the export's newest object")

    @property
    def throughput_bytes_per_second(self) -> float:
        return self.checkpoint_bytes / self.seconds
