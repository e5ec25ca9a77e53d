"""The publish guard: a Bus that lets the running function publish only to the topics topology.yaml declares for it.

Terraform grants each function's service account publisher on exactly those topics, and the emulators check no
IAM, so a publish the topology does not declare would pass every local test and get `403` in a real deployment.
The guard makes it fail everywhere instead. The running function is explicit: `dispatch` wraps the ports of each
invocation with the spec of the function it runs (`guarded_ports`), never a process-wide setting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from rlcleanup.ports.bus import Bus
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.topology import FunctionSpec

log = logging.getLogger(__name__)


class UndeclaredPublish(RuntimeError):
    """A function published to a topic its topology entry does not list: a defect of our code or topology.yaml
    (not bad input), so it is never recorded as a data problem; the delivery fails and is retried."""

    def __init__(self, function: str, topic: str, declared: list[str]) -> None:
        self.function = function
        self.topic = topic
        super().__init__(
            f"{function} published to {topic!r}, which topology.yaml does not declare for it (declared: "
            f"{', '.join(declared) or 'nothing'}); a deployment would refuse it (no publisher IAM on that topic)"
        )


@dataclass(frozen=True)
class GuardedBus:
    inner: Bus
    spec: FunctionSpec

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        if topic not in self.spec.publishes:
            error = UndeclaredPublish(self.spec.name, topic, self.spec.publishes)
            log.error("%s", error, extra={"undeclared_publish": {"function": self.spec.name, "topic": topic}})
            raise error
        return self.inner.publish(topic, data, attributes)


def guarded_bus(bus: Bus, spec: FunctionSpec) -> GuardedBus:
    """`bus` guarded for `spec`; an already guarded bus is re-guarded (one function runs at a time per Ports)."""
    inner = bus.inner if isinstance(bus, GuardedBus) else bus
    return GuardedBus(inner, spec)


def guarded_ports(p: Ports, spec: FunctionSpec) -> Ports:
    """A per-invocation copy of `p` whose bus publishes only what `spec` declares."""
    return replace(p, bus=guarded_bus(p.bus, spec))
