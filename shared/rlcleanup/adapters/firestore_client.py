"""The Firestore connection both record-store classes share: one client, bounded deadlines, one error mapping.

Every call has a bounded deadline (RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS, default 30 s: per attempt and for
the retries together; queries 3x). The client's own default is to retry UNAVAILABLE for 60-300 s, so an outage
was invisible: a delivery blocked, then carried on against whatever answered. Now a record store that does not
answer in time raises RecordStoreUnavailable (transient, logged at ERROR with run, step, operation and cause),
the delivery fails with HTTP 500 and Pub/Sub redelivers it. Billable document operations are counted
(ports/usage.py), and documents are checked against Firestore's size limit before they are written.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from rlcleanup.context import current_context
from rlcleanup.errors import RecordStoreUnavailable
from rlcleanup.ports import usage
from rlcleanup.ports.collections import RUNS
from rlcleanup.settings import load_settings

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_SECONDS = 30.0

MAX_DOC_BYTES = 1_048_576
DOC_BUDGET_BYTES = 900_000  # stay well under Firestore's 1 MiB document limit


class DocumentTooLarge(ValueError):
    pass


def approx_size(value: Any) -> int:
    """Firestore's storage-size rules, approximated upward (strings: bytes+1, numbers: 8, maps: keys+values)."""
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, int | float):
        return 8
    if isinstance(value, datetime):
        return 8
    if isinstance(value, str):
        return len(value.encode()) + 1
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, dict):
        return sum(len(str(k).encode()) + 1 + approx_size(v) for k, v in value.items()) + 32
    if isinstance(value, list | tuple):
        return sum(approx_size(v) for v in value) + 8
    return len(str(value)) + 1


def check_size(run_id: str, doc: dict[str, Any]) -> None:
    size = approx_size(doc)
    if size > DOC_BUDGET_BYTES:
        raise DocumentTooLarge(
            f"run {run_id}: record document would be ~{size} bytes (budget {DOC_BUDGET_BYTES}, limit {MAX_DOC_BYTES}); "
            "large lists belong in GCS, referenced by URI"
        )


def unavailability_types() -> tuple[type[BaseException], ...]:
    """What "the record store did not answer" looks like from the client (after its bounded retries)."""
    from google.api_core import exceptions as gexc

    return (
        gexc.ServiceUnavailable,
        gexc.DeadlineExceeded,
        gexc.RetryError,
        gexc.InternalServerError,
        gexc.TooManyRequests,
        gexc.GatewayTimeout,
        gexc.BadGateway,
        ConnectionError,
        TimeoutError,
    )


def timeout_seconds() -> float:
    """The deadline when none is passed (the functions pass the one their settings read at cold start)."""
    return load_settings().record_store_timeout_seconds


def record_store_unavailable(run_id: str | None, operation: str, exc: BaseException) -> RecordStoreUnavailable:
    """The transient error for an unanswered call, logged once at ERROR with run, step, operation and cause."""
    step = current_context().step
    err = RecordStoreUnavailable(run_id, step, operation, exc)
    log.error(
        "%s",
        err,
        extra={
            "run_id": run_id,
            "step": step,
            "error": {"type": "RecordStoreUnavailable", "operation": operation, "cause": err.cause},
        },
    )
    return err


class _CountingApi:
    """The Firestore GAPIC client with every billable document counted (ports/usage.py): each document a
    lookup or query returns is a read (a missing document looked up, and an empty query, are 1 read each), each
    write in a commit a write or a delete. Everything else is the wrapped client's."""

    def __init__(self, api: Any) -> None:
        self._api = api

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request") if "request" in kwargs else (args[0] if args else None)
        writes = (request.get("writes") if isinstance(request, dict) else getattr(request, "writes", None)) or []
        deletes = sum(1 for w in writes if _operation(w) == "delete")
        response = self._api.commit(*args, **kwargs)
        usage.count(usage.FIRESTORE_WRITES, len(writes) - deletes)
        usage.count(usage.FIRESTORE_DELETES, deletes)
        return response

    def batch_get_documents(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for response in self._api.batch_get_documents(*args, **kwargs):
            if _has(response, "found") or _has(response, "missing"):
                usage.count(usage.FIRESTORE_READS)
            yield response

    def run_query(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        documents = 0
        for response in self._api.run_query(*args, **kwargs):
            if _has(response, "document"):
                documents += 1
                usage.count(usage.FIRESTORE_READS)
            yield response
        if documents == 0:
            usage.count(usage.FIRESTORE_READS)  # a query is billed at least one read

    def run_aggregation_query(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        yield from self._api.run_aggregation_query(*args, **kwargs)
        usage.count(usage.FIRESTORE_READS)  # a count() bills one read per 1000 index entries, at least one


def _raw(message: Any) -> Any:
    pb = getattr(type(message), "pb", None)  # proto-plus wrapper -> its protobuf message
    return pb(message) if callable(pb) else message


def _operation(write: Any) -> str | None:
    return _raw(write).WhichOneof("operation")


def _has(response: Any, field: str) -> bool:
    try:
        return bool(_raw(response).HasField(field))
    except ValueError:
        return False


def count_requests(client: Any) -> Any:
    """Count the client's billable document operations (a wrapper around its lazily built GAPIC client)."""
    api = client._firestore_api
    if not isinstance(api, _CountingApi):
        client._firestore_api_internal = _CountingApi(api)
    return client


class FirestoreConnection:
    """One Firestore client (made on first use, requests counted) with the deadline and retry every call uses, and
    `guard`, which turns an unanswered call into RecordStoreUnavailable."""

    def __init__(
        self, project: str, client: Any | None = None, database: str = "(default)", timeout: float | None = None
    ) -> None:
        self.project = project
        self.database = database
        self._client = client
        self.timeout = timeout or timeout_seconds()
        self._retry: Any = None

    @property
    def rpc(self) -> dict[str, Any]:
        """retry + timeout for every call: bounded, instead of the client's 60-300 s default."""
        if self._retry is None:
            from google.api_core import exceptions as gexc
            from google.api_core.retry import Retry, if_exception_type

            self._retry = Retry(
                predicate=if_exception_type(
                    gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError, gexc.TooManyRequests
                ),
                initial=0.2,
                maximum=2.0,
                multiplier=2.0,
                timeout=self.timeout,
            )
        return {"retry": self._retry, "timeout": self.timeout}

    @property
    def stream_rpc(self) -> dict[str, Any]:
        return {**self.rpc, "timeout": 3 * self.timeout}

    @contextlib.contextmanager
    def guard(self, operation: str, run_id: str | None = None) -> Iterator[None]:
        try:
            yield
        except unavailability_types() as exc:
            raise record_store_unavailable(run_id, operation, exc) from exc

    @property
    def db(self) -> Any:
        if self._client is None:
            from google.cloud import firestore

            self._client = count_requests(firestore.Client(project=self.project, database=self.database))
        return self._client

    def run_doc(self, run_id: str) -> Any:
        return self.db.collection(RUNS).document(run_id)


def plain(value: Any) -> Any:
    """Enums to their values, tuples to lists; datetimes stay (they become Firestore timestamps)."""
    from enum import Enum

    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value
