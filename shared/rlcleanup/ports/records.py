"""Records port: completion records, step results, idempotency claims and the event ledger.

Steps that run in parallel (fan-out) each own disjoint top-level fields, so `update` merges fields
instead of rewriting the whole record: no lost updates without a global lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from rlcleanup.models.record import CompletionRecord, RunError


class Claim(StrEnum):
    acquired = "acquired"  # the caller owns the work until the lease ends
    done = "done"  # finished before: do not redo it (its result is stored)
    busy = "busy"  # another worker holds an unexpired lease: retry later


class RecordNotFound(KeyError):
    pass


def check_document_value(value: Any, where: str, *, in_array: bool = False) -> None:
    """Firestore's value rules that JSON lacks, so every store (SQLite too) refuses what Firestore would:
    an array directly inside an array, and non-string or empty map keys."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"{where}: map key {key!r} is not a non-empty string (Firestore rejects it)")
            check_document_value(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        if in_array:
            raise ValueError(f"{where}: an array inside an array (Firestore rejects nested arrays)")
        for index, item in enumerate(value):
            check_document_value(item, f"{where}[{index}]", in_array=True)


class RecordStore(Protocol):
    def get(self, run_id: str) -> CompletionRecord | None: ...

    def create_if_absent(self, record: CompletionRecord) -> bool:
        """True when this call created the record."""
        ...

    def update(self, run_id: str, fields: dict[str, Any]) -> None:
        """Merge top-level fields (JSON-mode values) into the record and bump updated_at."""
        ...

    def add_errors(self, run_id: str, errors: list[RunError]) -> None: ...

    def list_runs(self, limit: int = 100) -> Iterator[CompletionRecord]: ...

    def claim(self, run_id: str, key: str, lease_seconds: float, now: datetime) -> Claim: ...

    def complete(self, run_id: str, key: str, result: dict[str, Any]) -> None: ...

    def release(self, run_id: str, key: str) -> None: ...

    def result(self, run_id: str, key: str) -> dict[str, Any] | None: ...

    def results(self, run_id: str, prefix: str) -> dict[str, dict[str, Any]]:
        """Completed results whose key starts with prefix (fan-in reads these)."""
        ...

    def record_event(self, run_id: str, event_id: str, outcome: dict[str, Any]) -> bool:
        """Ledger of events seen; False when this event id was recorded before."""
        ...

    def put_doc(self, collection: str, doc_id: str, data: dict[str, Any], *, only_if_absent: bool = False) -> bool:
        """Small auxiliary documents (grants, approvers, registry rows); False when only_if_absent and it exists."""
        ...

    def get_doc(self, collection: str, doc_id: str) -> dict[str, Any] | None: ...

    def list_docs(self, collection: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]: ...
