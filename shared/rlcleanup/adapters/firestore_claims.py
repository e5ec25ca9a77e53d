"""The idempotency store on Firestore: claims at runs/{run_id}/steps/{key}, and the database-epoch check.

rlcleanup_meta/database holds this database's epoch: a fresh id when it was (re)created empty. A database that
comes back *empty* (an emulator restarted without persistence) is noticed by its epoch changing under a claim:
RecordStoreLost (permanent, recorded on the run, says to re-emit its terminal event).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from datetime import datetime
from typing import Any

from rlcleanup.adapters.firestore_client import FirestoreConnection, check_size, plain
from rlcleanup.context import current_context
from rlcleanup.errors import RecordStoreLost
from rlcleanup.models.claims import PRE_CANCEL
from rlcleanup.models.record import utcnow
from rlcleanup.ports.records import DONE, IdempotencyStore, StepDoc

log = logging.getLogger(__name__)
META_COLLECTION = "rlcleanup_meta"
META_DOC = "database"
RUN_START_KEYS = ("classify", PRE_CANCEL)  # claims that begin work on a run: nothing before them to lose
_KEY_RANGE_END = "\uf8ff"  # keys starting with a prefix sort in [prefix, prefix + U+F8FF)


class FirestoreIdempotencyStore(IdempotencyStore):
    """Claim primitives on runs/{run_id}/steps/{key} (versions are the documents' update times), plus the
    database-epoch check every claim makes first. Shares the run records' client, deadlines and error mapping."""

    def __init__(self, records: FirestoreConnection) -> None:
        self.records = records
        self._epoch: str | None = None  # the database epoch this store has seen (None: not looked yet)
        self._epoch_created_at: datetime | None = None  # when the database we see now was created (empty)
        self._lost_since: datetime | None = None  # set once this store saw the database come back empty
        self._epoch_lock = threading.Lock()

    # ----------------------------------------------------------- database epoch (data-loss detection)

    def check_epoch(self, run_id: str, key: str) -> None:
        """Raise RecordStoreLost when the database was recreated empty since this store first looked (a fresh
        database gets a new epoch document) and this claim continues a run whose record is gone. Claims that
        start a run (RUN_START_KEYS) and runs recreated since (a re-emitted event) carry on as usual."""
        from google.api_core.exceptions import AlreadyExists

        ref = self.records.db.collection(META_COLLECTION).document(META_DOC)
        with self.records.guard("check database epoch", run_id):
            snap = ref.get(**self.records.rpc)
            data = snap.to_dict() if snap.exists else None
            if data is None:
                with contextlib.suppress(AlreadyExists):  # another worker created it first: use theirs
                    ref.create({"epoch": uuid.uuid4().hex, "created_at": utcnow()}, **self.records.rpc)
                data = ref.get(**self.records.rpc).to_dict() or {}
        epoch = str(data.get("epoch"))
        created = data.get("created_at") if isinstance(data.get("created_at"), datetime) else None
        with self._epoch_lock:
            if epoch != self._epoch:
                if self._epoch is not None:
                    # Everything written before the new database's creation is gone: that is when it was reset,
                    # not when this worker first looked (which may be long after).
                    self._lost_since = created or utcnow()
                self._epoch, self._epoch_created_at = epoch, created
            lost_since = self._lost_since
        if lost_since is None or key.startswith(RUN_START_KEYS):
            return
        with self.records.guard("check database epoch", run_id):
            if self.records.run_doc(run_id).get(field_paths=["run_id"], **self.records.rpc).exists:
                return
        lost = RecordStoreLost(run_id, current_context().step, lost_since.isoformat(timespec="seconds"))
        log.error("%s", lost, extra={"run_id": run_id, "error": {"type": "RecordStoreLost", "claim": key}})
        raise lost

    def database_created_at(self) -> datetime | None:
        """When the database this store reads was (re)created empty: its epoch document's creation."""
        if self._epoch is None:
            self.check_epoch("", "classify")  # a run-start key: only reads (or creates) the epoch document
        return self._epoch_created_at

    def _before_claim(self, run_id: str, key: str) -> None:
        self.check_epoch(run_id, key)

    # ----------------------------------------------------------- claim primitives

    def _step(self, run_id: str, key: str) -> Any:
        return self.records.run_doc(run_id).collection("steps").document(key.replace("/", "|"))

    def _fields(self, run_id: str, key: str, doc: StepDoc) -> dict[str, Any]:
        fields = {
            "key": key,
            "state": doc.state,
            "lease_until": doc.lease_until,
            "owner": doc.owner,
            "result": plain(doc.result) if doc.result is not None else None,
            "updated_at": utcnow(),
        }
        check_size(run_id, fields)
        return fields

    def _create(self, run_id: str, key: str, doc: StepDoc) -> bool:
        from google.api_core.exceptions import AlreadyExists

        fields = self._fields(run_id, key, doc)
        try:
            with self.records.guard(f"claim {key}", run_id):
                self._step(run_id, key).create(fields, **self.records.rpc)
        except AlreadyExists:
            return False
        return True

    def _get(self, run_id: str, key: str) -> tuple[StepDoc, Any] | None:
        with self.records.guard(f"read claim {key}", run_id):
            snap = self._step(run_id, key).get(**self.records.rpc)
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
            with self.records.guard(f"update claim {key}", run_id):
                self._step(run_id, key).update(fields, option=option, **self.records.rpc)
        except (FailedPrecondition, NotFound):
            return False
        return True

    def _delete(self, run_id: str, key: str, version: Any) -> bool:
        from google.api_core.exceptions import FailedPrecondition, NotFound

        option = self.records.db.write_option(last_update_time=version)
        try:
            with self.records.guard(f"release {key}", run_id):
                self._step(run_id, key).delete(option=option, **self.records.rpc)
        except (FailedPrecondition, NotFound):
            return False
        return True

    def claims_of(self, run_id: str) -> dict[str, StepDoc]:
        with self.records.guard("read claims", run_id):
            snaps = list(self.records.run_doc(run_id).collection("steps").stream(**self.records.stream_rpc))
        out: dict[str, StepDoc] = {}
        for snap in snaps:
            data = snap.to_dict() or {}
            out[str(data.get("key", snap.id))] = StepDoc(
                state=str(data.get("state")),
                lease_until=data.get("lease_until"),
                owner=data.get("owner"),
                result=data.get("result"),
            )
        return dict(sorted(out.items()))

    def forget_claims(self, run_id: str) -> int:
        with self.records.guard("forget claims", run_id):
            refs = [snap.reference for snap in self.records.run_doc(run_id).collection("steps").stream()]
            for start in range(0, len(refs), 500):  # Firestore's batch limit
                batch = self.records.db.batch()
                for ref in refs[start : start + 500]:
                    batch.delete(ref)
                batch.commit(**self.records.rpc)
        return len(refs)

    def _done_query(self, run_id: str, prefix: str) -> Any:
        """Done claims whose key starts with prefix, filtered server side (state == done and a key range; the
        composite index `steps_done_by_key` in infra/modules/rlcleanup/firestore.tf serves it)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self.records.run_doc(run_id).collection("steps").where(filter=FieldFilter("state", "==", DONE))
        if prefix:
            query = query.where(filter=FieldFilter("key", ">=", prefix))
            query = query.where(filter=FieldFilter("key", "<", prefix + _KEY_RANGE_END))
        return query

    def _done_results(self, run_id: str, prefix: str) -> dict[str, dict[str, Any]]:
        with self.records.guard(f"read results {prefix}*", run_id):
            snaps = list(self._done_query(run_id, prefix).stream(**self.records.stream_rpc))
        out: dict[str, dict[str, Any]] = {}
        for snap in snaps:
            data = snap.to_dict() or {}
            key = data.get("key", snap.id)
            if key.startswith(prefix):
                out[key] = data.get("result") or {}
        return out

    def _done_count(self, run_id: str, prefix: str) -> int:
        with self.records.guard(f"count results {prefix}*", run_id):
            rows = self._done_query(run_id, prefix).count(alias="n").get(**self.records.rpc)
        return int(sum(result.value for row in rows for result in row))
