"""Typed messages: the job-state-change event we accept, and the internal step messages between functions."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rlcleanup.models import controller_states
from rlcleanup.models.controller_states import Verdict, is_absent
from rlcleanup.models.parts import CapturePart, LogScanPart


class _Msg(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class JobEvent(_Msg):
    """A job-state change. Unknown fields are ignored; the ones below are validated."""

    source: str = Field(
        min_length=1,
        max_length=64,
        # Named from the one table, so a new source changes controller_states.py only (and the published schema).
        description=f"Who saw the state: {', '.join(controller_states.SOURCES)} "
        "(models/controller_states.py; an unknown source is refused).",
    )
    job_id: str = Field(
        min_length=1, max_length=512, description="The source's identity of the job (Iris job id, Ray submission id...)"
    )
    run_uri: str = Field(
        min_length=1, max_length=2048, description="The run's durable root R (gs://bucket/prefix, s3://, or a path)."
    )
    state: str = Field(
        min_length=1,
        max_length=64,
        description="The state as the source spells it (Iris also as its enum number); ABSENT/VANISHED/GONE: the "
        "controller lost the job.",
    )
    observed_at: datetime = Field(description="When the source observed the state (ISO 8601 with a zone).")
    run_id: str | None = Field(default=None, max_length=256, description="The run id, when the source knows it.")
    attempt_id: str | None = Field(default=None, max_length=64, description="The attempt the state is about.")
    exit_code: int | None = Field(default=None, description="The job's exit code, when the source reports one.")
    error: str | None = Field(default=None, max_length=65536, description="The source's error text, if any.")
    intent: Literal["pre_cancel"] | None = Field(
        default=None, description="pre_cancel: a request to capture live state before a cancel (not a terminal event)."
    )
    pods_alive: int | None = Field(default=None, description="Pods still alive (0 with RUNNING: the job vanished).")
    preserve_root: str | None = Field(
        default=None, max_length=2048, description="Where to preserve evidence (default: the deployment's)."
    )

    @field_validator("source")
    @classmethod
    def _known_source(cls, value: str) -> str:
        controller_states.source(value)  # UnknownStateSource: an event from a source we cannot read is invalid
        return value

    @field_validator("state", mode="before")
    @classmethod
    def _state_text(cls, value: object, info: ValidationInfo) -> object:
        """A wire enum number becomes its name in its source's table (Iris: 6 -> KILLED); a number from a source
        without numbered states stays a string, which that source's table does not know (not terminal)."""
        if isinstance(value, int) and not isinstance(value, bool):
            name = info.data.get("source")
            table = controller_states.SOURCES.get(name.lower()) if isinstance(name, str) else None
            return table.spell(value) if table is not None and table.numbers else str(value)
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
    def verdict(self) -> Verdict:
        """The state in its source's table (models/controller_states.py); `unknown` for a spelling it lacks."""
        return controller_states.source(self.source).verdict(self.state)

    @property
    def is_terminal(self) -> bool:
        """Routing: cleanup starts on a terminal state, or on the controller having lost the job. An unknown
        spelling is not terminal (fail closed: a job that may still run is never cleaned up on a guess)."""
        return is_absent(self.state) or self.verdict.terminal

    @property
    def controller_state(self) -> str | None:
        """The state to pair the artifacts with; None when it carries no verdict (a manual ENDED)."""
        return None if self.verdict is Verdict.ended else self.state

    @property
    def controller_absent(self) -> bool:
        return is_absent(self.state) or (self.pods_alive == 0 and self.verdict in (Verdict.running, Verdict.unknown))

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


# The claim scope of one pass of the pipeline over a run (runtime/attempt_scope.py): "" for the run's first end,
# "<12 hex>/" for a later end (a resubmitted step's new terminal token). It prefixes every stage's claim key.
SCOPE_PATTERN = r"^([0-9a-f]{12}/)?$"


def _scope() -> str:
    return Field(default="", pattern=SCOPE_PATTERN, description="claim scope of this pass (empty: the first)")


class _StageMsg(_Msg):
    """A message between the stages of one run's pipeline. `origin` is the job event that started the run's pass
    (filled in by the delivery's bus, runtime/recovery.py, on every stage message): what a record store that lost
    the run needs to rebuild its record and re-drive it. Recovery only: no stage reads where to work from it."""

    origin: JobEvent | None = Field(default=None, description="the job event that started this pass of the run")


