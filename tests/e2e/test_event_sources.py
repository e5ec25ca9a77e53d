"""Push sources on the real stack: SkyPilot's event_callback line from docs/events.md run by bash with the
environment SkyPilot gives it, `rlcleanup emit -` with a JSON event on stdin, and a GKE LogEntry (as a Cloud
Logging sink publishes it) on the k8s-job-events topic, each ending in a finished record."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from e2e_helpers import sample_on_gcs, wait_record

from rlcleanup.stack import StackState

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def _callback_line() -> str:
    text = (REPO / "docs" / "events.md").read_text()
    block = re.search(r"<!-- skypilot-callback -->\n```bash\n(.+?)\n```", text, re.S)
    assert block, "docs/events.md lost its skypilot-callback block"
    return block.group(1)


def _cli_env(stack: StackState) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # where the rlcleanup console script is
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), **stack.env}


def test_skypilot_event_callback_line(stack: StackState, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "failed-first-link", uid)
    callback = _callback_line()
    # What sky/jobs/utils.py event_callback_func passes: the task's envs plus these (EVENT_TYPE is 'Spot').
    env = {
        **_cli_env(stack),
        "RLCLEANUP_RUN_URI": run_uri,
        "SKYPILOT_TASK_ID": f"sky-managed-2026-12-01-10-00-00-000000_math-rl_{uid}",
        "TASK_ID": "0",
        "JOB_ID": "42",
        "CLUSTER_NAME": f"math-rl-42-{uid}",
        "TASK_NAME": "math-rl",
        "EVENT_TYPE": "Spot",
    }
    for status in ("STARTING", "RUNNING", "FAILED_SETUP"):  # the callback fires at every status change
        done = subprocess.run(
            ["bash", "-c", callback], env={**env, "JOB_STATUS": status}, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip(), "emit prints the message id"
    record = wait_record(stack.project, run_id)
    assert record.controller_state and "FAILED_SETUP" in record.controller_state
    assert record.terminal_state is not None and record.terminal_state.value == "failed"


def test_emit_reads_a_json_event_from_stdin(stack: StackState, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", uid)
    rlcleanup = shutil.which("rlcleanup", path=str(Path(sys.executable).parent))
    assert rlcleanup
    event = {
        "source": "ray",
        "job_id": f"raysubmit_{uid}",
        "run_uri": run_uri,
        "state": "SUCCEEDED",
        "observed_at": datetime.now(UTC).isoformat(),
        "attempt_id": "0123456789ab",
        "exit_code": 0,
    }
    done = subprocess.run(
        [rlcleanup, "emit", "-"], input=json.dumps(event), env=_cli_env(stack), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    bad = subprocess.run(
        [rlcleanup, "emit", "-"], input='{"source": "nomad"}', env=_cli_env(stack), capture_output=True, text=True
    )
    assert bad.returncode == 2 and "invalid event" in bad.stderr
    record = wait_record(stack.project, run_id)
    assert record.controller_state and "SUCCEEDED" in record.controller_state


def test_gke_log_entry_through_the_sink_topic(stack: StackState, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    from google.cloud import pubsub_v1

    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "failed-first-link", uid)
    entry = {
        "insertId": f"audit-{uid}",
        "logName": "projects/ml-prod/logs/cloudaudit.googleapis.com%2Factivity",
        "resource": {
            "type": "k8s_cluster",
            "labels": {"project_id": "ml-prod", "location": "us-central1", "cluster_name": "train-1"},
        },
        "timestamp": datetime.now(UTC).isoformat(),
        "protoPayload": {
            "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
            "methodName": "io.k8s.batch.v1.jobs.status.update",
            "resourceName": f"batch/v1/namespaces/rl/jobs/math-{uid}/status",
            "response": {
                "kind": "Job",
                "apiVersion": "batch/v1",
                "metadata": {
                    "name": f"math-{uid}",
                    "namespace": "rl",
                    "uid": f"uid-{uid}",
                    "annotations": {"rlcleanup.dev/run-uri": run_uri},
                },
                "status": {
                    "conditions": [
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit",
                        }
                    ]
                },
            },
        },
    }
    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(stack.project, "k8s-job-events")
    # A sink publishes the LogEntry JSON as the message data, with logging.googleapis.com/timestamp attributes.
    publisher.publish(
        topic, json.dumps(entry).encode(), **{"logging.googleapis.com/timestamp": entry["timestamp"]}
    ).result(timeout=30)
    record = wait_record(stack.project, run_id)
    assert record.controller_state and "Failed" in record.controller_state
    assert record.terminal_state is not None and record.terminal_state.value == "failed"
