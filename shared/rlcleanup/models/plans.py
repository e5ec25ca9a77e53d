"""What the pipeline's planners and barriers store in the claim store: typed, so a reader (and mypy) can follow a
plan from the stage that wrote it to the stage that reads it. The stored form is `model_dump(mode="json")`, the
same JSON the stages wrote as plain dicts before these models existed, so stored plans of older runs still read.

A *member set* is what a barrier waits on: every id in `member_ids` must have stored its outcome under the fan-out's
member key (`runtime/topology.yaml` `fan_outs[].member_key`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rlcleanup.models.events import RunMessage

PartRef = TypeVar("PartRef")


class _Stored(BaseModel):
    model_config = ConfigDict(extra="ignore")


class MemberSet(_Stored):
    """A stored member set: the ids of the fan-out's members a barrier waits for."""

    ids_field: ClassVar[str]  # the field that lists the members

    @property
    def member_ids(self) -> list[str]:
        raise NotImplementedError

    @property
    def kept_preserve_root(self) -> str | None:
        """Where the run's evidence is preserved, when the set kept it (a re-drive rebuilds run messages with it)."""
        return None

    @classmethod
    def count_in(cls, raw: object) -> int | None:
        """How many members a stored set lists, read leniently (progress display: only the list is needed)."""
        listed = raw.get(cls.ids_field) if isinstance(raw, dict) else None
        return len(listed) if isinstance(listed, list) else None


class LogScanPlanEntry(_Stored):
    """One planned log-scan part, by id (its file list travels in its message, so a plan stays small)."""

    part_id: str
    attempt_id: str


class PlanPage(_Stored, Generic[PartRef]):
    """One stored page of a paged plan (`terminal-plan-page:<n>`, `capture-plan-page:<n>`): its part ids, where the
    plan writes, the run, how many objects it listed, and the cursor of the next page (None on the last page)."""

    parts: list[PartRef]
    dest_root: str
    run: RunMessage
    listed: int
    next: dict[str, Any] | None = None


class LogScanPlan(MemberSet):
    """`terminal-plan`: every page's parts; the terminal barrier waits for each part's `log-scan:<part_id>`."""

    ids_field: ClassVar[str] = "parts"
    parts: list[LogScanPlanEntry]
    dest_root: str
    run: RunMessage
    pages: int = 1

    @property
    def member_ids(self) -> list[str]:
        return [part.part_id for part in self.parts]

    @property
    def kept_preserve_root(self) -> str | None:
        return self.run.preserve_root


class CapturePlan(MemberSet):
    """`capture-plan`: every page's part ids; the capture barrier waits for each `capture-part:<part_id>`."""

    ids_field: ClassVar[str] = "parts"
    parts: list[str]
    dest_root: str
    preserve_root: str
    run_uri: str | None = None  # None in plans stored before it was kept: the record has it
    pages: int = 1

    @property
    def member_ids(self) -> list[str]:
        return list(self.parts)

    @property
    def kept_preserve_root(self) -> str | None:
        return self.preserve_root


class ValidationSet(MemberSet):
    """`fanout:validate` (and the capture barrier's own result): every validation target, `candidate:<step>` and
    `resume`; the selection barrier waits for each `validate:<target>`."""

    ids_field: ClassVar[str] = "targets"
    targets: list[str]
    run_uri: str | None = None  # where selection is sent on (None in sets stored before they were kept)
    preserve_root: str | None = None

    @property
    def member_ids(self) -> list[str]:
        return list(self.targets)

    @property
    def kept_preserve_root(self) -> str | None:
        return self.preserve_root


class TerminalSettled(_Stored):
    """The terminal barrier's result: the verdict it wrote on the record."""

    terminal_state: str | None = None


class SelectionStarted(_Stored):
    """The selection barrier's result: run-selection was published."""


class RecordFinished(_Stored):
    """`select`: the status selection wrote on the record."""

    status: str


class Classified(_Stored):
    """`classify`: the run's kind, where its layout snapshot is (standard runs), and the end marks it was
    classified at (runtime/attempt_scope.py compares a later end with them)."""

    kind: str
    layout_uri: str | None = None
    dest_root: str | None = None
    end: dict[str, Any] = Field(default_factory=dict)


class PassMark(_Stored):
    """`pass:<hex>`: a later end of the run (runtime/attempt_scope.py): its end marks and its ordinal."""

    end: dict[str, Any] | None = None
    n: int = 0


class FanOutKeys(BaseModel):
    """One fan-out as a re-drive reads it (runtime/topology.py `Topology.pipeline_keys`, from topology.yaml)."""

    model_config = ConfigDict(frozen=True)

    name: str
    member_noun: str  # how a missing member is named ("capture part")
    member_set: str  # claim key of the stored member set
    set_model: type[MemberSet]
    member_prefix: str  # member key prefix ("capture-part:")
    member_field: str  # the member message's field naming its member id ("target")
    fan_ins: tuple[str, ...]  # claims of the barriers waiting for it: once they are stored, nothing of it is missing


class PipelineHop(BaseModel):
    """One trigger topic of a run's pipeline, in order: what a re-drive publishes on it, and when it is done (every
    claim and fan-in stored)."""

    model_config = ConfigDict(frozen=True)

    topic: str
    event: bool = False  # the pipeline's first hop: it carries the run's job event
    claims: tuple[str, ...] = ()  # the own claims of the functions it triggers
    plans: tuple[FanOutKeys, ...] = ()  # fan-outs those functions plan (their lost members are published again)
    fan_ins: tuple[str, ...] = ()  # barriers that run within this hop
    members: FanOutKeys | None = None  # a fan-out planned by a barrier: re-driven one message per member

    def done(self, stored: Collection[str]) -> bool:
        return all(key in stored for key in (*self.claims, *self.fan_ins))


class PipelineKeys(BaseModel):
    """The claim keys the reconciling sweep reads to see how far a run's pipeline got, and the hops it re-drives
    (sources/sweep.py). Built by `Topology.pipeline_keys` (runtime/topology.py) from topology.yaml, never spelled
    by the sweep."""

    model_config = ConfigDict(frozen=True)

    hops: tuple[PipelineHop, ...]
    pass_prefix: str  # a later end of the run: claim `pass:<hex>`, its stage keys prefixed `<hex>/`

    @property
    def classify(self) -> str:
        """The first hop's claim: classification stored what kind of run it is (`Classified`)."""
        return self.hops[0].claims[0]

    @property
    def finish(self) -> str:
        """The last hop's claim: the record was finished."""
        return self.hops[-1].claims[-1]