class RunMessage(_StageMsg):
    """run-classified / run-selection payload: which run, where to preserve, what the controller said."""

    run_id: str
    scope: str = _scope()
    run_uri: str
    preserve_root: str
    event_state: str | None = None
    event_source: str | None = None
    controller_absent: bool = False


class CapturePartMessage(_StageMsg):
    run_id: str
    scope: str = _scope()
    run_uri: str
    dest_root: str
    part: CapturePart

    @property
    def members(self) -> list[str]:
        """The fan-out members this message carries (their claims' ids): its one part."""
        return [self.part.part_id]


class CapturePlanPageMessage(_StageMsg):
    """capture-parts payload that continues a paged capture plan: only which page. Where to resume, and the run's
    URIs, come from the page before it in the claim store, never from the message."""

    run_id: str
    scope: str = _scope()
    plan_page: int = Field(ge=1)


class LogScanPlanPageMessage(CapturePlanPageMessage):
    """log-scan-parts payload that continues a paged log-scan plan (the same shape, and the same rule: the cursor
    and the run come from the page before it in the claim store)."""


class LogScanPartMessage(_StageMsg):
    run_id: str
    scope: str = _scope()
    dest_root: str
    part: LogScanPart

    @property
    def members(self) -> list[str]:
        """The fan-out members this message carries (their claims' ids): its one part."""
        return [self.part.part_id]


def _part_or_page(payload: Any) -> str | None:
    """Which message a parts topic's payload is: a paged plan's continuation names a page and no part; anything
    else is read as a part (so a malformed one is refused for what a part lacks). Pydantic's callable
    discriminator: one union, decoded once, by dispatch."""
    if isinstance(payload, dict):
        return "page" if "plan_page" in payload and "part" not in payload else "part"
    if isinstance(payload, BaseModel):
        return "page" if isinstance(payload, CapturePlanPageMessage) else "part"
    return None  # not an object at all: pydantic refuses it (union_tag_not_found)


class CapturePartsMessage(
    RootModel[
        Annotated[
            Annotated[CapturePartMessage, Tag("part")] | Annotated[CapturePlanPageMessage, Tag("page")],
            Discriminator(_part_or_page),
        ]
    ]
):
    """What the capture-parts topic carries: a part to copy, or a paged capture plan's continuation."""


class LogScanPartsMessage(
    RootModel[
        Annotated[
            Annotated[LogScanPartMessage, Tag("part")] | Annotated[LogScanPlanPageMessage, Tag("page")],
            Discriminator(_part_or_page),
        ]
    ]
):
    """What the log-scan-parts topic carries: a slice of logs to scan, or a paged log-scan plan's continuation."""


TARGET_PATTERN = r"^(resume|candidate:\d+)$"
MAX_BATCH_TARGETS = 64  # what one message may ask for; the plan sends far fewer (runtime/handlers.py)


def target_step(target: str) -> int | None:
    """The export step a validation target names (`candidate:<step>`); None for `resume`."""
    return int(target.split(":", 1)[1]) if target.startswith("candidate:") else None


class CandidateMessage(_StageMsg):
    """candidate-validation payload: one target (`resume`, or `candidate:<step>`), or a batch of candidates
    (`targets`) that one invocation validates together. Each target is still its own fan-out member (its own
    claim `validate:<target>`); a batch only shares the invocation."""

    run_id: str
    scope: str = _scope()
    run_uri: str
    preserve_root: str
    target: str | None = Field(default=None, pattern=TARGET_PATTERN)
    targets: list[Annotated[str, Field(pattern=r"^candidate:\d+$")]] = Field(
        default_factory=list, max_length=MAX_BATCH_TARGETS
    )

    @model_validator(mode="after")
    def _one_shape(self) -> CandidateMessage:
        if (self.target is None) == (not self.targets):
            raise ValueError("a candidate-validation message names either one `target` or a batch of `targets`")
        if len(set(self.targets)) != len(self.targets):
            raise ValueError("a batch names each target once")
        return self

    @property
    def members(self) -> list[str]:
        return [self.target] if self.target is not None else list(self.targets)

    @property
    def step(self) -> int | None:
        """The step of a one-target message (None for `resume` and for a batch)."""
        return target_step(self.target) if self.target is not None else None
