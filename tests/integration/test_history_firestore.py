"""Learning across runs on Firestore (the emulator): the sample history's lookups through FirestoreRunRecords'
indexed query give what SQLite gives (tests/unit/test_history.py holds the full checks there)."""

from __future__ import annotations

from typing import Any

import pytest

from rlcleanup.adapters.firestore_queries import CONSOLE_QUERIES
from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.models.failures import ConfigChange
from rlcleanup.samples.history import write_history
from rlcleanup.stack import StackState
from rlcleanup.steps.history import similar_runs

pytestmark = pytest.mark.integration


def test_similar_runs_and_their_fix_on_firestore(stack: StackState, firestore_client: Any) -> None:
    records, _ = firestore_stores(project=stack.project)
    history = write_history(records)
    current = records.get(history.current)
    assert current is not None and current.signature is not None
    found = similar_runs(records, current)
    # Before and after this run (issue 44 item 7): the run that failed the same way later is listed, as after.
    assert [(s.run_id, s.came) for s in found] == [
        (history.later_same, "after"),
        *((run_id, "before") for run_id in history.oom_earlier),
    ]
    assert found[1].fix is None
    fix = found[2].fix
    assert fix is not None and fix.completed_run_id == history.fixed_by
    assert fix.changes == [ConfigChange(key="trainer.micro_train_batch_size_per_gpu", before="8", after="4")]
    # The console's "every infrastructure failure" query finds the NCCL run, with the plain client.
    (infra,) = [q for q in CONSOLE_QUERIES if q.field == "failure_class"]
    ids = {snap.id for snap in infra.query(firestore_client, limit=500).stream()}
    assert history.other_failure in ids and history.current not in ids
