"""Message bus port: publish a JSON payload with attributes to a named topic."""

from __future__ import annotations

from typing import Protocol


class Bus(Protocol):
    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str: ...
