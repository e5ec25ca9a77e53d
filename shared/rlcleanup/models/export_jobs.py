"""What the export grants put on the record (docs/authority.md §9): the job an export grant submitted
(authority/export.py), kept on the grant's action, and the durable copy a preserve grant made of a checkpoint
(authority/preserve.py), which a later export grant reads instead of the expiring original."""

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
    # What a later export grant's preflight measures throughput from (authority/export_throughput.py): the bytes
    # the job converts over the time from its submission to its recorded end. `ended_at` is filled by whatever
    # records the job's end; a job without it is not measured.
    submitted_at: datetime | None = Field(default=None, description="when the grant submitted it")
    ended_at: datetime | None = Field(default=None, description="when the job ended, as recorded after it ended")
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
