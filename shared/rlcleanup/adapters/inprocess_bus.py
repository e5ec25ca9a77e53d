"""Bus in one process: the embedded default. Delivery is synchronous and in publish order."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

Handler = Callable[[bytes, dict[str, str], str], None]


@dataclass
class Delivered:
    topic: str
    data: bytes
    attributes: dict[str, str]
    message_id: str


@dataclass
class InProcessBus:
    """Queues messages; `drain()` delivers them to subscribers (a subscriber raising re-queues, like a nack)."""

    subscribers: dict[str, list[Handler]] = field(default_factory=dict)
    published: list[Delivered] = field(default_factory=list)
    max_attempts: int = 5
    _queue: deque[tuple[Delivered, Handler, int]] = field(default_factory=deque)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    dead_letters: list[Delivered] = field(default_factory=list)

    def subscribe(self, topic: str, handler: Handler) -> None:
        self.subscribers.setdefault(topic, []).append(handler)

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        msg = Delivered(topic, data, dict(attributes or {}), str(next(self._ids)))
        self.published.append(msg)
        for handler in self.subscribers.get(topic, []):  # one delivery per subscription, like Pub/Sub
            self._queue.append((msg, handler, 1))
        return msg.message_id

    def drain(self) -> None:
        """Deliver until quiet. A handler that raises is retried (a nack), then dead-lettered."""
        while self._queue:
            msg, handler, attempt = self._queue.popleft()
            try:
                handler(msg.data, msg.attributes, msg.message_id)
            except Exception:
                if attempt >= self.max_attempts:
                    self.dead_letters.append(msg)
                else:
                    self._queue.append((msg, handler, attempt + 1))
