"""The whole event-driven flow on the real stack: a sample run on the GCS emulator, a job event on `job-events`,
functions-framework functions chained by Pub/Sub push, the completion record in Firestore."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import FaultProxy, sample_on_gcs, wait_log, wait_record
from google.cloud.firestore_v1.base_query import FieldFilter

from rlcleanup.stack import StackState
from rlcleanup.stack.emit import job_event, publish_event

pytestmark = pytest.mark.e2e


def _manifest(gcs_client: Any, uri: str) -> dict[str, Any]:
    bucket, _, key = uri.removeprefix("gs://").partition("/")
    data: dict[str, Any] = json.loads(gcs_client.bucket(bucket).blob(key).download_as_bytes())
    return data


def _codes(problems: list[str]) -> list[str]:
    return [p.split(":", 1)[0] for p in problems]


def _steps(firestore_client: Any, run_id: str) -> dict[str, dict[str, Any]]:
    ref = firestore_client.collection("runs").document(run_id).collection("steps")
    return {snap.id: snap.to_dict() for snap in ref.stream()}


def _assert_captured(gcs_client: Any, record: Any, stack: StackState) -> None:
    assert record.manifest_uri and record.manifest_uri.startswith(f"gs://{stack.buckets['preserve']}/")
    manifest = _manifest(gcs_client, record.manifest_uri)
    assert manifest["captured_object_count"] == record.preserved_object_count > 20
    listed = {o["destination"] for o in manifest["objects"]}
    assert any(d.endswith("/terminal.json") for d in listed)
    for obj in manifest["objects"][:10]:  # what the manifest lists really is in GCS
        bucket, _, key = obj["destination"].removeprefix("gs://").partition("/")
        assert gcs_client.bucket(bucket).get_blob(key) is not None, obj["destination"]


def test_completed_resumed(stack: StackState, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", uid)
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    record = wait_record(stack.project, run_id)
    assert record.status.value == "awaiting_authority", record.errors
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    assert record.first_failure_cause is None
    assert (record.step_budget, record.last_trained_step, record.last_saved_step) == (20, 20, 20)
    assert [a.state for a in record.chain.attempts] == ["failed", "succeeded"]
    assert [(c.step, c.valid, c.problems) for c in record.candidates] == [(s, True, []) for s in (5, 10, 15, 20)]
    assert record.selection is not None and record.selection.status == "unresolved"
    assert record.selection.candidates_considered == [5, 10, 15, 20]
    assert record.resume_safety is not None and record.resume_safety.safe
    assert record.errors == []
    _assert_captured(gcs_client, record, stack)


def test_failed_first_link(stack: StackState, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "failed-first-link", uid)
    publish_event(job_event(run_uri, "FAILED"), stack.project)
    record = wait_record(stack.project, run_id)
    assert record.terminal_state is not None and record.terminal_state.value == "failed"
    cause = record.first_failure_cause
    assert cause is not None
    assert cause.error_type == "torch.OutOfMemoryError" and cause.line == 13
    assert cause.source_uri.startswith(f"gs://{stack.buckets['runs']}/") and cause.source_uri.endswith(".err")
    assert [(c.step, c.valid) for c in record.candidates] == [(5, True)]
    assert record.selection is not None and record.selection.candidates_considered == [5]
    assert any("diagnose the first causal error" in w for w in record.remaining_work)
    _assert_captured(gcs_client, record, stack)


def test_missing_shard(stack: StackState, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "missing-shard", uid)
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    record = wait_record(stack.project, run_id)
    assert record.status.value == "awaiting_authority"
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    by_step = {c.step: c for c in record.candidates}
    assert sorted(by_step) == [5, 10, 15, 20]
    assert not by_step[10].valid and _codes(by_step[10].problems) == ["missing_shard"]
    assert all(by_step[s].valid for s in (5, 15, 20))
    assert record.selection is not None and record.selection.candidates_considered == [5, 15, 20]
    _assert_captured(gcs_client, record, stack)


def test_agentic_is_routed(stack: StackState, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    from google.cloud import pubsub_v1

    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "agentic", uid)
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    record = wait_record(stack.project, run_id)
    assert record.status.value == "routed"
    assert record.classification is not None and record.classification.kind.value == "agentic"
    assert record.candidates == [] and record.manifest_uri is None  # nothing of the standard path ran
    subscriber = pubsub_v1.SubscriberClient()
    sub = subscriber.subscription_path(stack.project, "agentic-runs-sub")
    found = None
    deadline = time.monotonic() + 30
    while found is None and time.monotonic() < deadline:
        resp = subscriber.pull(request={"subscription": sub, "max_messages": 50}, timeout=10)
        for received in resp.received_messages:
            payload = json.loads(received.message.data)
            if payload.get("run_id") == run_id:
                found = payload
        if resp.received_messages:
            subscriber.acknowledge(request={"subscription": sub, "ack_ids": [m.ack_id for m in resp.received_messages]})
    subscriber.close()
    assert found is not None and found["run_uri"] == run_uri


def test_duplicate_delivery_gives_one_record(
    stack: StackState, gcs_client, firestore_client, tmp_path: Path, uid: str
) -> None:  # type: ignore[no-untyped-def]
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", uid)
    event = job_event(run_uri, "SUCCEEDED")
    for _ in range(3):  # three publishes: three message ids, one domain identity
        publish_event(event, stack.project)
    record = wait_record(stack.project, run_id)
    assert record.status.value == "awaiting_authority"
    log = Path(stack.state_dir, "fn-on-job-event.log")
    # The two duplicates are acked as duplicates (possibly after a 500 while the first held the claim).
    text = wait_log(log, f"duplicate: {run_id} already classified", 2)
    assert text.count(f"classified {run_id}: standard") == 1  # the classify work ran once
    runs = [
        s.id for s in firestore_client.collection("runs").where(filter=FieldFilter("run_uri", "==", run_uri)).stream()
    ]
    assert runs == [run_id]
    ledger = list(firestore_client.collection("runs").document(run_id).collection("events").stream())
    assert [e.id for e in ledger] == [event.event_key]
    steps = _steps(firestore_client, run_id)
    assert steps["classify"]["state"] == "done" and steps["select"]["state"] == "done"
    final = wait_record(stack.project, run_id)
    assert final.model_dump(exclude={"updated_at"}) == record.model_dump(exclude={"updated_at"})  # not redone
    assert len(final.candidates) == 4


def test_function_failing_twice_still_completes_once(
    stack: StackState, gcs_client, firestore_client, tmp_path: Path, uid: str
) -> None:  # type: ignore[no-untyped-def]
    from google.cloud import pubsub_v1

    fn = "establish-terminal-state"
    subscriber = pubsub_v1.SubscriberClient()
    sub = subscriber.subscription_path(stack.project, f"{fn}-push")
    topic_path = f"/projects/{stack.project}/topics/run-classified"
    with FaultProxy(stack.functions[fn], failures=2) as proxy:
        subscriber.modify_push_config(
            request={"subscription": sub, "push_config": {"push_endpoint": proxy.url + topic_path}}
        )
        try:
            run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", uid)
            publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
            record = wait_record(stack.project, run_id, timeout=180)
        finally:
            subscriber.modify_push_config(
                request={"subscription": sub, "push_config": {"push_endpoint": stack.functions[fn] + topic_path}}
            )
            subscriber.close()
    assert proxy.statuses[:3] == [500, 500, 200]
    assert record.status.value == "awaiting_authority" and record.terminal_state is not None
    assert record.terminal_state.value == "completed" and len(record.candidates) == 4
    runs = [
        s.id for s in firestore_client.collection("runs").where(filter=FieldFilter("run_uri", "==", run_uri)).stream()
    ]
    assert runs == [run_id]
    assert _steps(firestore_client, run_id)["terminal"]["state"] == "done"


def test_running_after_succeeded_does_not_regress(
    stack: StackState, gcs_client, firestore_client, tmp_path: Path, uid: str
) -> None:  # type: ignore[no-untyped-def]
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", uid)
    t = datetime.now(UTC)
    publish_event(job_event(run_uri, "SUCCEEDED", observed_at=t), stack.project)
    done = wait_record(stack.project, run_id)
    late = job_event(run_uri, "RUNNING", observed_at=t - timedelta(minutes=5))  # delivered late, observed earlier
    publish_event(late, stack.project)
    events = firestore_client.collection("runs").document(run_id).collection("events")
    deadline = time.monotonic() + 30
    while events.document(late.event_key).get().to_dict() is None:
        assert time.monotonic() < deadline, "the RUNNING event was never ledgered"
        time.sleep(0.1)
    assert "non-terminal" in events.document(late.event_key).get().to_dict()["outcome"]
    after = wait_record(stack.project, run_id)
    # updated_at may move (record-ready's grant sync rewrites the authority fields with the same values)
    changed = {k for k, v in after.model_dump().items() if done.model_dump()[k] != v} - {"updated_at"}
    assert not changed, {k: (done.model_dump()[k], after.model_dump()[k]) for k in changed}
