"""Load the pipeline graph (topology.yaml) into typed models: one source for the local stack, Terraform and the
publish guard. Validation here is what keeps the declaration honest: every named topic, function, fan-out and
barrier exists, and a function declares every topic the fan-ins running inside it publish."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, model_validator

from rlcleanup.models import outcomes, plans
from rlcleanup.models.plans import FanOutKeys, PipelineHop, PipelineKeys

Model = TypeVar("Model", bound=BaseModel)
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
    pipeline: bool = False  # a stage of a run's pipeline: a permanent error there fails an unfinished run


class FunctionSpec(_Strict):
    name: str
    entry_point: str
    # Its trigger topic (a push subscription "<name>-push"); None only for the dead-letter recorder, which is pushed
    # every other function's dead-letter topic instead (Topology.dead_letter_recorder).
    trigger: str | None
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
    claim: str | None = None  # its own claim key, stored when its step is done (members: the fan-out's member_key)
    claim_label: str | None = None  # how `rlcleanup watch` names that claim
    # Where the run goes on once this function's step is done (a topic it publishes): the pipeline's next hop.
    next: str | None = None
    # Its other named outputs (e.g. classify's `agentic` route), each a topic it publishes: stages read topics here.
    routes: dict[str, str] = {}

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

    @property
    def dead_letter_record_subscription(self) -> str:
        """The push subscription on this function's dead-letter topic that delivers each dead letter to the
        dead-letter recorder (the parked copy stays on `dead_letter_subscription`)."""
        return f"{self.name}-dlq-record"


class Sink(_Strict):
    topic: str
    subscription: str
    # A consumer that keeps failing parks the message on "<subscription>-dlq" (read on "<subscription>-dlq-sub").
    dead_letter: bool = False

    @property
    def dead_letter_topic(self) -> str | None:
        return f"{self.subscription}-dlq" if self.dead_letter else None

    @property
    def dead_letter_subscription(self) -> str | None:
        return f"{self.subscription}-dlq-sub" if self.dead_letter else None


class FanOut(_Strict):
    """One message per member on `topic`; the planner stores the member set (result `member_set`) first."""

    name: str
    topic: str
    planned_by: list[str]  # functions, or barriers (a fan-out started by a fan-in)
    member: str  # the function consuming `topic`
    member_set: str  # result key of the stored member set
    member_set_model: str  # its model in models/plans.py (has `member_ids`)
    member_key: str  # result key of one member's outcome, e.g. "log-scan:{part_id}"
    outcome_model: str  # a member's outcome model in models/outcomes.py
    label: str  # how `rlcleanup watch` names the members
    # True when the member set is stored before the first member is published and is never empty: then only a
    # member can store the last piece. Otherwise (results stored after publishing, or no members) the planner can.
    set_stored_first: bool = False

    @property
    def member_prefix(self) -> str:
        """The key prefix every member's result shares ("log-scan:")."""
        return self.member_key.split("{", 1)[0]

    def key_of(self, member_id: str) -> str:
        return f"{self.member_prefix}{member_id}"

    @property
    def set_model(self) -> type[plans.MemberSet]:
        return _named_model(plans, self.member_set_model, plans.MemberSet)

    @property
    def outcome(self) -> type[outcomes.MemberOutcome]:
        return _named_model(outcomes, self.outcome_model, outcomes.MemberOutcome)

    @model_validator(mode="after")
    def _well_formed(self) -> FanOut:
        self.set_model, self.outcome  # noqa: B018 -- resolving them fails closed on a name no model has
        _, brace, tail = self.member_key.partition("{")
        if not brace or not tail.endswith("}") or "{" in tail:
            raise ValueError(f"fan-out {self.name}: member_key must end with one {{placeholder}}: {self.member_key}")
        return self


def _named_model(module: Any, name: str, base: type[Model]) -> type[Model]:
    """The model `name` of `module`, a subclass of `base`; ValueError for anything else (the topology names it)."""
    found = getattr(module, name, None)
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ValueError(f"{name!r} is not a {base.__name__} in {module.__name__}")
    return found


