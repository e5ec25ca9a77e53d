"""What each fan-out member stores when it ends: `{ok, error?}` plus what the fan-in needs.

A barrier counts *completions*: a member that failed (a permanent error, or a defect past its retry budget) is
stored with `ok=False` and says what it could not do, so the fan-in proceeds with the others instead of waiting
for ever. The stored form is `model_dump(mode="json")`, read back with `model_validate` (older results written
before `ok` existed read as ok=True).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field, field_validator

from rlcleanup.errors import redact_credentials
from rlcleanup.models.record import Candidate, ResumeSafety


class MemberError(BaseModel):
    code: str
    message: str

    @field_validator("message")
    @classmethod
    def _no_credentials(cls, value: str) -> str:
        return redact_credentials(value)


class MemberOutcome(BaseModel):
    ok: bool = True
    error: MemberError | None = None


class LogScanOutcome(MemberOutcome):
    uri: str | None = None  # the stored part scan (None when the part failed)
    files: int = 0
    bytes: int = 0
    problems: int = 0
    unread: list[str] = Field(default_factory=list)  # log files this part could not scan


class CapturePartOutcome(MemberOutcome):
    objects: int = 0
    bytes: int = 0
    unpreserved: list[str] = Field(default_factory=list)  # sources this part could not preserve
    unpreserved_expires_at: datetime | None = None  # when the first of them dies (temp storage), else None


class ValidationOutcome(MemberOutcome):
    candidate: Candidate | None = None  # for `candidate:<step>` targets
    resume_safety: ResumeSafety | None = None  # for the `resume` target
