"""The sweep on the real stack: a run on GCS whose event was never sent is found by a Cloud Scheduler-style tick
(listing pages through fake-gcs-server, records in the Firestore emulator) and finished; the new source functions
stay within their timeout and memory caps."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from e2e_helpers import function_log, invocation_accounting, log_entries, sample_on_gcs, served_functions, wait_record

from rlcleanup.stack import StackState, restart_function

pytestmark = pytest.mark.e2e
SOURCE_FUNCTIONS = ("on-storage-event", "sweep", "on-k8s-log-entry")


def test_sweep_tick_finds_a_run_whose_event_was_never_sent(
    stack: StackState, gcs_client, tmp_path: Path, uid: str
) -> None:  # type: ignore[no-untyped-def]
    from google.cloud import pubsub_v1

    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", uid)
    root = run_uri.rsplit("/", 2)[0]  # gs://<runs>/e2e/<uid>/durable: runs at <name>/<version> below it
    # The sweep reads its roots at cold start (settings), as a deployment does: restart it configured.
    restart_function(stack, "sweep", extra_env={"RLCLEANUP_SWEEP_ROOTS": json.dumps([{"uri": root, "depth": 2}])})
    publisher = pubsub_v1.PublisherClient()
    started = time.monotonic()
    publisher.publish(publisher.topic_path(stack.project, "sweep"), b'{"kind": "tick"}').result(timeout=30)
    record = wait_record(stack.project, run_id, timeout=150)
    print(f"tick → finished record: {time.monotonic() - started:.1f} s")
    assert record.status.value in ("awaiting_authority", "complete")
    assert record.terminal_state is not None and record.terminal_state.value == "completed"


def test_source_functions_stay_within_their_caps(stack: StackState) -> None:
    """Runs after the source tests in this directory (on-storage-event, sweep, on-k8s-log-entry were invoked)."""
    checked = 0
    for fn in served_functions(stack):
        if fn.name not in SOURCE_FUNCTIONS:
            continue
        for line in invocation_accounting(log_entries(function_log(stack, fn))):
            checked += 1
            assert line["invocation_seconds"] < fn.timeout_seconds, (fn.name, line)
            assert line["peak_rss_mib"] < fn.memory_mib, (fn.name, line)
    assert checked > 0, "no accounting lines from the source functions: run with the other source tests"
