"""Typed messages: the job-state-change event we accept, and the internal step messages between functions."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlcleanup.steps.capture import CapturePart
from rlcleanup.steps.logscan import LogScanPart
from rlcleanup.steps.terminal import IRIS_JOB_STATES

# Terminal states by source; everything else is non-terminal (recorded and ignored).
_TERMINAL = {
    "iris": {"4", "5", "6", "7", "8", "SUCCEEDED", "FAILED", "KILLED", "WORKER_FAILED", "UNSCHEDULABLE"},
    "ray": {"SUCCEEDED", "FAILED", "STOPPED"},
    "skypilot": {
        "SUCCEEDED",
        "CANCELLED",
        "FAILED",
        "FAILED_SETUP",
        "FAILED_PRECHECKS",
        "FAILED_NO_RESOURCE",
        "FAILED_CONTROLLER",
    },
    "k8s": {"COMPLETE", "FAILED", "SUCCEEDED"},
    "marin": {"SUCCESS", "FAILED", "DEP_FAILED"},
    # An operator ran rlcleanup by hand: the run has ended but no controller verdict comes with it.
    "manual": {"ENDED"},
}
_ANY_TERMINAL = set().union(*_TERMINAL.values()) - {"4", "5", "6", "7", "8"} | {"ABSENT", "VANISHED", "GONE"}


class _Msg(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class JobEvent(_Msg):
    """A job-state change. Unknown fields are ignored; the ones below are validated."""

    source: str = Field(min_length=1, max_length=64)
    job_id: str = Field(min_length=1, max_length=512)
    run_uri: str = Field(min_length=1, max_length=2048)
    state: str = Field(min_length=1, max_length=64)
    observed_at: datetime
    run_id: str | None = Field(default=None, max_length=256)
    attempt_id: str | None = Field(default=None, max_length=64)
    exit_code: int | None = None
    error: str | None = Field(default=None, max_length=65536)
    intent: Literal["pre_cancel"] | None = None
    pods_alive: int | None = None
    preserve_root: str | None = Field(default=None, max_length=2048)

    @field_validator("state", mode="before")
    @classmethod
    def _state_text(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            return IRIS_JOB_STATES.get(value, str(value))
        return value

    @field_validator("run_uri")
    @classmethod
    def _no_traversal(cls, value: str) -> str:
        if "\x00" in value or any(seg == ".." for seg in value.split("/")):
            raise ValueError("run_uri must not contain '..' segments or NUL")
        return value

    @property
    def normalized_state(self) -> str:
        return self.state.strip().upper().replace(" ", "_")

    @property
    def is_terminal(self) -> bool:
        state = self.normalized_state
        known = _TERMINAL.get(self.source.lower())
        if state in {"ABSENT", "VANISHED", "GONE"}:
            return True
        return state in known if known is not None else state in _ANY_TERMINAL

    @property
    def controller_state(self) -> str | None:
        return None if self.source.lower() == "manual" else self.state

    @property
    def controller_absent(self) -> bool:
        return self.normalized_state in {"ABSENT", "VANISHED", "GONE"} or (
            self.pods_alive == 0 and self.normalized_state in {"RUNNING", "UNKNOWN"}
        )

    @property
    def event_key(self) -> str:
        """Domain identity of the event (a publisher retry gets a new message id, not a new key)."""
        raw = "|".join(
            [
                self.source,
                self.job_id,
                self.run_uri,
                self.normalized_state,
                self.observed_at.isoformat(),
                self.intent or "",
            ]
        )
        return hashlib.sha256(raw.encode()).hexdigest()[:32]


class RunMessage(_Msg):
    """run-classified / run-selection payload: which run, where to preserve, what the controller said."""

    run_id: str
    run_uri: str
    preserve_root: str
    event_state: str | None = None
    event_source: str | None = None
    controller_absent: bool = False


class CapturePartMessage(_Msg):
    run_id: str
    run_uri: str
    dest_root: str
    part: CapturePart


class LogScanPartMessage(_Msg):
    run_id: str
    dest_root: str
    part: LogScanPart


class CandidateMessage(_Msg):
    run_id: str
    run_uri: str
    preserve_root: str
    target: str = Field(pattern=r"^(resume|candidate:\d+)$")

    @property
    def step(self) -> int | None:
        return int(self.target.split(":", 1)[1]) if self.target.startswith("candidate:") else None