class Barrier(_Strict):
    """A fan-in: `claim` is won once, when every fan-out and barrier in `waits_for` is complete."""

    name: str
    claim: str
    label: str  # how `rlcleanup watch` names it
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
    # The function every other function's dead letters are pushed to (topology.yaml `dead_letters.recorder`).
    dead_letter_recorder: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        project_topics = {t.name for t in self.topics}
        dead_letter_topics = {fn.dead_letter_topic for fn in self.functions}
        stages = {s.name for s in self.stages}
        names = {fn.name for fn in self.functions}
        if self.dead_letter_recorder is not None and self.dead_letter_recorder not in names:
            raise ValueError(f"dead_letters.recorder names unknown function {self.dead_letter_recorder}")
        for fn in self.functions:
            if (fn.trigger is None) != (fn.name == self.dead_letter_recorder):
                raise ValueError(f"function {fn.name}: only the dead-letter recorder has no trigger topic")
            if fn.trigger is not None and fn.trigger not in project_topics:
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
            undeclared = {t for t in [fn.next, *fn.routes.values()] if t is not None} - set(fn.publishes)
            if undeclared:
                raise ValueError(
                    f"function {fn.name}: next/routes name topics it does not publish {sorted(undeclared)}"
                )
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
        if set(fan_outs) & set(barriers):
            # waits_for and planned_by name either kind: one name must mean one thing (barrier chains follow it).
            raise ValueError(f"names used by both a fan-out and a barrier: {sorted(set(fan_outs) & set(barriers))}")
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

    @property
    def recorder(self) -> FunctionSpec | None:
        """The dead-letter recorder (None: a topology without one)."""
        return self.function(self.dead_letter_recorder) if self.dead_letter_recorder is not None else None

    @property
    def recorded_functions(self) -> list[FunctionSpec]:
        """The functions whose dead-letter topic feeds the recorder: every one but the recorder itself (its own
        dead letters are only parked: a recorder that cannot record must not feed itself in a loop)."""
        if self.dead_letter_recorder is None:
            return []
        return [fn for fn in self.functions if fn.name != self.dead_letter_recorder]

    def dead_letter_source(self, topic: str | None) -> FunctionSpec | None:
        """The function whose dead-letter topic `topic` is, if the recorder is fed from it."""
        return next((fn for fn in self.recorded_functions if fn.dead_letter_topic == topic), None)

    def trigger_of(self, function: str) -> str:
        """The trigger topic of `function` (name or entry point); KeyError for the recorder, which has none."""
        trigger = self.function(function).trigger
        if trigger is None:
            raise KeyError(f"function {function} has no trigger topic (it is pushed the dead-letter topics)")
        return trigger

    def function(self, name: str) -> FunctionSpec:
        for fn in self.functions:
            if fn.name == name or fn.entry_point == name:
                return fn
        raise KeyError(name)

    def barrier(self, name: str) -> Barrier:
        for barrier in self.barriers:
            if barrier.name == name:
                return barrier
        raise KeyError(f"no barrier {name!r} in the topology (known: {[b.name for b in self.barriers]})")

    def fan_out(self, name: str) -> FanOut:
        for fan in self.fan_outs:
            if fan.name == name:
                return fan
        raise KeyError(f"no fan-out {name!r} in the topology (known: {[f.name for f in self.fan_outs]})")

    def fan_out_of_member(self, function: str) -> FanOut | None:
        """The fan-out whose member `function` (name or entry point) is, if any."""
        name = self.function(function).name
        return next((fan for fan in self.fan_outs if fan.member == name), None)

    def barriers_after(self, name: str) -> list[Barrier]:
        """The barriers that wait for the fan-out or barrier `name` (in declaration order)."""
        return [b for b in self.barriers if name in b.waits_for and b.name != name]

    def subscribers(self, topic: str) -> list[FunctionSpec]:
        return [fn for fn in self.functions if fn.trigger == topic]

    def in_pipeline(self, function: str) -> bool:
        """Whether `function` (name or entry point) is a stage of a run's pipeline (its stage says so)."""
        stage = self.function(function).stage
        return any(s.name == stage and s.pipeline for s in self.stages)

    def claim_of(self, function: str) -> str:
        found = self.function(function).claim
        if found is None:
            raise KeyError(f"function {function} declares no claim of its own in topology.yaml")
        return found

    def progress(self) -> list[tuple[str, str]]:
        """(label, claim key or member key prefix) of every step of a run's pipeline, in order: each function's own
        claim, then, for a fan-out member, its members, then every barrier whose wait is now all listed."""
        steps: list[tuple[str, str]] = []
        listed: set[str] = set()
        for fn in self.functions:
            if not self.in_pipeline(fn.name):
                continue
            if fn.claim and fn.claim_label:
                steps.append((fn.claim_label, fn.claim))
            fan = self.fan_out_of_member(fn.name)
            if fan is None:
                continue
            steps.append((fan.label, fan.member_prefix))
            listed.add(fan.name)
            ready = [b for b in self.barriers if b.name not in listed and set(b.waits_for) <= listed]
            while ready:
                steps.append((ready[0].label, ready[0].claim))
                listed.add(ready[0].name)
                ready = [b for b in self.barriers if b.name not in listed and set(b.waits_for) <= listed]
        return steps

    def next_of(self, function: str) -> str:
        """The topic `function` (name or entry point) sends the run on to (topology.yaml `next`)."""
        found = self.function(function).next
        if found is None:
            raise KeyError(f"function {function} declares no `next` topic in topology.yaml")
        return found

    def route(self, function: str, name: str) -> str:
        """The topic of `function`'s named output `name` (topology.yaml `routes`); KeyError for an undeclared one."""
        routes = self.function(function).routes
        if name not in routes:
            raise KeyError(f"function {function} declares no route {name!r} (declared: {sorted(routes)})")
        return routes[name]

    def barrier_next(self, name: str) -> str:
        """The one topic the barrier `name` sends the run on to (topology.yaml `barriers[].publishes`)."""
        publishes = self.barrier(name).publishes
        if len(publishes) != 1:
            raise KeyError(f"barrier {name} must publish exactly one topic to send the run on, not {publishes}")
        return publishes[0]

    def pipeline_functions(self) -> list[FunctionSpec]:
        """The functions of a run's pipeline, in declaration (pipeline) order."""
        return [fn for fn in self.functions if self.in_pipeline(fn.name)]

    @property
    def entry_function(self) -> FunctionSpec:
        """The pipeline's first function: it classifies a job event and starts a run's pass."""
        return self.pipeline_functions()[0]

    def is_entry(self, function: str) -> bool:
        """Whether `function` (name or entry point) is the pipeline's first function (it reads job events, not a
        run's stage messages)."""
        entry = self.entry_function
        return function in (entry.name, entry.entry_point)

    @property
    def entry_topic(self) -> str:
        """Where job events enter the pipeline: the trigger of its first function (sources publish there)."""
        return self.trigger_of(self.entry_function.name)

    @property
    def stage_message_topics(self) -> frozenset[str]:
        """The topics whose messages are one run's stage messages (models/events.py `_StageMsg`): the triggers of
        the pipeline's functions after its entry. A stage added in topology.yaml is one of them with no other edit
        (runtime/recovery.py carries the run's origin on every message published there)."""
        return frozenset(self.trigger_of(fn.name) for fn in self.pipeline_functions()) - {self.entry_topic}

    @property
    def ready_topic(self) -> str:
        """Where a record is announced ready (a person or a waiting grant may act): the last pipeline function's
        `next`. The sweep (a deadline) and the pre-cancel capture announce a record there too."""
        return self.next_of(self.pipeline_functions()[-1].name)

    def pipeline_keys(self, pass_prefix: str) -> PipelineKeys:
        """How far a run's pipeline got, and how to move it on (sources/sweep.py re-drives a stalled run by walking
        these hops): every trigger topic of the pipeline's functions, in order, with the claims that say it is done.
        A fan-out planned by a function is redone through its planner's hop (the plan publishes its lost members
        again); a fan-out planned by a barrier is its own hop, re-driven one message per member not stored."""
        fan_keys = {fan.name: self._fan_out_keys(fan) for fan in self.fan_outs}
        hops: list[PipelineHop] = []
        hop_of: dict[str, int] = {}  # function -> index of the hop that (re)drives it
        barriers = {b.name for b in self.barriers}
        for fn in self.pipeline_functions():
            fan = self.fan_out_of_member(fn.name)
            if fan is not None and not set(fan.planned_by) & barriers:
                planners = [hop_of[name] for name in fan.planned_by if name in hop_of]
                if planners:  # its planner publishes its lost members again: redone through the planner's hop
                    hop_of[fn.name] = max(planners)
                    continue
            index = next((i for i, hop in enumerate(hops) if hop.topic == fn.trigger), len(hops))
            if index == len(hops):  # the first hop carries the job event; a member's hop, one member each
                member = fan_keys[fan.name] if fan is not None else None
                hops.append(PipelineHop(topic=self.trigger_of(fn.name), event=not hops, members=member))
            hop_of[fn.name] = index
            planned = tuple(fan_keys[f.name] for f in self.fan_outs if fn.name in f.planned_by)
            claims = (fn.claim,) if fn.claim and fan is None else ()
            hop = hops[index]
            hops[index] = hop.model_copy(update={"claims": hop.claims + claims, "plans": hop.plans + planned})
        for barrier in self.barriers:
            at = max((hop_of[name] for name in barrier.runs_in if name in hop_of), default=None)
            if at is not None:  # the latest hop it can run in: its hop is not done until it is
                hops[at] = hops[at].model_copy(update={"fan_ins": (*hops[at].fan_ins, barrier.claim)})
        return PipelineKeys(hops=tuple(hops), pass_prefix=pass_prefix)

    def _fan_out_keys(self, fan: FanOut) -> FanOutKeys:
        return FanOutKeys(
            name=fan.name,
            member_noun=fan.label.removesuffix("s"),
            member_set=fan.member_set,
            set_model=fan.set_model,
            member_prefix=fan.member_prefix,
            member_field=fan.member_key.split("{", 1)[1].rstrip("}"),
            fan_ins=tuple(b.claim for b in self.barriers_after(fan.name)),
        )

    @property
    def all_topic_names(self) -> list[str]:
        sink_dead_letters = [s.dead_letter_topic for s in self.sinks if s.dead_letter_topic]
        return [t.name for t in self.topics] + [fn.dead_letter_topic for fn in self.functions] + sink_dead_letters


def parse_topology(raw: dict[str, Any]) -> Topology:
    defaults = raw.get("defaults", {})
    functions = [{**defaults, **fn} for fn in raw.get("functions", [])]
    recorder = (raw.get("dead_letters") or {}).get("recorder")
    fan_in_topics = [topic for barrier in raw.get("barriers", []) for topic in barrier.get("publishes", [])]
    for fn in functions:
        if fn.get("name") == recorder:  # it runs the fan-ins of the members it completes: it publishes theirs
            fn["publishes"] = list(dict.fromkeys([*fn.get("publishes", []), *fan_in_topics]))
    return Topology(
        topics=raw["project_topics"],
        stages=raw.get("stages", []),
        functions=functions,
        fan_outs=raw.get("fan_outs", []),
        barriers=raw.get("barriers", []),
        sinks=raw.get("sinks", []),
        dead_letter_recorder=recorder,
    )


@cache
def load_topology() -> Topology:
    text = resources.files("rlcleanup.runtime").joinpath("topology.yaml").read_text(encoding="utf-8")
    return parse_topology(yaml.safe_load(text))
