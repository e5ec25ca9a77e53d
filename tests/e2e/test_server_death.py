"""A dead function server must not strand runs (issue 36 item 5).

Ten runs are in flight when a function's server is SIGKILLed (its whole process group, as a crash would), at the
moment it takes its first delivery of one of them. Then either
- `immediate`: nobody touches it; the stack's supervisor (stack/supervisor.py) starts a new instance behind the
  same port, as Cloud Run replaces a crashed instance; or
- `late`: it stays down for LATE_SECONDS (held), then is started explicitly (`start_server`), the restart the
  issue reports (`restart_function` 6.5 s after the kill left all 10 runs `in_progress` 13 minutes later).
Every run must finish: a complete record within RECOVERY_SECONDS of the restart, every capture part captured or
settled with its reason, no record error, and no message dead-lettered.

What the base did: with no server on the port the Pub/Sub emulator retried each push at once and counted every
refused connection as a delivery attempt, so within a second or two every message queued for the function reached
`max_delivery_attempts` and was dead-lettered; no outcome was ever stored for those members and their fan-ins
waited for ever. Re-emitting a job event found the run classified and did nothing (the sweep's stall deadline,
2 x 540 s, had not even come). The supervisor holds each function's listening socket across instances, so a push
made while no instance runs waits in the backlog instead of being refused; the deliveries the dead instance had
accepted fail once and are redelivered, and the same message takes its own claim's lease over at once.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import sample_on_gcs, wait_record

from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.stack import StackState, kill_server, start_server
from rlcleanup.stack.emit import job_event, publish_event
from rlcleanup.stack.supervisor import restarts

pytestmark = pytest.mark.e2e
RUNS = 10
LATE_SECONDS = 8.0  # longer than the base's fatal 6.5 s gap
RECOVERY_SECONDS = 180.0  # every record complete within this after the kill (typically ~30-60 s on 2 cores)
# Each function of a run's pipeline, in the order a run reaches them; each is killed once with 10 runs in flight.
PIPELINE = (
    "on-job-event",
    "establish-terminal-state",
    "scan-log-part",
    "plan-capture",
    "capture-part",
    "validate-candidate",
    "select-candidate",
)
CASES = [(fn, "immediate") for fn in PIPELINE] + [("capture-part", "late"), ("plan-capture", "late")]


def _upload_runs(stack: StackState, gcs_client: Any, tmp: Path, tag: str) -> list[tuple[str, str]]:
    def one(i: int) -> tuple[str, str]:
        where = tmp / f"run-{i}"
        where.mkdir()
        return sample_on_gcs(stack, gcs_client, where, "completed-resumed", f"{tag}-{i}")

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, range(RUNS)))


def _wait_first_delivery(log: Path, offset: int, tag: str, timeout: float = 120.0) -> None:
    """Until the function's log names one of this test's runs after `offset`: it holds a delivery of ours."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log, "rb") as f:
            f.seek(offset)
            if tag.encode() in f.read():
                return
        time.sleep(0.01)
    raise AssertionError(f"{log.name} never took a delivery of {tag} within {timeout} s")


def _dead_letters(stack: StackState, function: str) -> list[Any]:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    try:
        sub = subscriber.subscription_path(stack.project, f"{function}-dlq-sub")
        resp = subscriber.pull(request={"subscription": sub, "max_messages": 100}, timeout=10)
        if resp.received_messages:
            subscriber.acknowledge(request={"subscription": sub, "ack_ids": [m.ack_id for m in resp.received_messages]})
        return [m.message for m in resp.received_messages]
    finally:
        subscriber.close()


@pytest.mark.parametrize(("function", "restart"), CASES, ids=[f"{f}-{r}" for f, r in CASES])
def test_killed_function_server_strands_no_run(
    stack: StackState, gcs_client: Any, tmp_path: Path, uid: str, function: str, restart: str
) -> None:
    tag = f"k9{uid}"
    name = f"fn-{function}"
    state_dir = Path(stack.state_dir)
    runs = _upload_runs(stack, gcs_client, tmp_path, tag)
    log = state_dir / f"{name}.log"
    offset = log.stat().st_size
    restarted_before = restarts(state_dir, name)
    for run_uri, _ in runs:
        publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    _wait_first_delivery(log, offset, tag)
    killed_at = time.monotonic()
    try:
        kill_server(stack, name, hold=restart == "late")
        if restart == "late":
            time.sleep(LATE_SECONDS)
    finally:
        if restart == "late":
            start_server(stack, name)
    if restart == "immediate":  # the supervisor starts it again by itself, within its poll and a start-up
        deadline = time.monotonic() + 30
        while restarts(state_dir, name) == restarted_before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert restarts(state_dir, name) == restarted_before + 1, f"{name} was not restarted"

    _, claims = firestore_stores(project=stack.project)
    for _, run_id in runs:
        left = RECOVERY_SECONDS - (time.monotonic() - killed_at)
        record = wait_record(stack.project, run_id, timeout=max(left, 1.0))
        assert record.status.value == "awaiting_authority", (run_id, record.errors)
        assert record.terminal_state is not None and record.terminal_state.value == "completed"
        assert record.errors == [], (run_id, record.errors)
        assert len(record.candidates) == 4
        plan = claims.result(run_id, "capture-plan")
        assert plan is not None and plan["parts"]
        for part in plan["parts"]:  # each part captured, or settled with the reason on its outcome
            outcome = claims.result(run_id, f"capture-part:{part}")
            assert outcome is not None, (run_id, part)
            assert outcome["ok"] or outcome.get("error"), (run_id, part, outcome)
    mine = [m for fn in PIPELINE for m in _dead_letters(stack, fn) if tag.encode() in m.data]
    assert mine == [], [(m.data[:120], dict(m.attributes)) for m in mine]
