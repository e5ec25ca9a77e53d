"""Load the topology definition (topology.yaml) into typed models: one source for local stack and Terraform."""

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
            if fn.memory_mib <= 0:
                raise ValueError(f"function {fn.name}: memory must be positive")
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
