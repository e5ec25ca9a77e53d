"""Bus in one process: the embedded default. Delivery is synchronous and in publish order."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

Handler = Callable[[bytes, dict[str, str], str], None]
# Told of a message the bus gave up on, with the error of its last delivery (the embedded stack files it on the run).
DeadLetterHook = Callable[["Delivered", Exception], None]


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
    # Message ids are `<id_prefix><n>`: the embedded stack names its process there (a claim's lease owner is the
    # delivery's id, so a lease says which process holds it: runtime/resume.py).
    id_prefix: str = ""
    on_dead_letter: DeadLetterHook | None = None

    def subscribe(self, topic: str, handler: Handler) -> None:
        self.subscribers.setdefault(topic, []).append(handler)

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        msg = Delivered(topic, data, dict(attributes or {}), f"{self.id_prefix}{next(self._ids)}")
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
            except Exception as exc:
                if attempt >= self.max_attempts:
                    self.dead_letters.append(msg)
                    if self.on_dead_letter is not None:
                        self.on_dead_letter(msg, exc)
                else:
                    self._queue.append((msg, handler, attempt + 1))
