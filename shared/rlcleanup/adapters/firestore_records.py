"""RunRecords on Firestore (native mode), laid out to read well in the console.

runs/{run_id}                  the record's top-level fields (plain values, timestamps, small maps)
runs/{run_id}/steps/{key}      idempotency claims and step results
runs/{run_id}/candidates/{N}   one document per export candidate
runs/{run_id}/attempts/{id}    one document per attempt of the chain
runs/{run_id}/events/{id}      the ledger of every event seen, with its outcome
runs/{run_id}/errors/{id}      every error; the run document keeps the first MAX_INLINE_ERRORS
rlcleanup_meta/database        this database's epoch: a fresh id when it was (re)created empty

Every call has a bounded deadline (RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS, default 30 s: per attempt and for
the retries together; queries 3x). The client's own default is to retry UNAVAILABLE for 60-300 s, so an outage
was invisible: a delivery blocked, then carried on against whatever answered. Now a record store that does not
answer in time raises RecordStoreUnavailable (transient, logged at ERROR with run, step, operation and cause),
the delivery fails with HTTP 500 and Pub/Sub redelivers it. A database that comes back *empty* (an emulator
restarted without persistence) is noticed by its epoch changing under a claim: RecordStoreLost (permanent,
recorded on the run, says to re-emit its terminal event).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from rlcleanup.context import current_context
from rlcleanup.errors import RecordStoreLost, RecordStoreUnavailable
from rlcleanup.models.record import DERIVED_FROM, CompletionRecord, RunError, utcnow
from rlcleanup.ports import usage
from rlcleanup.ports.records import DONE, IdempotencyStore, StepDoc
from rlcleanup.settings import load_settings

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_SECONDS = 30.0
META_COLLECTION = "rlcleanup_meta"
META_DOC = "database"
RUN_START_KEYS = ("classify", "pre-cancel:")  # claims that begin work on a run: nothing before them to lose

MAX_DOC_BYTES = 1_048_576
DOC_BUDGET_BYTES = 900_000  # stay well under Firestore's 1 MiB document limit
MAX_INLINE_ERRORS = 20


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


def _encode(fields: dict[str, Any]) -> dict[str, Any]:
    """Python-mode record fields as Firestore stores them: datetimes stay datetimes (Firestore timestamps, in the
    chain's attempts too), and coverage gaps become [{first, last}] maps (Firestore forbids arrays in arrays)."""
    out = _plain(fields)
    chain = out.get("chain")
    if isinstance(chain, dict) and isinstance(chain.get("coverage"), dict):
        _encode_cov(chain["coverage"])
    selection = out.get("selection")
    if isinstance(selection, dict) and isinstance(selection.get("chain_coverage"), dict):
        _encode_cov(selection["chain_coverage"])
    return out


def _encode_cov(cov: dict[str, Any]) -> None:
    cov["gaps"] = [{"first": a, "last": b} for a, b in cov.get("gaps", [])]


def _decode_cov(cov: dict[str, Any] | None) -> None:
    if isinstance(cov, dict):
        cov["gaps"] = [[g["first"], g["last"]] if isinstance(g, dict) else g for g in cov.get("gaps", [])]


def _decode(doc: dict[str, Any]) -> dict[str, Any]:
    if isinstance(doc.get("chain"), dict):
        _decode_cov(doc["chain"].get("coverage"))
    if isinstance(doc.get("selection"), dict):
        _decode_cov(doc["selection"].get("chain_coverage"))
    doc.pop("error_count", None)
    return doc


def _check_size(run_id: str, doc: dict[str, Any]) -> None:
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


_KEY_RANGE_END = "\uf8ff"  # keys starting with a prefix sort in [prefix, prefix + U+F8FF)


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


class FirestoreRunRecords:
    """The run-record repository on Firestore: runs/{run_id} and its candidates/attempts/events/errors."""

    def __init__(
        self, project: str, client: Any | None = None, database: str = "(default)", timeout: float | None = None
    ) -> None:
        self.project = project
        self.database = database
        self._client = client
        self.timeout = timeout or timeout_seconds()
        self._retry: Any = None

    @property
    def _rpc(self) -> dict[str, Any]:
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
    def _stream_rpc(self) -> dict[str, Any]:
        return {**self._rpc, "timeout": 3 * self.timeout}

    @contextlib.contextmanager
    def _guard(self, operation: str, run_id: str | None = None) -> Iterator[None]:
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

    def _run(self, run_id: str) -> Any:
        return self.db.collection("runs").document(run_id)

    # ----------------------------------------------------------- records

    def get(self, run_id: str) -> CompletionRecord | None:
        with self._guard("get record", run_id):
            snap = self._run(run_id).get(**self._rpc)
            if not snap.exists:
                return None
            doc = snap.to_dict()
            if int(doc.get("error_count") or 0) > len(doc.get("errors") or []):
                # The run document keeps the first MAX_INLINE_ERRORS; the full list is the errors subcollection.
                errs = [s.to_dict() for s in self._run(run_id).collection("errors").stream(**self._stream_rpc)]
                doc["errors"] = sorted(errs, key=lambda e: (e.get("at") or utcnow(), e.get("code", "")))
        return CompletionRecord.model_validate(_decode(doc))

    def create_if_absent(self, record: CompletionRecord) -> bool:
        from google.api_core.exceptions import AlreadyExists

        doc = _encode(record.model_dump(mode="python"))
        doc["error_count"] = len(record.errors)
        _check_size(record.run_id, doc)
        try:
            with self._guard("create record", record.run_id):
                self._run(record.run_id).create(doc, **self._rpc)
        except AlreadyExists:
            return False
        return True

    def update(self, run_id: str, fields: dict[str, Any]) -> None:
        probe = {"run_id": run_id, "run_uri": "x", **fields}
        probe.pop("updated_at", None)
        # Validate (never store what the model would reject), then dump in python mode: timestamps stay timestamps.
        validated = CompletionRecord.model_validate(probe)
        # A derived field (problem_codes, ...) is written with the field it is computed from.
        written = set(fields) - {"updated_at"}
        written |= {derived for source, derived in DERIVED_FROM.items() if source in written}
        encoded = _encode(validated.model_dump(mode="python", include=written))
        encoded["updated_at"] = utcnow()
        _check_size(run_id, encoded)
        ref = self._run(run_id)
        batch = self.db.batch()
        batch.update(ref, encoded)
        for cand in encoded.get("candidates") or []:
            batch.set(ref.collection("candidates").document(str(cand["step"])), cand)
        for att in (encoded.get("chain") or {}).get("attempts", []):
            batch.set(ref.collection("attempts").document(str(att["attempt_id"])), att)
        from google.api_core.exceptions import NotFound

        try:
            with self._guard("update record", run_id):
                batch.commit(**self._rpc)
        except NotFound as exc:  # the same contract as SQLite: updating a missing record is an error
            raise KeyError(f"no record for run {run_id!r}") from exc

    def add_errors(self, run_id: str, errors: list[RunError]) -> None:
        """Each error once (keyed by step|code|message); error doc + run counter commit atomically."""
        from google.api_core.exceptions import AlreadyExists, NotFound
        from google.cloud import firestore

        ref = self._run(run_id)
        for err in errors:
            key = hashlib.sha256(f"{err.step}|{err.code}|{err.message}".encode()).hexdigest()[:32]
            with self._guard("add error", run_id):
                snap = ref.get(field_paths=["error_count"], **self._rpc)
            if not snap.exists:
                raise KeyError(f"no record for run {run_id!r}")
            count = (snap.to_dict() or {}).get("error_count", 0)
            update: dict[str, Any] = {
                "error_count": firestore.Increment(1),
                "error_codes": firestore.ArrayUnion([err.code]),
                "updated_at": utcnow(),
            }
            if count < MAX_INLINE_ERRORS:
                update["errors"] = firestore.ArrayUnion([err.model_dump(mode="python")])
            batch = self.db.batch()
            batch.create(ref.collection("errors").document(key), err.model_dump(mode="python"))
            batch.update(ref, update)
            try:
                with self._guard("add error", run_id):
                    batch.commit(**self._rpc)
            except AlreadyExists:
                continue  # a replay of the same failure: recorded once
            except NotFound as exc:
                raise KeyError(f"no record for run {run_id!r}") from exc

    def list_runs(self, limit: int = 100) -> Iterator[CompletionRecord]:
        from google.cloud import firestore

        query = self.db.collection("runs").order_by("updated_at", direction=firestore.Query.DESCENDING).limit(limit)
        with self._guard("list runs"):
            snaps = list(query.stream(**self._stream_rpc))
        for snap in snaps:
            yield CompletionRecord.model_validate(_decode(snap.to_dict()))

    def record_event(self, run_id: str, event_id: str, outcome: dict[str, Any]) -> bool:
        from google.api_core.exceptions import AlreadyExists

        ref = self._run(run_id).collection("events").document(event_id)
        try:
            with self._guard("record event", run_id):
                ref.create({**_plain(outcome), "seen_at": utcnow()}, **self._rpc)
        except AlreadyExists:
            return False
        return True

    # ----------------------------------------------------------- auxiliary documents

    def _doc(self, collection: str, doc_id: str) -> Any:
        return self.db.collection(collection).document(doc_id)

    def put_doc(self, collection: str, doc_id: str, data: dict[str, Any], *, only_if_absent: bool = False) -> bool:
        from google.api_core.exceptions import AlreadyExists

        ref = self._doc(collection, doc_id)
        with self._guard(f"write {collection}/{doc_id}"):
            if only_if_absent:
                try:
                    ref.create(_plain(data), **self._rpc)
                except AlreadyExists:
                    return False
                return True
            ref.set(_plain(data), **self._rpc)
        return True

    def get_doc(self, collection: str, doc_id: str) -> dict[str, Any] | None:
        with self._guard(f"read {collection}/{doc_id}"):
            snap = self._doc(collection, doc_id).get(**self._rpc)
        return snap.to_dict() if snap.exists else None

    def list_docs(self, collection: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        with self._guard(f"list {collection}"):
            snaps = list(self.db.collection(collection).stream(**self._stream_rpc))
        docs = [(s.id, s.to_dict() or {}) for s in snaps if s.id.startswith(prefix)]
        return sorted(docs)


class FirestoreIdempotencyStore(IdempotencyStore):
    """Claim primitives on runs/{run_id}/steps/{key} (versions are the documents' update times), plus the
    database-epoch check every claim makes first. Shares the run records' client, deadlines and error mapping."""

    def __init__(self, records: FirestoreRunRecords) -> None:
        self.records = records
        self._epoch: str | None = None  # the database epoch this store has seen (None: not looked yet)
        self._epoch_seen_at: datetime | None = None
        self._lost_since: datetime | None = None  # set once this store saw the database come back empty
        self._epoch_lock = threading.Lock()

    # ----------------------------------------------------------- database epoch (data-loss detection)

    def check_epoch(self, run_id: str, key: str) -> None:
        """Raise RecordStoreLost when the database was recreated empty since this store first looked (a fresh
        database gets a new epoch document) and this claim continues a run whose record is gone. Claims that
        start a run (RUN_START_KEYS) and runs recreated since (a re-emitted event) carry on as usual."""
        from google.api_core.exceptions import AlreadyExists

        ref = self.records.db.collection(META_COLLECTION).document(META_DOC)
        with self.records._guard("check database epoch", run_id):
            snap = ref.get(**self.records._rpc)
            data = snap.to_dict() if snap.exists else None
            if data is None:
                with contextlib.suppress(AlreadyExists):  # another worker created it first: use theirs
                    ref.create({"epoch": uuid.uuid4().hex, "created_at": utcnow()}, **self.records._rpc)
                data = ref.get(**self.records._rpc).to_dict() or {}
        epoch = str(data.get("epoch"))
        with self._epoch_lock:
            if self._epoch is None:
                self._epoch, self._epoch_seen_at = epoch, utcnow()
            elif epoch != self._epoch:
                self._lost_since = self._lost_since or self._epoch_seen_at
                self._epoch, self._epoch_seen_at = epoch, utcnow()
            lost_since = self._lost_since
        if lost_since is None or key.startswith(RUN_START_KEYS):
            return
        with self.records._guard("check database epoch", run_id):
            if self.records._run(run_id).get(field_paths=["run_id"], **self.records._rpc).exists:
                return
        lost = RecordStoreLost(run_id, current_context().step, lost_since.isoformat(timespec="seconds"))
        log.error("%s", lost, extra={"run_id": run_id, "error": {"type": "RecordStoreLost", "claim": key}})
        raise lost

    def _before_claim(self, run_id: str, key: str) -> None:
        self.check_epoch(run_id, key)

    # ----------------------------------------------------------- claim primitives

    def _step(self, run_id: str, key: str) -> Any:
        return self.records._run(run_id).collection("steps").document(key.replace("/", "|"))

    def _fields(self, run_id: str, key: str, doc: StepDoc) -> dict[str, Any]:
        fields = {
            "key": key,
            "state": doc.state,
            "lease_until": doc.lease_until,
            "owner": doc.owner,
            "result": _plain(doc.result) if doc.result is not None else None,
            "updated_at": utcnow(),
        }
        _check_size(run_id, fields)
        return fields

    def _create(self, run_id: str, key: str, doc: StepDoc) -> bool:
        from google.api_core.exceptions import AlreadyExists

        fields = self._fields(run_id, key, doc)
        try:
            with self.records._guard(f"claim {key}", run_id):
                self._step(run_id, key).create(fields, **self.records._rpc)
        except AlreadyExists:
            return False
        return True

    def _get(self, run_id: str, key: str) -> tuple[StepDoc, Any] | None:
        with self.records._guard(f"read claim {key}", run_id):
            snap = self._step(run_id, key).get(**self.records._rpc)
        if not snap.exists:
            return None
        data = snap.to_dict() or {}
        doc = StepDoc(
            state=str(data.get("state")),
            lease_until=data.get("lease_until"),
            owner=data.get("owner"),
            result=data.get("result"),
        )
        return doc, snap.update_time

    def _compare_and_set(self, run_id: str, key: str, version: Any, doc: StepDoc) -> bool:
        from google.api_core.exceptions import FailedPrecondition, NotFound

        fields = self._fields(run_id, key, doc)
        option = self.records.db.write_option(last_update_time=version)
        try:
            with self.records._guard(f"update claim {key}", run_id):
                self._step(run_id, key).update(fields, option=option, **self.records._rpc)
        except (FailedPrecondition, NotFound):
            return False
        return True

    def _delete(self, run_id: str, key: str, version: Any) -> bool:
        from google.api_core.exceptions import FailedPrecondition, NotFound

        option = self.records.db.write_option(last_update_time=version)
        try:
            with self.records._guard(f"release {key}", run_id):
                self._step(run_id, key).delete(option=option, **self.records._rpc)
        except (FailedPrecondition, NotFound):
            return False
        return True

    def _done_query(self, run_id: str, prefix: str) -> Any:
        """Done claims whose key starts with prefix, filtered server side (state == done and a key range; the
        composite index `steps_done_by_key` in infra/modules/rlcleanup/firestore.tf serves it)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self.records._run(run_id).collection("steps").where(filter=FieldFilter("state", "==", DONE))
        if prefix:
            query = query.where(filter=FieldFilter("key", ">=", prefix))
            query = query.where(filter=FieldFilter("key", "<", prefix + _KEY_RANGE_END))
        return query

    def _done_results(self, run_id: str, prefix: str) -> dict[str, dict[str, Any]]:
        with self.records._guard(f"read results {prefix}*", run_id):
            snaps = list(self._done_query(run_id, prefix).stream(**self.records._stream_rpc))
        out: dict[str, dict[str, Any]] = {}
        for snap in snaps:
            data = snap.to_dict() or {}
            key = data.get("key", snap.id)
            if key.startswith(prefix):
                out[key] = data.get("result") or {}
        return out

    def _done_count(self, run_id: str, prefix: str) -> int:
        with self.records._guard(f"count results {prefix}*", run_id):
            rows = self._done_query(run_id, prefix).count(alias="n").get(**self.records._rpc)
        return int(sum(result.value for row in rows for result in row))


def firestore_stores(
    project: str, client: Any | None = None, timeout: float | None = None
) -> tuple[FirestoreRunRecords, FirestoreIdempotencyStore]:
    """The run-record repository and the idempotency store over one client."""
    records = FirestoreRunRecords(project=project, client=client, timeout=timeout)
    return records, FirestoreIdempotencyStore(records)


def _plain(value: Any) -> Any:
    """Enums to their values, tuples to lists; datetimes stay (they become Firestore timestamps)."""
    from enum import Enum

    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
