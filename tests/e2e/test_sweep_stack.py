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


def _nudge(stack: StackState, name: str, uid: str) -> None:
    """One cheap delivery to a source function, so its accounting exists whatever ran before: a heartbeat lock's
    notification (dropped by name), a tick (no roots configured), a LogEntry that is not about a Job."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    bucket = stack.buckets["runs"]
    messages = {
        "on-storage-event": (
            "storage-events",
            b"",
            {
                "bucketId": bucket,
                "objectId": f"caps/{uid}/.executor_status.lock",
                "objectGeneration": "1",
                "eventType": "OBJECT_FINALIZE",
                "payloadFormat": "NONE",
            },
        ),
        "sweep": ("sweep", b"{}", {}),
        "on-k8s-log-entry": (
            "k8s-job-events",
            json.dumps(
                {
                    "insertId": uid,
                    "logName": "projects/p/logs/events",
                    "timestamp": "2026-12-01T10:00:00Z",
                    "jsonPayload": {"reason": "Pulled"},
                }
            ).encode(),
            {},
        ),
    }
    topic, data, attributes = messages[name]
    publisher.publish(publisher.topic_path(stack.project, topic), data, **attributes).result(timeout=30)


def _terraform_caps() -> dict[str, tuple[float, float]]:
    """Each function's (timeout s, memory MiB) as Terraform deploys it: infra/topology.auto.tfvars.json, the file
    `google_cloudfunctions2_function` for_eaches over (tests/unit/test_infra.py keeps it equal to topology.yaml)."""
    from rlcleanup.runtime.topology import parse_memory_mib

    tfvars = json.loads((Path(__file__).resolve().parents[2] / "infra" / "topology.auto.tfvars.json").read_text())
    return {
        name: (float(f["timeout_seconds"]), parse_memory_mib(f["memory"]))
        for name, f in tfvars["topology_functions"].items()
    }


def test_source_functions_stay_within_their_caps(stack: StackState, uid: str) -> None:
    """Every invocation of the new source functions in this stack's run (the e2e source tests before this one
    included) against its Terraform caps: wall time (`invocation_seconds`, measured around the handler) under the
    timeout, the process's peak RSS (getrusage ru_maxrss: the whole instance, imports included) under the memory
    limit. A function nothing has invoked yet gets one cheap delivery first, so this holds run alone too."""
    caps = _terraform_caps()
    by_name = {fn.name: fn for fn in served_functions(stack)}
    for name in SOURCE_FUNCTIONS:
        if not invocation_accounting(log_entries(function_log(stack, by_name[name]))):
            _nudge(stack, name, uid)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
        invocation_accounting(log_entries(function_log(stack, by_name[n]))) for n in SOURCE_FUNCTIONS
    ):
        time.sleep(0.5)
    for name in SOURCE_FUNCTIONS:
        lines = invocation_accounting(log_entries(function_log(stack, by_name[name])))
        assert lines, f"{name} logged no invocation accounting"
        timeout, memory = caps[name]
        assert (timeout, memory) == (by_name[name].timeout_seconds, by_name[name].memory_mib)  # what the stack ran
        worst_s = max(line["invocation_seconds"] for line in lines)
        worst_mib = max(line["peak_rss_mib"] for line in lines)
        print(
            f"{name}: {len(lines)} invocations, max {worst_s:.2f} s of {timeout:.0f} s, peak {worst_mib:.0f} of "
            f"{memory:.0f} MiB"
        )
        assert worst_s < timeout and worst_mib < memory, (name, lines)
