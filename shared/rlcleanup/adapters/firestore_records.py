"""RecordStore on Firestore (native mode), laid out to read well in the console.

runs/{run_id}                  the record's top-level fields (plain values, timestamps, small maps)
runs/{run_id}/steps/{key}      idempotency claims and step results
runs/{run_id}/candidates/{N}   one document per export candidate
runs/{run_id}/attempts/{id}    one document per attempt of the chain
runs/{run_id}/events/{id}      the ledger of every event seen, with its outcome
runs/{run_id}/errors/{id}      every error; the run document keeps the first MAX_INLINE_ERRORS
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from rlcleanup.models.record import CompletionRecord, RunError, utcnow
from rlcleanup.ports.records import Claim

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
    """Firestore forbids arrays inside arrays: coverage gaps become [{first, last}] maps."""
    out = dict(fields)
    chain = out.get("chain")
    if isinstance(chain, dict):
        chain = json.loads(json.dumps(chain, default=str))
        coverage = chain.get("coverage") or {}
        coverage["gaps"] = [{"first": a, "last": b} for a, b in coverage.get("gaps", [])]
        out["chain"] = chain
    selection = out.get("selection")
    if isinstance(selection, dict) and isinstance(selection.get("chain_coverage"), dict):
        selection = dict(selection)
        cov = dict(selection["chain_coverage"])
        cov["gaps"] = [{"first": a, "last": b} for a, b in cov.get("gaps", [])]
        selection["chain_coverage"] = cov
        out["selection"] = selection
    return out


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


class FirestoreRecordStore:
    def __init__(self, project: str, client: Any | None = None, database: str = "(default)") -> None:
        self.project = project
        self.database = database
        self._client = client

    @property
    def db(self) -> Any:
        if self._client is None:
            from google.cloud import firestore

            self._client = firestore.Client(project=self.project, database=self.database)
        return self._client

    def _run(self, run_id: str) -> Any:
        return self.db.collection("runs").document(run_id)

    # ----------------------------------------------------------- records

    def get(self, run_id: str) -> CompletionRecord | None:
        snap = self._run(run_id).get()
        if not snap.exists:
            return None
        doc = snap.to_dict()
        if int(doc.get("error_count") or 0) > len(doc.get("errors") or []):
            # The run document keeps the first MAX_INLINE_ERRORS; the full list is the errors subcollection.
            errs = [s.to_dict() for s in self._run(run_id).collection("errors").stream()]
            doc["errors"] = sorted(errs, key=lambda e: (e.get("at") or utcnow(), e.get("code", "")))
        return CompletionRecord.model_validate(_decode(doc))

    def create_if_absent(self, record: CompletionRecord) -> bool:
        from google.api_core.exceptions import AlreadyExists

        doc = _encode(record.model_dump(mode="python"))
        doc["error_count"] = len(record.errors)
        _check_size(record.run_id, doc)
        try:
            self._run(record.run_id).create(_plain(doc))
        except AlreadyExists:
            return False
        return True

    def update(self, run_id: str, fields: dict[str, Any]) -> None:
        probe = {"run_id": run_id, "run_uri": "x", **fields}
        probe.pop("updated_at", None)
        # Validate (never store what the model would reject), then dump in python mode: timestamps stay timestamps.
        validated = CompletionRecord.model_validate(probe)
        encoded = _encode(validated.model_dump(mode="python", include=set(fields) - {"updated_at"}))
        encoded["updated_at"] = utcnow()
        _check_size(run_id, encoded)
        ref = self._run(run_id)
        batch = self.db.batch()
        batch.update(ref, _plain(encoded))
        for cand in fields.get("candidates") or []:
            batch.set(ref.collection("candidates").document(str(cand["step"])), _plain(cand))
        chain = fields.get("chain")
        if isinstance(chain, dict):
            for att in chain.get("attempts", []):
                batch.set(ref.collection("attempts").document(str(att["attempt_id"])), _plain(att))
        from google.api_core.exceptions import NotFound

        try:
            batch.commit()
        except NotFound as exc:  # the same contract as SQLite: updating a missing record is an error
            raise KeyError(f"no record for run {run_id!r}") from exc

    def add_errors(self, run_id: str, errors: list[RunError]) -> None:
        """Each error once (keyed by step|code|message); error doc + run counter commit atomically."""
        from google.api_core.exceptions import AlreadyExists, NotFound
        from google.cloud import firestore

        ref = self._run(run_id)
        for err in errors:
            key = hashlib.sha256(f"{err.step}|{err.code}|{err.message}".encode()).hexdigest()[:32]
            snap = ref.get(field_paths=["error_count"])
            if not snap.exists:
                raise KeyError(f"no record for run {run_id!r}")
            count = (snap.to_dict() or {}).get("error_count", 0)
            update: dict[str, Any] = {"error_count": firestore.Increment(1), "updated_at": utcnow()}
            if count < MAX_INLINE_ERRORS:
                update["errors"] = firestore.ArrayUnion([err.model_dump(mode="python")])
            batch = self.db.batch()
            batch.create(ref.collection("errors").document(key), err.model_dump(mode="python"))
            batch.update(ref, update)
            try:
                batch.commit()
            except AlreadyExists:
                continue  # a replay of the same failure: recorded once
            except NotFound as exc:
                raise KeyError(f"no record for run {run_id!r}") from exc

    def list_runs(self, limit: int = 100) -> Iterator[CompletionRecord]:
        from google.cloud import firestore

        query = self.db.collection("runs").order_by("updated_at", direction=firestore.Query.DESCENDING).limit(limit)
        for snap in query.stream():
            yield CompletionRecord.model_validate(_decode(snap.to_dict()))

    # ----------------------------------------------------------- claims

    def _step(self, run_id: str, key: str) -> Any:
        return self._run(run_id).collection("steps").document(key.replace("/", "|"))

    def claim(self, run_id: str, key: str, lease_seconds: float, now: datetime) -> Claim:
        from google.api_core.exceptions import AlreadyExists, FailedPrecondition

        ref = self._step(run_id, key)
        lease = {
            "key": key,
            "state": "running",
            "lease_until": now + timedelta(seconds=lease_seconds),
            "updated_at": now,
        }
        try:
            ref.create(lease)  # atomic create: exactly one winner among concurrent deliveries
            return Claim.acquired
        except AlreadyExists:
            pass
        snap = ref.get()
        data = snap.to_dict() or {}
        if data.get("state") == "done":
            return Claim.done
        until = data.get("lease_until")
        if until is not None and until > now:
            return Claim.busy
        try:  # the lease expired (a crashed worker): take it over unless someone else just did
            ref.update(lease, option=self.db.write_option(last_update_time=snap.update_time))
        except FailedPrecondition:
            return Claim.busy
        return Claim.acquired

    def complete(self, run_id: str, key: str, result: dict[str, Any]) -> None:
        doc = {"key": key, "state": "done", "result": _plain(result), "lease_until": None, "updated_at": utcnow()}
        _check_size(run_id, doc)
        self._step(run_id, key).set(doc)

    def release(self, run_id: str, key: str) -> None:
        from google.api_core.exceptions import FailedPrecondition, NotFound

        ref = self._step(run_id, key)
        snap = ref.get()
        if snap.exists and (snap.to_dict() or {}).get("state") != "done":
            # Only the lease we read: if another worker took it over meanwhile, its claim stays.
            with contextlib.suppress(FailedPrecondition, NotFound):
                ref.delete(option=self.db.write_option(last_update_time=snap.update_time))

    def result(self, run_id: str, key: str) -> dict[str, Any] | None:
        snap = self._step(run_id, key).get()
        data = snap.to_dict() if snap.exists else None
        if not data or data.get("state") != "done":
            return None
        result: dict[str, Any] = data.get("result") or {}
        return result

    def results(self, run_id: str, prefix: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        from google.cloud.firestore_v1.base_query import FieldFilter

        steps = self._run(run_id).collection("steps")
        for snap in steps.where(filter=FieldFilter("state", "==", "done")).stream():
            data = snap.to_dict() or {}
            key = data.get("key", snap.id)
            if key.startswith(prefix):
                out[key] = data.get("result") or {}
        return out

    def record_event(self, run_id: str, event_id: str, outcome: dict[str, Any]) -> bool:
        from google.api_core.exceptions import AlreadyExists

        try:
            self._run(run_id).collection("events").document(event_id).create({**_plain(outcome), "seen_at": utcnow()})
        except AlreadyExists:
            return False
        return True

    # ----------------------------------------------------------- auxiliary documents

    def _doc(self, collection: str, doc_id: str) -> Any:
        return self.db.collection(collection).document(doc_id)

    def put_doc(self, collection: str, doc_id: str, data: dict[str, Any], *, only_if_absent: bool = False) -> bool:
        from google.api_core.exceptions import AlreadyExists

        ref = self._doc(collection, doc_id)
        if only_if_absent:
            try:
                ref.create(_plain(data))
            except AlreadyExists:
                return False
            return True
        ref.set(_plain(data))
        return True

    def get_doc(self, collection: str, doc_id: str) -> dict[str, Any] | None:
        snap = self._doc(collection, doc_id).get()
        return snap.to_dict() if snap.exists else None

    def list_docs(self, collection: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        docs = [(s.id, s.to_dict() or {}) for s in self.db.collection(collection).stream() if s.id.startswith(prefix)]
        return sorted(docs)


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
