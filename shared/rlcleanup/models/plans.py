"""What the pipeline's planners and barriers store in the claim store: typed, so a reader (and mypy) can follow a
plan from the stage that wrote it to the stage that reads it. The stored form is `model_dump(mode="json")`, the
same JSON the stages wrote as plain dicts before these models existed, so stored plans of older runs still read.

A *member set* is what a barrier waits on: every id in `member_ids` must have stored its outcome under the fan-out's
member key (`runtime/topology.yaml` `fan_outs[].member_key`)."""

from __future__ import annotations

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


class PipelineKeys(BaseModel):
    """The claim keys the reconciling sweep reads to see how far a run's pipeline got (sources/sweep.py). Built by
    the wiring from the stage table and topology.yaml (runtime/stage_table.py), never spelled by the sweep."""

    model_config = ConfigDict(frozen=True)

    classify: str
    terminal_plan: str
    terminal: str
    capture_plan: str
    capture_fan_in: str
    validation_set: str
    select: str
    log_scan_member: str  # member key prefixes ("log-scan:")
    capture_member: str
    validation_member: str
    pass_prefix: str  # a later end of the run: claim `pass:<hex>`, its stage keys prefixed `<hex>/`
