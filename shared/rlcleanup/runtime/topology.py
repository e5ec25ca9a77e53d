"""Load the pipeline graph (topology.yaml) into typed models: one source for the local stack, Terraform and the
publish guard. Validation here is what keeps the declaration honest: every named topic, function, fan-out and
barrier exists, and a function declares every topic the fan-ins running inside it publish."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, model_validator

_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|k|K|M|G|T)?\s*$")
_UNIT_BYTES: dict[str | None, int] = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_UNIT_BYTES |= {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_memory_mib(text: str) -> float:
    """A Cloud Run memory limit ('512Mi', '1Gi', '2G', '4000M', bytes) in MiB; ValueError if unparseable."""
    match = _MEMORY.match(text)
    if not match:
        raise ValueError(f"bad memory size {text!r} (expected e.g. '512Mi' or '1Gi')")
    return float(match.group(1)) * _UNIT_BYTES[match.group(2)] / 2**20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Topic(_Strict):
    name: str
    description: str


class Stage(_Strict):
    name: str
    description: str


class FunctionSpec(_Strict):
    name: str
    entry_point: str
    trigger: str
    stage: str
    publishes: list[str]
    description: str
    timeout_seconds: int
    ack_deadline_seconds: int
    memory: str
    max_instances: int
    max_delivery_attempts: int
    minimum_backoff: str
    maximum_backoff: str

    @property
    def memory_mib(self) -> float:
        return parse_memory_mib(self.memory)

    @property
    def push_subscription(self) -> str:
        return f"{self.name}-push"

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.name}-dlq"

    @property
    def dead_letter_subscription(self) -> str:
        return f"{self.name}-dlq-sub"


class Sink(_Strict):
    topic: str
    subscription: str


class FanOut(_Strict):
    """One message per member on `topic`; the planner stores the member set (result `member_set`) first."""

    name: str
    topic: str
    planned_by: list[str]  # functions, or barriers (a fan-out started by a fan-in)
    member: str  # the function consuming `topic`
    member_set: str  # result key of the stored member set
    member_key: str  # result key of one member's outcome, e.g. "log-scan:{part_id}"
    # True when the member set is stored before the first member is published and is never empty: then only a
    # member can store the last piece. Otherwise (results stored after publishing, or no members) the planner can.
    set_stored_first: bool = False


class Barrier(_Strict):
    """A fan-in: `claim` is won once, when every fan-out and barrier in `waits_for` is complete."""

    name: str
    claim: str
    waits_for: list[str]
    runs_in: list[str]
    publishes: list[str]


class Topology(_Strict):
    topics: list[Topic]
    stages: list[Stage]
    functions: list[FunctionSpec]
    fan_outs: list[FanOut]
    barriers: list[Barrier]
    sinks: list[Sink]

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        project_topics = {t.name for t in self.topics}
        dead_letter_topics = {fn.dead_letter_topic for fn in self.functions}
        stages = {s.name for s in self.stages}
        for fn in self.functions:
            if fn.trigger not in project_topics:
                raise ValueError(f"function {fn.name} is triggered by unknown topic {fn.trigger}")
            missing = set(fn.publishes) - project_topics - dead_letter_topics
            if missing:
                raise ValueError(f"function {fn.name} names unknown topics {sorted(missing)}")
            foreign = (set(fn.publishes) & dead_letter_topics) - {fn.dead_letter_topic}
            if foreign:
                raise ValueError(f"function {fn.name} publishes to another function's dead-letter topic {foreign}")
            if fn.dead_letter_topic not in fn.publishes:
                # Permanent errors are parked on the function's own dead-letter topic by the function (handlers.
                # record_poison), so IAM must grant it and the guard must allow it.
                raise ValueError(f"function {fn.name} must declare its own dead-letter topic {fn.dead_letter_topic}")
            if fn.stage not in stages:
                raise ValueError(f"function {fn.name} names unknown stage {fn.stage}")
            if fn.ack_deadline_seconds < fn.timeout_seconds:
                raise ValueError(f"function {fn.name}: ack deadline below its timeout")
            if not 10 <= fn.ack_deadline_seconds <= 600:
                raise ValueError(f"function {fn.name}: ack deadline must be 10..600 s")
            if fn.memory_mib <= 0:
                raise ValueError(f"function {fn.name}: memory must be positive")
        for sink in self.sinks:
            if sink.topic not in project_topics:
                raise ValueError(f"sink {sink.subscription} names unknown topic {sink.topic}")
        self._check_graph()
        return self

    def _check_graph(self) -> None:
        functions = {fn.name: fn for fn in self.functions}
        fan_outs = {f.name: f for f in self.fan_outs}
        barriers = {b.name: b for b in self.barriers}
        if len(fan_outs) != len(self.fan_outs) or len(barriers) != len(self.barriers):
            raise ValueError("fan-out and barrier names must be unique")
        for fan in self.fan_outs:
            member = functions.get(fan.member)
            if member is None or member.trigger != fan.topic:
                raise ValueError(f"fan-out {fan.name}: member {fan.member} must be a function triggered by {fan.topic}")
            for planner in fan.planned_by:
                if planner in functions:
                    publishers, via = [planner], ""
                elif planner in barriers:
                    publishers, via = barriers[planner].runs_in, f" (in barrier {planner})"
                else:
                    raise ValueError(f"fan-out {fan.name}: unknown planner {planner}")
                for name in publishers:
                    if fan.topic not in functions[name].publishes:
                        raise ValueError(f"fan-out {fan.name}: {name}{via} plans it but does not publish {fan.topic}")
        for barrier in self.barriers:
            unknown = [n for n in barrier.runs_in if n not in functions]
            unknown += [n for n in barrier.waits_for if n not in fan_outs and n not in barriers]
            if unknown:
                raise ValueError(f"barrier {barrier.name} names unknown fan-outs, barriers or functions {unknown}")
            needed = self._completers(barrier, fan_outs, barriers)
            if not needed <= set(barrier.runs_in):
                # The last piece to be stored may land in any of these: each must try the barrier.
                raise ValueError(f"barrier {barrier.name} must run in {sorted(needed - set(barrier.runs_in))} too")
            for name in barrier.runs_in:
                undeclared = set(barrier.publishes) - set(functions[name].publishes)
                if undeclared:
                    raise ValueError(f"barrier {barrier.name} runs in {name}, which does not publish {undeclared}")

    def _completers(self, barrier: Barrier, fan_outs: dict[str, FanOut], barriers: dict[str, Barrier]) -> set[str]:
        """Functions that can store the last piece a barrier waits for (planners, members, inner barriers)."""
        needed: set[str] = set()
        for name in barrier.waits_for:
            if name in fan_outs:
                fan = fan_outs[name]
                needed.add(fan.member)
                for planner in [] if fan.set_stored_first else fan.planned_by:
                    needed |= set(barriers[planner].runs_in) if planner in barriers else {planner}
            else:
                needed |= set(barriers[name].runs_in)
        return needed

    def function(self, name: str) -> FunctionSpec:
        for fn in self.functions:
            if fn.name == name or fn.entry_point == name:
                return fn
        raise KeyError(name)

    def barrier(self, name: str) -> Barrier:
        return next(b for b in self.barriers if b.name == name)

    def subscribers(self, topic: str) -> list[FunctionSpec]:
        return [fn for fn in self.functions if fn.trigger == topic]

    @property
    def all_topic_names(self) -> list[str]:
        return [t.name for t in self.topics] + [fn.dead_letter_topic for fn in self.functions]


def parse_topology(raw: dict[str, Any]) -> Topology:
    defaults = raw.get("defaults", {})
    functions = [{**defaults, **fn} for fn in raw.get("functions", [])]
    return Topology(
        topics=raw["project_topics"],
        stages=raw.get("stages", []),
        functions=functions,
        fan_outs=raw.get("fan_outs", []),
        barriers=raw.get("barriers", []),
        sinks=raw.get("sinks", []),
    )


@cache
def load_topology() -> Topology:
    text = resources.files("rlcleanup.runtime").joinpath("topology.yaml").read_text(encoding="utf-8")
    return parse_topology(yaml.safe_load(text))
