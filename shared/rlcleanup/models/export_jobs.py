"""An export job an export grant submitted (authority/export.py), as the record keeps it on the grant's action."""

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
    # Filled when the sweep sees the job end (authority/export_follow.py): the job is never asked again after.
    started_at: datetime | None = Field(default=None, description="when the controller started the job")
    ended_at: datetime | None = Field(default=None, description="when the job ended, as its controller says")
    duration_seconds: float | None = Field(default=None, description="ended_at - started_at, when both are known")


class ExportJobEnd(_Model):
    """How a submitted export job ended, as the sweep read it from its controller (authority/export_follow.py):
    the facts the record's export job and, for a job that did not succeed, its run error are written from.
    `log_tail` is the end of the job's log, bounded and with every secret-bearing line withheld."""

    state: str = Field(description="the controller's terminal state, as it spells it (Ray: SUCCEEDED/FAILED/STOPPED)")
    succeeded: bool
    exit_code: int | None = None
    message: RunText | None = None
    started_at: datetime | None = None
    ended_at: datetime
    log_tail: RunText | None = None

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None:
            return None
        return max(0.0, (self.ended_at - self.started_at).total_seconds())
