"""What the export grants put on the record (docs/authority.md §9): the job an export grant submitted
(authority/export.py), kept on the grant's action, and the durable copy a preserve grant made of a checkpoint
(authority/preserve.py), which a later export grant reads instead of the expiring original."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from rlcleanup.models.record_base import RunText, _Model


class JobRun(_Model):
    """What a controller says of a job's run: its state as the controller spells it, and how it ended. The record's
    export job and the end the sweep reads (ExportJobEnd) are both this, so the end is copied field for field."""

    state: str = Field(default="PENDING", description="as the controller spells it (Ray: PENDING ... SUCCEEDED)")
    exit_code: int | None = None
    message: RunText | None = None
    started_at: datetime | None = Field(default=None, description="when the controller started the job")
    ended_at: datetime | None = Field(default=None, description="when the job ended, as its controller says")


class ExportJob(JobRun):
    """Which controller runs it, under which id, with which command; `state` as the controller last said."""

    controller: str = Field(description="the job-state controller that runs it (`ray`)")
    job_id: str = Field(description="the controller's id for it (Ray: the submission id, derived from the grant)")
    argv: list[str] = Field(
        description="the command the job runs: the deployment's converter, then the request's fields"
    )
    request_digest: str = Field(description="sha256 of hf_export_request.json as the grant pinned it")
    # What a later export grant's preflight measures throughput from (authority/export_throughput.py), filled when
    # the sweep sees the job end (authority/export_follow.py; the job is never asked again after): the bytes the job
    # converts over its run time (duration_seconds; from submission to end where the controller gave no start).
    submitted_at: datetime | None = Field(default=None, description="when the grant submitted it")
    duration_seconds: float | None = Field(default=None, description="ended_at - started_at, when both are known")
    bytes: int | None = Field(
        default=None, ge=0, description="the checkpoint bytes the job converts (what the expiry preflight divides)"
    )


class CheckpointCopy(_Model):
    """One object of a preserved checkpoint: its name under the checkpoint and what its verified copy holds."""

    name: str
    size: int = Field(ge=0)
    crc32c: str | None = None
    md5: str | None = None
    sha256: str | None = Field(default=None, description="of every byte copied (a streamed copy); none server-side")
    source_fingerprint: str = Field(description="the source version the grant pinned (generation, ETag, inode...)")


class PreservedCheckpoint(_Model):
    """A checkpoint copied by a preserve grant to durable storage: where from, where to, the manifest digest the
    grant pinned, and each object's verified copy. An export grant of the step reads this copy (its expiry: none)."""

    step: int
    source: str = Field(description="the checkpoint directory that was copied")
    destination: str = Field(description="the durable copy (no lifecycle rule deletes it)")
    manifest_digest: str = Field(description="sha256 over every object's name, size, CRC32C and version, as signed")
    object_count: int = Field(ge=0)
    total_bytes: int = Field(ge=0)
    objects: list[CheckpointCopy] = Field(default_factory=list)
    marker: str = Field(description="the `_PRESERVED.json` written last, after every object verified")


class ExportJobEnd(JobRun):
    """How a submitted export job ended, as the sweep read it from its controller (authority/export_follow.py):
    the facts the record's export job and, for a job that did not succeed, its run error are written from.
    `log_tail` is the end of the job's log, bounded and with every secret-bearing line withheld."""

    ended_at: datetime  # an end is always dated: the controller's time, else when the sweep saw it ended
    succeeded: bool
    log_tail: RunText | None = None

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None:
            return None
        return max(0.0, (self.ended_at - self.started_at).total_seconds())
