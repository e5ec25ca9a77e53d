"""Records port: the completion record, per-step results, claims (idempotency) and the event ledger."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Protocol

from rlcleanup.models.record import CompletionRecord


class ClaimState:
    acquired = "acquired"  # caller owns the step until the lease ends
    done = "done"  # step finished before: the caller must not redo it
    busy = "busy"  # someone else holds an unexpired lease: retry later


class RecordStore(Protocol):
    def get(self, run_id: str) -> CompletionRecord | None: ...

    def put(self, record: CompletionRecord) -> None: ...

    def list_runs(self, limit: int = 100) -> Iterator[CompletionRecord]: ...

    # Idempotency: claim(run_id, key) -> acquired | done | busy
    def claim(self, run_id: str, key: str, lease_seconds: float, now: datetime) -> str: ...

    def complete(self, run_id: str, key: str, result: dict[str, Any]) -> None: ...

    def release(self, run_id: str, key: str) -> None: ...

    def result(self, run_id: str, key: str) -> dict[str, Any] | None: ...

    def record_event(self, run_id: str, event_id: str, outcome: dict[str, Any]) -> bool:
        """Ledger of events seen; False when this event id was already recorded."""
        ...
