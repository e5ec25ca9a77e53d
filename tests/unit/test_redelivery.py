"""At-least-once delivery, embedded: every message delivered 1-5 times in random order, with nacks and crashes
after side effects. The run must end with exactly one record equal to a clean run's, and no side effect twice.

The bus is our own in-process adapter with Pub/Sub's delivery contract made adversarial (duplicates, any order,
redelivery after a failure); the handlers, record store (SQLite) and storage (local files) are the real ones.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from record_support import comparable

from rlcleanup.adapters.inprocess_bus import Delivered, InProcessBus
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.ports.storage import WriteOutcome
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event, resolve_run_id
from rlcleanup.samples.generator import write_sample_run


@dataclass
class ChaosBus(InProcessBus):
    """Each publish is delivered 1-5 times; deliveries are taken in random order; a first delivery may fail."""

    rng: random.Random = field(default_factory=random.Random)
    nack_rate: float = 0.2
    deliveries: Counter[str] = field(default_factory=Counter)

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        msg = Delivered(topic, data, dict(attributes or {}), str(next(self._ids)))
        self.published.append(msg)
        for handler in self.subscribers.get(topic, []):
            for _ in range(self.rng.randint(1, 5)):
                self._queue.append((msg, handler, 1))
        return msg.message_id

    def drain(self) -> None:
        while self._queue:
            index = self.rng.randrange(len(self._queue))
            self._queue.rotate(-index)
            msg, handler, attempt = self._queue.popleft()
            self.deliveries[msg.topic] += 1
            try:
                if attempt == 1 and self.rng.random() < self.nack_rate:
                    raise ConnectionError("injected: the worker died before handling this delivery")
                handler(msg.data, msg.attributes, msg.message_id)
            except Exception:
                if attempt >= 50:
                    self.dead_letters.append(msg)
                else:
                    self._queue.append((msg, handler, attempt + 1))


class CrashAfterWrite(RoutingStorage):
    """Every new object is written, then the worker 'dies' once per object before it can record or ack."""

    def __init__(self, rng: random.Random, crash_rate: float = 0.3) -> None:
        super().__init__()
        self.rng = rng
        self.crash_rate = crash_rate
        self.created: Counter[str] = Counter()
        self.crashes: set[str] = set()

    def _after(self, uri: str, outcome: WriteOutcome) -> WriteOutcome:
        if outcome is WriteOutcome.created:
            self.created[uri] += 1
        if uri not in self.crashes and self.rng.random() < self.crash_rate:
            self.crashes.add(uri)
            raise ConnectionError(f"injected: crashed right after writing {uri}")
        return outcome

    def write_if_absent(self, uri: str, data: bytes, *args: Any, **kwargs: Any) -> WriteOutcome:
        return self._after(uri, super().write_if_absent(uri, data, *args, **kwargs))

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        return self._after(dst_uri, super().copy_if_absent(src_uri, dst_uri))


def _run(tmp: Path, run_uri: str, bus: InProcessBus, storage: CrashAfterWrite) -> tuple[EmbeddedStack, str]:
    stack = EmbeddedStack.create(tmp / "records.db", str(tmp / "preserved"), bus=bus, storage=storage)
    event = manual_event(run_uri)
    stack.emit(event)
    return stack, resolve_run_id(stack.ports, event)


@pytest.mark.parametrize(
    ("scenario", "seed"),
    [("completed-resumed", 1), ("completed-resumed", 2), ("failed-first-link", 3), ("selection-policy", 4)],
)
def test_chaotic_delivery_gives_exactly_one_record_and_no_repeated_side_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario: str, seed: int
) -> None:
    monkeypatch.setattr(
        evidence, "publish_report", lambda *args, **kwargs: None
    )  # a chart per run; no record field needs it
    run_uri = str(write_sample_run(tmp_path / "runs", scenario))

    clean_storage = CrashAfterWrite(random.Random(0), crash_rate=0.0)
    clean, clean_id = _run(tmp_path / "clean", run_uri, InProcessBus(), clean_storage)
    expected = clean.ports.records.get(clean_id)
    assert expected is not None and expected.status.value in ("awaiting_authority", "complete")

    rng = random.Random(seed)
    bus = ChaosBus(rng=rng)
    storage = CrashAfterWrite(rng)
    chaos, run_id = _run(tmp_path / "chaos", run_uri, bus, storage)

    assert run_id == clean_id
    assert [r.run_id for r in chaos.ports.records.list_runs()] == [run_id]  # exactly one record
    record = chaos.ports.records.get(run_id)
    assert record is not None
    assert comparable(record, tmp_path / "chaos") == comparable(expected, tmp_path / "clean")
    assert bus.dead_letters == []
    assert sum(bus.deliveries.values()) > len(bus.published)  # duplicates were really delivered
    assert storage.crashes  # and crashes after side effects really happened
    # No side effect twice: each preserved/derived object was created exactly once, the record finished once.
    assert storage.created and max(storage.created.values()) == 1
    assert set(storage.created) == {
        uri.replace(str(tmp_path / "clean"), str(tmp_path / "chaos")) for uri in clean_storage.created
    }
    assert [m.topic for m in bus.published].count("record-ready") == 1
