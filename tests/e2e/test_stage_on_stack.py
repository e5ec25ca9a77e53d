"""The safety-eval stage of tests/unit/safety_eval_stage.py (topology.yaml entries, one stage table row, its handler:
nothing else) on the emulator stack: `stack up --stages safety_eval_stage:TABLE` provisions its topology (the new
topic, its push subscription and dead-letter topic) and serves its table in functions-framework processes, and one
run goes through it between validation and selection. Its own stack (the session's serves the packaged table)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import function_log, sample_on_gcs, wait_record

from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.stack import StackState, down, up
from rlcleanup.stack.emit import job_event, publish_event
from rlcleanup.stack.provision import client_env

UNIT_TESTS = str(Path(__file__).resolve().parents[1] / "unit")  # where safety_eval_stage.py lives
STAGES = "safety_eval_stage:TABLE"


@pytest.fixture(scope="module")
def safety_stack(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[StackState]:
    monkeypatch_module.syspath_prepend(UNIT_TESTS)  # `up` imports the table to provision its topology ...
    paths = [UNIT_TESTS, os.environ.get("PYTHONPATH", "")]  # ... and the function processes import it to serve it
    monkeypatch_module.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    state_dir = Path(tempfile.mkdtemp(prefix="rlcleanup-stages-"))
    started = time.monotonic()
    state = up(state_dir, project="rlcleanup-stages", timeout=120, stages=STAGES)
    print(f"stack with --stages up in {time.monotonic() - started:.1f} s")
    try:
        with client_env(state.env):
            yield state
    finally:
        down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_the_stack_runs_a_stage_added_through_the_table_alone(safety_stack: StackState, tmp_path: Path) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    assert safety_stack.stages == STAGES and "safety-eval" in safety_stack.functions  # served as its own function
    gcs = storage.Client(project=safety_stack.project, credentials=AnonymousCredentials())
    run_uri, run_id = sample_on_gcs(safety_stack, gcs, tmp_path, "completed-resumed", "stages")
    publish_event(job_event(run_uri, "SUCCEEDED"), safety_stack.project)
    record = wait_record(safety_stack.project, run_id)
    assert record.status.value == "awaiting_authority", record.errors
    _, claims = firestore_stores(project=safety_stack.project)
    evaluated = claims.result(run_id, "safety-eval")
    assert evaluated == {"run_uri": run_uri}  # the stage ran, once, on this run, before selection finished it
    assert claims.result(run_id, "select") is not None
    log = function_log(safety_stack, _spec(safety_stack, "safety-eval")).read_text(errors="replace")
    assert "safety_eval: safety eval done" in log


def _spec(stack: StackState, name: str):  # type: ignore[no-untyped-def]
    from rlcleanup.stack.served_table import served_topology

    return served_topology(stack.stages).function(name)
