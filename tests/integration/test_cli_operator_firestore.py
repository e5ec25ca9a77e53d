"""`status` and `watch` against the Firestore emulator of the local stack (chosen automatically by
FIRESTORE_EMULATOR_HOST): in-flight leases show as running, and watch exits when the record is finished."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.cli.main import app
from rlcleanup.models.record import CompletionRecord
from rlcleanup.stack import StackState

pytestmark = pytest.mark.integration
runner = CliRunner()


def test_status_and_watch_on_firestore(stack: StackState, uid: str) -> None:
    store, claims = firestore_stores(project=stack.project)
    run_id = f"watch-{uid}"
    now = datetime.now(UTC)
    store.create_if_absent(CompletionRecord(run_id=run_id, run_uri=f"gs://runs/{run_id}"))
    claims.claim(run_id, "classify", 60, now)
    claims.complete(run_id, "classify", {"kind": "standard"})
    claims.claim(run_id, "terminal", 600, now)  # a worker holds this lease right now

    result = runner.invoke(app, ["status", run_id, "--json"])
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["run_id"], row["status"]) == (run_id, "in_progress")

    result = runner.invoke(app, ["status", f"watch-{uid[:-1]}", "--json"])
    assert result.exit_code == 1 and f"did you mean {run_id}" in result.stderr

    def finish() -> None:
        time.sleep(1.0)
        claims.complete(run_id, "terminal", {"terminal_state": "completed"})
        store.update(run_id, {"status": "complete", "terminal_state": "completed"})

    worker = threading.Thread(target=finish)
    worker.start()
    result = runner.invoke(app, ["watch", run_id, "--json", "--interval", "0.1", "--timeout", "60"])
    worker.join()
    assert result.exit_code == 0, result.stderr
    snaps = [json.loads(line) for line in result.stdout.splitlines()]
    first = {s["name"]: s for s in snaps[0]["stages"]}
    assert (first["classify"]["done"], first["terminal state"]["running"]) == (1, 1)
    last = {s["name"]: s for s in snaps[-1]["stages"]}
    assert snaps[-1]["finished"] is True and last["terminal state"]["done"] == 1
