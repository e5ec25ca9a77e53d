"""A dead function server must not strand runs (issue 36 item 5).

Six runs are put in flight at once (the issue's batch was ten; six keep runs on both sides of every kill at a
little over half the time, and each kill still asserts a run was unfinished); then each function of their
pipeline, in the order the runs reach it, is SIGKILLed once (its whole process group, as a crash would) at the moment it takes its first delivery of one of
them, while the others are still on their way (one batch, one stack: the suite's time). Then either
- immediate: nobody touches it; the stack's supervisor (stack/supervisor.py) starts a new instance behind the
  same port, as Cloud Run replaces a crashed instance (every function but LATE); or
- late (LATE): it stays down for LATE_SECONDS (held), then is started explicitly (`start_server`), the restart
  the issue reports (`restart_function` 6.5 s after the kill left all 10 runs `in_progress` 13 minutes later).
Every run must finish: a complete record within RECOVERY_SECONDS of the first kill, every capture part captured
or settled with its reason, no record error, and no message of these runs dead-lettered.

What the base did (reproduced: 10 runs, capture-part killed on its first delivery and restarted on its port 6.5 s
later; 60 s on, 0-2 of each run's 4 capture parts done and nothing dead-lettered yet): with no server on the port
the Pub/Sub emulator refuses each push, counts it as a delivery attempt and backs the message off exponentially
(10 s doubling to the 600 s maximum), so the parts queued for the dead function came back only minutes later, one
long backoff at a time, or were dead-lettered after `max_delivery_attempts` with no outcome stored, and their
fan-ins waited. The supervisor holds each function's listening socket across instances, so a push made while no
instance runs waits in the socket's backlog instead of being refused; only the deliveries the dead instance had
accepted fail (once) and are redelivered, and the same message takes its own claim's lease over at once.
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
RUNS = 6
LATE_SECONDS = 8.0  # longer than the fatal 6.5 s gap
RECOVERY_SECONDS = 240.0  # every record complete within this after the first kill (~60-120 s on 2 busy cores)
# Each function of a run's pipeline, in the order a run reaches them.
PIPELINE = (
    "on-job-event",
    "establish-terminal-state",
    "scan-log-part",
    "plan-capture",
    "capture-part",
    "validate-candidate",
    "select-candidate",
)
# Killed and left down for LATE_SECONDS, then started explicitly: the planner and the member whose parts the issue
# saw stranded. Every other function is restarted by the supervisor alone.
LATE = frozenset({"plan-capture", "capture-part"})


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


def _dead_letters(stack: StackState, function: str, tag: str) -> list[Any]:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    try:
        sub = subscriber.subscription_path(stack.project, f"{function}-dlq-sub")
        resp = subscriber.pull(request={"subscription": sub, "max_messages": 1000}, timeout=10)
        mine = [m for m in resp.received_messages if tag.encode() in m.message.data]
        if mine:
            subscriber.acknowledge(request={"subscription": sub, "ack_ids": [m.ack_id for m in mine]})
        return [m.message for m in mine]
    finally:
        subscriber.close()


def test_each_function_killed_once_with_runs_in_flight_strands_no_run(
    stack: StackState, gcs_client: Any, tmp_path: Path, uid: str
) -> None:
    tag = f"k9{uid}"
    state_dir = Path(stack.state_dir)
    runs = _upload_runs(stack, gcs_client, tmp_path, tag)
    logs = {fn: state_dir / f"fn-{fn}.log" for fn in PIPELINE}
    offsets = {fn: log.stat().st_size for fn, log in logs.items()}
    store, claims = firestore_stores(project=stack.project)
    for run_uri, _ in runs:
        publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    first_kill = None
    for fn in PIPELINE:
        name, late = f"fn-{fn}", fn in LATE
        restarted_before = restarts(state_dir, name)
        _wait_first_delivery(logs[fn], offsets[fn], tag)
        first_kill = first_kill or time.monotonic()
        try:
            kill_server(stack, name, hold=late)
            unfinished = [rid for _, rid in runs if (r := store.get(rid)) is None or r.status.value == "in_progress"]
            assert unfinished, f"every run had finished before {name} was killed: not mid-run"
            if late:
                time.sleep(LATE_SECONDS)
        finally:
            if late:
                start_server(stack, name)
        if not late:  # the supervisor starts it again by itself, within its poll and a start-up
            deadline = time.monotonic() + 30
            while restarts(state_dir, name) == restarted_before and time.monotonic() < deadline:
                time.sleep(0.05)
            assert restarts(state_dir, name) == restarted_before + 1, f"{name} was not restarted"

    assert first_kill is not None
    for _, run_id in runs:
        left = RECOVERY_SECONDS - (time.monotonic() - first_kill)
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
    lost = [m for fn in PIPELINE for m in _dead_letters(stack, fn, tag)]
    assert lost == [], [(m.data[:120], dict(m.attributes)) for m in lost]
