"""Load the topology definition (topology.yaml) into typed models: one source for local stack and Terraform."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Topic(_Strict):
    name: str
    description: str


class FunctionSpec(_Strict):
    name: str
    entry_point: str
    trigger: str
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


class Topology(_Strict):
    topics: list[Topic]
    functions: list[FunctionSpec]
    sinks: list[Sink]

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        names = {t.name for t in self.topics}
        for fn in self.functions:
            missing = ({fn.trigger} | set(fn.publishes)) - names
            if missing:
                raise ValueError(f"function {fn.name} names unknown topics {sorted(missing)}")
            if fn.ack_deadline_seconds < fn.timeout_seconds:
                raise ValueError(f"function {fn.name}: ack deadline below its timeout")
            if not 10 <= fn.ack_deadline_seconds <= 600:
                raise ValueError(f"function {fn.name}: ack deadline must be 10..600 s")
        for sink in self.sinks:
            if sink.topic not in names:
                raise ValueError(f"sink {sink.subscription} names unknown topic {sink.topic}")
        return self

    def function(self, name: str) -> FunctionSpec:
        for fn in self.functions:
            if fn.name == name or fn.entry_point == name:
                return fn
        raise KeyError(name)

    def subscribers(self, topic: str) -> list[FunctionSpec]:
        return [fn for fn in self.functions if fn.trigger == topic]

    @property
    def all_topic_names(self) -> list[str]:
        return [t.name for t in self.topics] + [fn.dead_letter_topic for fn in self.functions]


def parse_topology(raw: dict[str, Any]) -> Topology:
    defaults = raw.get("defaults", {})
    functions = [{**defaults, **fn} for fn in raw.get("functions", [])]
    return Topology(topics=raw["project_topics"], functions=functions, sinks=raw.get("sinks", []))


@cache
def load_topology() -> Topology:
    text = resources.files("rlcleanup.runtime").joinpath("topology.yaml").read_text(encoding="utf-8")
    return parse_topology(yaml.safe_load(text))
