"""Small helpers every stage handler uses: publish a message model, turn step error lines into record errors."""

from __future__ import annotations

from pydantic import BaseModel

from rlcleanup.models.record import RunError
from rlcleanup.runtime.ports import Ports


def publish(p: Ports, topic: str, message: BaseModel, **attributes: str) -> None:
    p.bus.publish(topic, message.model_dump_json().encode(), attributes)


def run_errors(step: str, messages: list[str]) -> list[RunError]:
    """Record errors from a step's `<code>: <message>` lines."""
    return [RunError(step=step, code=m.split(":", 1)[0], message=m) for m in messages]
