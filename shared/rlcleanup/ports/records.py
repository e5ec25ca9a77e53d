"""Records ports: the run-record repository, and the idempotency store (claims, leases, step results).

Two ports that say one thing each:
- `RunRecords`: completion records (get / create / merge-update / errors / list), the event ledger and small
  auxiliary documents (grants, approvers, registry rows, poison messages, delivery counters).
- `IdempotencyStore`: "run this step at most once" — the lease/claim state machine, written once here. An adapter
  provides only the primitives: create-if-absent, get (with an opaque version), compare-and-set on that version,
  delete on that version, and the completed results under a key prefix.

Steps that run in parallel (fan-out) each own disjoint top-level fields, so `update` merges fields
instead of rewriting the whole record: no lost updates without a global lock.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal, Protocol, TypeVar, get_args

from pydantic import BaseModel, ConfigDict

from rlcleanup.errors import RetryLater
from rlcleanup.models.record import CompletionRecord, RunError


class Claim(StrEnum):
    acquired = "acquired"  # the caller owns the work until the lease ends
    done = "done"  # finished before: do not redo it (its result is stored)
    busy = "busy"  # another worker holds an unexpired lease: retry later


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


# The record fields a store can look runs up by, newest end first (steps/history.py): each is indexed on every
# backend (SQLite: an expression index; Firestore: a composite index with ended_at, infra/modules/rlcleanup/firestore.tf).
IndexedField = Literal["signature", "experiment", "failure_class"]
INDEXED_FIELDS: tuple[str, ...] = get_args(IndexedField)
MAX_LOOKUP = 100  # no lookup reads more records than this, whatever it asks


def check_indexed(field: str, limit: int) -> int:
    """Refuse a field no backend indexes (a lookup by it would scan every record); the limit, bounded."""
    if field not in INDEXED_FIELDS:
        raise ValueError(f"records are not indexed by {field!r}; indexed: {', '.join(INDEXED_FIELDS)}")
    return max(0, min(limit, MAX_LOOKUP))


class ForgetReport(BaseModel):
    """What `RunRecords.forget_run` removed."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    had_record: bool  # the run had a completion record
    removed: int  # documents (rows) removed in all: the record, its claims, events and every document filed under it


