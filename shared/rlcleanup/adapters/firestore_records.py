"""RunRecords on Firestore (native mode), laid out to read well in the console.

runs/{run_id}                  the record's top-level fields (plain values, timestamps, small maps)
runs/{run_id}/steps/{key}      idempotency claims and step results (firestore_claims.py)
runs/{run_id}/candidates/{N}   one document per export candidate
runs/{run_id}/attempts/{id}    one document per attempt of the chain
runs/{run_id}/events/{id}      the ledger of every event seen, with its outcome
runs/{run_id}/errors/{id}      every error; the run document keeps the first MAX_INLINE_ERRORS
rlcleanup_meta/database        this database's epoch (firestore_claims.py)

The client, its bounded deadlines and the outage error are firestore_client.py's; the console's queries are
firestore_queries.py's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import quote

from rlcleanup.adapters.firestore_claims import FirestoreIdempotencyStore
from rlcleanup.adapters.firestore_client import FirestoreConnection, check_size, plain
from rlcleanup.adapters.firestore_queries import ORDER_FIELD
from rlcleanup.errors import RecordMissing
from rlcleanup.models.record import DERIVED_FROM, CompletionRecord, RunError, utcnow
from rlcleanup.ports.collections import RUN_KEYED, RUN_NAMED, RUNS
from rlcleanup.ports.records import ForgetReport, IndexedField, SetAside, check_indexed

MAX_INLINE_ERRORS = 20
# The record's own subcollections (the rest under runs/{id} are ports/collections.py's run collections: grants,
# history, ... which a rerun keeps).
RECORD_SUBCOLLECTIONS = ("steps", "events", "candidates", "attempts", "errors")
_BATCH_WRITES = 500  # Firestore's limit per batch
ERROR_BATCH = 400  # error documents per commit (Firestore allows 500 writes per batch; +1 for the run document)


def _error_key(err: RunError) -> str:
    return hashlib.sha256(f"{err.step}|{err.code}|{err.message}".encode()).hexdigest()[:32]


def _encode(fields: dict[str, Any]) -> dict[str, Any]:
    """Python-mode record fields as Firestore stores them: datetimes stay datetimes (Firestore timestamps, in the
    chain's attempts too), and coverage gaps become [{first, last}] maps (Firestore forbids arrays in arrays)."""
    out = plain(fields)
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


class FirestoreRunRecords(FirestoreConnection):
    """The run-record repository on Firestore: runs/{run_id} and its candidates/attempts/events/errors."""

    # ----------------------------------------------------------- records

    def console_url(self, run_id: str) -> str:
        """The run document in the Cloud Console's Firestore data viewer (the report's banner links it)."""
        database = "-default-" if self.database == "(default)" else quote(self.database, safe="")
        return (
            f"https://console.cloud.google.com/firestore/databases/{database}/data/panel/runs/"
            f"{quote(run_id, safe='')}?project={quote(self.project, safe='')}"
        )

    def get(self, run_id: str) -> CompletionRecord | None:
        with self.guard("get record", run_id):
            snap = self.run_doc(run_id).get(**self.rpc)
            if not snap.exists:
                return None
            doc = snap.to_dict()
            if int(doc.get("error_count") or 0) > len(doc.get("errors") or []):
                # The run document keeps the first MAX_INLINE_ERRORS; the full list is the errors subcollection.
                errs = [s.to_dict() for s in self.run_doc(run_id).collection("errors").stream(**self.stream_rpc)]
                doc["errors"] = sorted(errs, key=lambda e: (e.get("at") or utcnow(), e.get("code", "")))
        return CompletionRecord.model_validate(_decode(doc))

    def has_record(self, run_id: str) -> bool:
        with self.guard("look for record", run_id):
            return bool(self.run_doc(run_id).get(field_paths=["run_id"], **self.rpc).exists)

    def create_if_absent(self, record: CompletionRecord) -> bool:
        from google.api_core.exceptions import AlreadyExists

        doc = _encode(record.model_dump(mode="python"))
        doc["error_count"] = len(record.errors)
        check_size(record.run_id, doc)
        try:
            with self.guard("create record", record.run_id):
                self.run_doc(record.run_id).create(doc, **self.rpc)
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
        check_size(run_id, encoded)
        ref = self.run_doc(run_id)
        batch = self.db.batch()
        batch.update(ref, encoded)
        for cand in encoded.get("candidates") or []:
            batch.set(ref.collection("candidates").document(str(cand["step"])), cand)
        for att in (encoded.get("chain") or {}).get("attempts", []):
            batch.set(ref.collection("attempts").document(str(att["attempt_id"])), att)
        from google.api_core.exceptions import NotFound

        try:
            with self.guard("update record", run_id):
                batch.commit(**self.rpc)
        except NotFound as exc:  # the same contract as SQLite: updating a missing record is an error
            raise RecordMissing(run_id) from exc

    def add_errors(self, run_id: str, errors: list[RunError]) -> None:
        """Each error once (keyed by step|code|message). One commit per call (per ERROR_BATCH errors): the new error
        documents and ONE update of the run document (counter, codes, inline errors) together. The run document
        is the one every part of a run writes; a write per error (a capture part of 200 vanished objects: 200) made
        it the hottest document of a big run, past Firestore's ~1 write/s sustained per document."""
        from google.api_core.exceptions import AlreadyExists

        ref = self.run_doc(run_id)
        unique = {_error_key(err): err for err in errors}
        keys = list(unique)
        for start in range(0, len(keys), ERROR_BATCH):
            chunk = keys[start : start + ERROR_BATCH]
            for attempt in range(3):  # a concurrent replay created one of them between our read and commit
                try:
                    self._commit_errors(ref, run_id, {k: unique[k] for k in chunk})
                    break
                except AlreadyExists:
                    if attempt == 2:
                        raise

    def _commit_errors(self, ref: Any, run_id: str, errors: dict[str, RunError]) -> None:
        from google.api_core.exceptions import NotFound
        from google.cloud import firestore

        with self.guard("add error", run_id):
            snap = ref.get(field_paths=["error_count"], **self.rpc)
            if not snap.exists:
                raise RecordMissing(run_id)
            existing = self.db.get_all(
                [ref.collection("errors").document(k) for k in errors], field_paths=["code"], **self.rpc
            )
            known = {doc.id for doc in existing if doc.exists}
        new = [(k, err) for k, err in errors.items() if k not in known]
        if not new:
            return  # a replay of the same failures: recorded once
        count = (snap.to_dict() or {}).get("error_count", 0)
        update: dict[str, Any] = {
            "error_count": firestore.Increment(len(new)),
            "error_codes": firestore.ArrayUnion(sorted({err.code for _, err in new})),
            "updated_at": utcnow(),
        }
        inline = [err.model_dump(mode="python") for _, err in new[: max(0, MAX_INLINE_ERRORS - count)]]
        if inline:
            update["errors"] = firestore.ArrayUnion(inline)
        batch = self.db.batch()
        for key, err in new:
            batch.create(ref.collection("errors").document(key), err.model_dump(mode="python"))
        batch.update(ref, update)
        try:
            with self.guard("add error", run_id):
                batch.commit(**self.rpc)
        except NotFound as exc:
            raise RecordMissing(run_id) from exc

    def list_runs(self, limit: int = 100) -> Iterator[CompletionRecord]:
        from google.cloud import firestore

        query = self.db.collection(RUNS).order_by("updated_at", direction=firestore.Query.DESCENDING).limit(limit)
        with self.guard("list runs"):
            snaps = list(query.stream(**self.stream_rpc))
        for snap in snaps:
            yield CompletionRecord.model_validate(_decode(snap.to_dict()))

    def runs_where(
        self, field: IndexedField, value: str, *, ended_before: datetime | None = None, limit: int = 20
    ) -> list[CompletionRecord]:
        """One query on a composite index (`field` ==, ended_at descending; firestore_queries.CONSOLE_QUERIES
        declares it, infra/modules/rlcleanup/firestore.tf creates it)."""
        from google.cloud import firestore
        from google.cloud.firestore_v1.base_query import FieldFilter

        bounded = check_indexed(field, limit)
        if bounded == 0:
            return []
        query = self.db.collection(RUNS).where(filter=FieldFilter(field, "==", value))
        if ended_before is not None:
            query = query.where(filter=FieldFilter(ORDER_FIELD, "<", ended_before))
        query = query.order_by(ORDER_FIELD, direction=firestore.Query.DESCENDING).limit(bounded)
        with self.guard(f"look up runs by {field}"):
            snaps = list(query.stream(**self.stream_rpc))
        return [CompletionRecord.model_validate(_decode(snap.to_dict())) for snap in snaps]

    def record_event(self, run_id: str, event_id: str, outcome: dict[str, Any]) -> bool:
        from google.api_core.exceptions import AlreadyExists

        ref = self.run_doc(run_id).collection("events").document(event_id)
        try:
            with self.guard("record event", run_id):
                ref.create({**plain(outcome), "seen_at": utcnow()}, **self.rpc)
        except AlreadyExists:
            return False
        return True

    # ----------------------------------------------------------- auxiliary documents

    def _doc(self, collection: str, doc_id: str) -> Any:
        return self.db.collection(collection).document(doc_id)

    def put_doc(self, collection: str, doc_id: str, data: dict[str, Any], *, only_if_absent: bool = False) -> bool:
        from google.api_core.exceptions import AlreadyExists

        ref = self._doc(collection, doc_id)
        with self.guard(f"write {collection}/{doc_id}"):
            if only_if_absent:
                try:
                    ref.create(plain(data), **self.rpc)
                except AlreadyExists:
                    return False
                return True
            ref.set(plain(data), **self.rpc)
        return True

    def get_doc(self, collection: str, doc_id: str) -> dict[str, Any] | None:
        with self.guard(f"read {collection}/{doc_id}"):
            snap = self._doc(collection, doc_id).get(**self.rpc)
        return snap.to_dict() if snap.exists else None

    def list_docs(self, collection: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        with self.guard(f"list {collection}"):
            snaps = list(self.db.collection(collection).stream(**self.stream_rpc))
        docs = [(s.id, s.to_dict() or {}) for s in snaps if s.id.startswith(prefix)]
        return sorted(docs)

    # ----------------------------------------------------------- operator maintenance

    def forget_run(self, run_id: str) -> ForgetReport:
        from google.cloud.firestore_v1.base_query import FieldFilter

        ref = self.run_doc(run_id)
        with self.guard("forget", run_id):
            had = ref.get(field_paths=["run_id"], **self.rpc).exists
            removed = int(self.db.recursive_delete(ref))  # the record and everything filed under runs/{id}
            doomed = [self.db.collection(keyed.name).document(run_id) for keyed in RUN_KEYED]
            doomed = [snap.reference for snap in self.db.get_all(doomed, **self.rpc) if snap.exists]
            for named, field in RUN_NAMED:
                query = self.db.collection(named.name).where(filter=FieldFilter(field, "==", run_id))
                doomed += [snap.reference for snap in query.stream(**self.stream_rpc)]
            self._delete_all(doomed)
        return ForgetReport(run_id=run_id, had_record=had, removed=removed + len(doomed))

    def set_aside(self, run_id: str) -> SetAside:
        with self.guard("set aside", run_id):
            rows, refs = self._record_documents(run_id)
            self._delete_all(refs)
        return SetAside(run_id=run_id, backend="firestore", rows=rows)

    def put_back(self, kept: SetAside) -> None:
        if kept.backend != "firestore":
            raise ValueError(f"{kept.run_id}: documents set aside by {kept.backend}, not Firestore")
        ref = self.run_doc(kept.run_id)
        with self.guard("put back", kept.run_id):
            self._delete_all(self._record_documents(kept.run_id)[1])
            writes = [(ref, data) for _, data in kept.rows.get("", [])]
            for name in RECORD_SUBCOLLECTIONS:
                writes += [(ref.collection(name).document(doc_id), data) for doc_id, data in kept.rows.get(name, [])]
            for start in range(0, len(writes), _BATCH_WRITES):
                batch = self.db.batch()
                for doc_ref, data in writes[start : start + _BATCH_WRITES]:
                    batch.set(doc_ref, data)
                batch.commit(**self.rpc)

    def _record_documents(self, run_id: str) -> tuple[dict[str, list[Any]], list[Any]]:
        """The run document and its record subcollections: (id, data) per collection ("" the run document) and
        their references."""
        ref = self.run_doc(run_id)
        snap = ref.get(**self.rpc)
        rows: dict[str, list[Any]] = {"": [(run_id, snap.to_dict())] if snap.exists else []}
        refs = [ref] if snap.exists else []
        for name in RECORD_SUBCOLLECTIONS:
            snaps = list(ref.collection(name).stream(**self.stream_rpc))
            rows[name] = [(s.id, s.to_dict() or {}) for s in snaps]
            refs += [s.reference for s in snaps]
        return rows, refs

    def _delete_all(self, refs: list[Any]) -> None:
        for start in range(0, len(refs), _BATCH_WRITES):
            batch = self.db.batch()
            for ref in refs[start : start + _BATCH_WRITES]:
                batch.delete(ref)
            batch.commit(**self.rpc)


def firestore_stores(
    project: str, client: Any | None = None, timeout: float | None = None
) -> tuple[FirestoreRunRecords, FirestoreIdempotencyStore]:
    """The run-record repository and the idempotency store over one client."""
    records = FirestoreRunRecords(project=project, client=client, timeout=timeout)
    return records, FirestoreIdempotencyStore(records)
