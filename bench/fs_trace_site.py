"""Copied by bench/bench_load.py as `sitecustomize.py` onto the function servers' PYTHONPATH: traces Firestore.

Every document write staged through the client (DocumentReference.create/set/update/delete go through a
WriteBatch; transactions are WriteBatches too) and every claim-store outcome (a claim won, a step's result
written) is appended as one JSON line to $BENCH_FS_TRACE/<pid>.jsonl. Nothing of the pipeline changes; the
bench reads the lines after the burst: writes per document path (the hottest document), claim winners and
outcomes per (run, step) (a step executed twice shows as a second winner or a second outcome).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

_DIR = os.environ.get("BENCH_FS_TRACE")


def _emit(entry: dict[str, Any]) -> None:
    line = json.dumps({"t": time.time(), **entry}, default=str) + "\n"
    fd = os.open(os.path.join(str(_DIR), f"{os.getpid()}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one small O_APPEND write: lines from threads never interleave
    finally:
        os.close(fd)


def _install() -> None:
    from google.cloud.firestore_v1.base_batch import BaseWriteBatch

    from rlcleanup.adapters import firestore_claims
    from rlcleanup.ports.records import StepDoc

    def traced(op: str) -> Any:
        inner = getattr(BaseWriteBatch, op)

        def wrapper(self: Any, reference: Any, *args: Any, **kwargs: Any) -> Any:
            _emit({"op": op, "path": reference.path})
            return inner(self, reference, *args, **kwargs)

        return wrapper

    for op in ("create", "set", "update", "delete"):
        setattr(BaseWriteBatch, op, traced(op))

    store = firestore_claims.FirestoreIdempotencyStore
    create, cas = store._create, store._compare_and_set

    def claim_create(self: Any, run_id: str, key: str, doc: StepDoc) -> bool:
        won = create(self, run_id, key, doc)
        if won:
            _emit({"claim": doc.state, "run": run_id, "key": key, "how": "create", "owner": doc.owner})
        return won

    def claim_cas(self: Any, run_id: str, key: str, version: Any, doc: StepDoc) -> bool:
        won = cas(self, run_id, key, version, doc)
        if won:
            _emit({"claim": doc.state, "run": run_id, "key": key, "how": "update", "owner": doc.owner})
        return won

    store._create = claim_create  # type: ignore[method-assign]
    store._compare_and_set = claim_cas  # type: ignore[method-assign]


if _DIR:
    _install()