class SetAside(BaseModel):
    """A run's record, claims and event ledger as `RunRecords.set_aside` took them out, for `put_back` (a rerun that
    did not finish leaves the record as it was). Its content is the backend's own: only that backend reads it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    run_id: str
    backend: str
    rows: dict[str, list[Any]]


class RunRecords(Protocol):
    """The run-record repository."""

    def get(self, run_id: str) -> CompletionRecord | None: ...

    def console_url(self, run_id: str) -> str | None:
        """The run's record as a page in the store's own console (Firestore's data viewer), which the report's
        banner and the model events link; None for a store that has no console (a SQLite file). Every backend
        answers it: no caller probes a store for what it can do."""
        ...

    def has_record(self, run_id: str) -> bool:
        """Whether the run has a record (one cheap read: no decoding, no subcollections)."""
        ...

    def create_if_absent(self, record: CompletionRecord) -> bool:
        """True when this call created the record."""
        ...

    def update(self, run_id: str, fields: dict[str, Any]) -> None:
        """Merge top-level fields (JSON-mode values) into the record and bump updated_at."""
        ...

    def add_errors(self, run_id: str, errors: list[RunError]) -> None: ...

    def list_runs(self, limit: int = 100) -> Iterator[CompletionRecord]: ...

    def runs_where(
        self, field: IndexedField, value: str, *, ended_before: datetime | None = None, limit: int = 20
    ) -> list[CompletionRecord]:
        """Records whose indexed `field` equals `value` and that ended before `ended_before` (when given), newest
        end first, at most `limit` (and MAX_LOOKUP): one indexed query, its cost independent of the store's size."""
        ...

    def record_event(self, run_id: str, event_id: str, outcome: dict[str, Any]) -> bool:
        """Ledger of events seen; False when this event id was recorded before."""
        ...

    def put_doc(self, collection: str, doc_id: str, data: dict[str, Any], *, only_if_absent: bool = False) -> bool:
        """Small auxiliary documents (grants, approvers, registry rows); False when only_if_absent and it exists."""
        ...

    def get_doc(self, collection: str, doc_id: str) -> dict[str, Any] | None: ...

    def list_docs(self, collection: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]: ...

    # Operator maintenance (`rlcleanup forget`, `run --rerun`): the pipeline itself never removes anything.

    def forget_run(self, run_id: str) -> ForgetReport:
        """Remove the run's record, claims and events, every collection filed under it (ports/collections.py
        `RunCollection`), its documents in the run-keyed collections (`RUN_KEYED`) and those naming it
        (`RUN_NAMED`); no other run's document. The ended-grant ledger and the approvers stay."""
        ...

    def set_aside(self, run_id: str) -> SetAside:
        """Take the run's record, claims and event ledger out (so every step runs again) and return them; the
        documents filed under it (grants, history) stay: they are its authority trail."""
        ...

    def put_back(self, kept: SetAside) -> None:
        """Replace whatever the run's record, claims and events are now with what `set_aside` took out."""
        ...


@dataclass(frozen=True)
class StepDoc:
    """One claim as the state machine sees it: running under a lease held by `owner`, or done with a result."""

    state: str  # "running" | "done"
    lease_until: datetime | None = None
    owner: str | None = None  # the delivery (Pub/Sub message id) holding the lease
    result: dict[str, Any] | None = None


RUNNING, DONE = "running", "done"
StoredM = TypeVar("StoredM", bound=BaseModel)
_COMPLETE_TRIES = 5


class IdempotencyStore(ABC):
    """Claims per (run_id, key): the state machine lives here, once; adapters implement the five primitives."""

    # ------------------------------------------------------------------ primitives (per adapter)

    @abstractmethod
    def _create(self, run_id: str, key: str, doc: StepDoc) -> bool:
        """Atomically create the claim; False when it exists."""

    @abstractmethod
    def _get(self, run_id: str, key: str) -> tuple[StepDoc, Any] | None:
        """The claim and an opaque version for compare-and-set / delete; None when absent."""

    @abstractmethod
    def _compare_and_set(self, run_id: str, key: str, version: Any, doc: StepDoc) -> bool:
        """Replace the claim if it is still at `version`; False when someone changed (or deleted) it since."""

    @abstractmethod
    def _delete(self, run_id: str, key: str, version: Any) -> bool:
        """Delete the claim if it is still at `version`."""

    @abstractmethod
    def _done_results(self, run_id: str, prefix: str) -> dict[str, dict[str, Any]]:
        """Results of the done claims whose key starts with prefix."""

    def _done_count(self, run_id: str, prefix: str) -> int:
        """How many done claims have a key starting with prefix (adapters count server side, reading no results)."""
        return len(self._done_results(run_id, prefix))

    @abstractmethod
    def claims_of(self, run_id: str) -> dict[str, StepDoc]:
        """Every claim of the run, done and in flight, by key: what `rlcleanup watch`/`status` show (leases too)."""

    @abstractmethod
    def forget_claims(self, run_id: str) -> int:
        """Drop every claim of the run (returns how many): only when a run lost to a reset of the store is
        re-driven from scratch (runtime/recovery.py), so claims written after the reset cannot block it."""

    def database_created_at(self) -> datetime | None:
        """When the database was last created empty (a store that can come back empty keeps an epoch: Firestore's
        adapter); None for a store that never loses what it wrote (SQLite)."""
        return None

    def _before_claim(self, run_id: str, key: str) -> None:  # noqa: B027 - an optional hook, empty by default
        """A hook run before every claim (Firestore checks its database epoch there)."""

    # ------------------------------------------------------------------ the state machine

    def claim(self, run_id: str, key: str, lease_seconds: float, now: datetime, owner: str | None = None) -> Claim:
        """Take the claim unless it is done or leased to another delivery. A lease held by the same `owner` is a
        dead attempt of this very message (push redelivers only after a failure or the ack deadline): e.g. one
        whose release could not reach the store during an outage. It is taken over at once instead of answering
        busy until the lease runs out."""
        self._before_claim(run_id, key)
        lease = StepDoc(RUNNING, lease_until=now + timedelta(seconds=lease_seconds), owner=owner)
        if self._create(run_id, key, lease):  # atomic create: exactly one winner among concurrent deliveries
            return Claim.acquired
        found = self._get(run_id, key)
        if found is None:  # released between our create and get: one more try, then let the caller retry
            return Claim.acquired if self._create(run_id, key, lease) else Claim.busy
        doc, version = found
        if doc.state == DONE:
            return Claim.done
        leased = doc.lease_until is not None and doc.lease_until > now
        if leased and not (owner and doc.owner == owner):
            return Claim.busy
        # Expired (a crashed worker) or this message's own: take it over unless someone else just did.
        return Claim.acquired if self._compare_and_set(run_id, key, version, lease) else Claim.busy

    def complete(self, run_id: str, key: str, result: dict[str, Any]) -> None:
        check_document_value(result, f"runs/{run_id}/steps/{key}")
        done = StepDoc(DONE, result=result)
        for _ in range(_COMPLETE_TRIES):
            if self._create(run_id, key, done):
                return
            found = self._get(run_id, key)
            if found is not None and self._compare_and_set(run_id, key, found[1], done):
                return
        raise RetryLater(f"{run_id}/{key}: the claim kept changing under complete()")

    def release(self, run_id: str, key: str) -> None:
        """Drop an unfinished claim (only the version read: a takeover meanwhile keeps its lease)."""
        found = self._get(run_id, key)
        if found is not None and found[0].state != DONE:
            self._delete(run_id, key, found[1])

    def result(self, run_id: str, key: str) -> dict[str, Any] | None:
        found = self._get(run_id, key)
        if found is None or found[0].state != DONE:
            return None
        return found[0].result or {}

    def results(self, run_id: str, prefix: str) -> dict[str, dict[str, Any]]:
        """Completed results whose key starts with prefix (fan-in reads these)."""
        return self._done_results(run_id, prefix)

    # ------------------------------------------------------------------ typed reads (every claim as its model)

    def complete_as(self, run_id: str, key: str, result: BaseModel) -> None:
        """Complete the claim with a model's result (stored as its JSON: `result_as` reads it back)."""
        self.complete(run_id, key, result.model_dump(mode="json"))

    def result_as(self, run_id: str, key: str, model: type[StoredM]) -> StoredM | None:
        """The result a done claim stored, as its model (None: not done)."""
        raw = self.result(run_id, key)
        return None if raw is None else model.model_validate(raw)

    def results_as(self, run_id: str, prefix: str, model: type[StoredM]) -> dict[str, StoredM]:
        """Every done claim's result under a key prefix, each as its model, by full key."""
        return {key: model.model_validate(raw) for key, raw in self.results(run_id, prefix).items()}

    def done_keys(self, run_id: str, prefix: str) -> set[str]:
        """The keys of the done claims under a prefix: what a reader that needs only "is it done" asks (their
        results are read through `result_as`/`results_as`)."""
        return set(self.results(run_id, prefix))

    def done_count(self, run_id: str, prefix: str) -> int:
        """How many claims whose key starts with prefix are done: a fan-in's cheap gate. Fewer than its members
        means some member is not done; as many or more, the fan-in reads the results to check each member."""
        return self._done_count(run_id, prefix)
