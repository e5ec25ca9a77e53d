"""Zero-integration runs: Cloud Storage notifications on the real emulators.

fake-gcs-server, started by the stack with its `-event.*` flags for the watched runs bucket, publishes
OBJECT_FINALIZE notifications to the Pub/Sub emulator's `storage-events` topic; `on-storage-event` (a
functions-framework process behind a push subscription) turns the run's final status token into a job event.
The real service's notification shape is published by hand to the same topic, for a run fake-gcs-server is not
watching, so both shapes travel the whole way.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import wait_record

from rlcleanup.cli.upload import upload_sample_run
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.sources.gcs_notifications import classify_object, parse_notification
from rlcleanup.stack import StackState

pytestmark = pytest.mark.e2e


def _storage_claims(firestore_client: Any, run_id: str) -> list[dict[str, Any]]:
    steps = firestore_client.collection("runs").document(run_id).collection("steps").stream()
    return [snap.to_dict() for snap in steps if snap.id.startswith("storage:")]


def test_upload_alone_produces_the_finished_record(  # type: ignore[no-untyped-def]
    stack: StackState, gcs_client, firestore_client, tmp_path: Path, uid: str
) -> None:
    """The user story: upload a run to $RLCLEANUP_RUNS_BUCKET in Marin's order (status RUNNING, every file, the
    final token last) and the finished record appears. No `emit`, no job event from anyone but the bucket."""
    bucket = stack.env["RLCLEANUP_RUNS_BUCKET"]
    assert bucket == stack.buckets["watched-runs"]
    write_sample_run(tmp_path, "completed-resumed")
    name = f"notified-{uid}"
    started = time.monotonic()
    run_uri = upload_sample_run(gcs_client, tmp_path, bucket, f"n/{uid}", rename=name, status_last=True)
    run_id = f"{name}-{VERSION}"
    record = wait_record(stack.project, run_id, timeout=150)
    assert record.run_uri == run_uri
    assert record.status.value in ("awaiting_authority", "complete")
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    # A storage hint carries no controller verdict: the state comes from the artifact itself, not "gcs event".
    assert record.controller_state == "succeeded (.executor_status: SUCCESS)"
    assert record.candidates and all(c.valid for c in record.candidates if c.step == 20)
    print(f"status upload → finished record: {time.monotonic() - started:.1f} s (includes the upload)")

    claims = _storage_claims(firestore_client, run_id)
    # Only run-end markers cost a claim (and a read): logs, checkpoints, exports and configs were dropped by name.
    # The status file was written twice (RUNNING, then the token), so it has two generations.
    markers = [p for p in tmp_path.rglob("*") if p.is_file() and classify_object(p.as_posix()).marker is not None]
    assert len(claims) == len(markers) + 1, [(c["result"]["object"], c["result"]["outcome"]) for c in claims]
    by_object = {(c["result"]["object"], c["result"]["generation"]): c["result"] for c in claims}
    status = [r for (obj, _), r in by_object.items() if obj == f"{run_uri}/.executor_status"]
    assert sorted(r["published"] for r in status) == [False, True]  # RUNNING dropped, the final token published
    assert all(r["shape"] == "fake-gcs-server" for r in by_object.values())
    # Other markers (terminal.json, attempt records) may also become hints when they are handled after the final
    # token landed; on-job-event's classify claim makes them one run: the record above was finished once.
    steps = firestore_client.collection("runs").document(run_id).collection("steps")
    assert steps.document("classify").get().exists


def test_fake_gcs_server_notification_shape_on_the_wire(stack: StackState, gcs_client, uid: str) -> None:  # type: ignore[no-untyped-def]
    """What fake-gcs-server really sends (the notes in run-layout-v2.md §9, checked here): attributes without
    notificationConfig/resource, a payload without metageneration; and our parser reads it."""
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    topic = f"projects/{stack.project}/topics/storage-events"
    sub = subscriber.subscription_path(stack.project, f"wire-{uid}")
    subscriber.create_subscription(request={"name": sub, "topic": topic})
    try:
        key = f"wire/{uid}/logs/finelog.log"
        blob = gcs_client.bucket(stack.buckets["watched-runs"]).blob(key)
        blob.upload_from_string(b"hello\n")
        blob.reload()
        deadline, messages = time.monotonic() + 30, []
        while time.monotonic() < deadline:
            response = subscriber.pull(request={"subscription": sub, "max_messages": 10}, timeout=10)
            messages += [m.message for m in response.received_messages if m.message.attributes["objectId"] == key]
            if messages:
                break
        assert len(messages) == 1
        attributes = dict(messages[0].attributes)
        assert set(attributes) == {
            "bucketId",
            "eventTime",
            "eventType",
            "objectGeneration",
            "objectId",
            "payloadFormat",
        }
        assert attributes["eventType"] == "OBJECT_FINALIZE" and attributes["objectGeneration"] == str(blob.generation)
        payload = json.loads(messages[0].data)
        assert "metageneration" not in payload and payload["name"] == key
        parsed = parse_notification(messages[0].data, attributes)
        assert parsed.shape == "fake-gcs-server" and parsed.generation == blob.generation
    finally:
        subscriber.delete_subscription(request={"subscription": sub})
        subscriber.close()


def test_real_service_notification_shape_end_to_end(  # type: ignore[no-untyped-def]
    stack: StackState, gcs_client, firestore_client, tmp_path: Path, uid: str
) -> None:
    """A notification in the real service's shape (notificationConfig, resource, metageneration) published to
    storage-events for a run in the unwatched bucket: the same function produces the finished record."""
    from google.cloud import pubsub_v1

    write_sample_run(tmp_path, "failed-first-link")
    name = f"realshape-{uid}"
    run_uri = upload_sample_run(gcs_client, tmp_path, stack.buckets["runs"], f"rs/{uid}", rename=name)
    bucket, _, key = f"{run_uri}/.executor_status".removeprefix("gs://").partition("/")
    blob = gcs_client.bucket(bucket).get_blob(key)
    payload = {
        "kind": "storage#object",
        "id": f"{bucket}/{key}/{blob.generation}",
        "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}/o/{key.replace('/', '%2F')}",
        "name": key,
        "bucket": bucket,
        "generation": str(blob.generation),
        "metageneration": str(blob.metageneration),
        "contentType": "text/plain",
        "timeCreated": blob.time_created.isoformat(),
        "updated": blob.updated.isoformat(),
        "storageClass": "STANDARD",
        "size": str(blob.size),
        "md5Hash": blob.md5_hash,
        "crc32c": blob.crc32c,
        "etag": "CAE=",
    }
    attributes = {
        "bucketId": bucket,
        "eventTime": blob.updated.isoformat(),
        "eventType": "OBJECT_FINALIZE",
        "notificationConfig": f"projects/_/buckets/{bucket}/notificationConfigs/1",
        "objectGeneration": str(blob.generation),
        "objectId": key,
        "payloadFormat": "JSON_API_V1",
        "resource": f"projects/_/buckets/{bucket}/objects/{key}#{blob.generation}",
    }
    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(stack.project, "storage-events")
    for _ in range(2):  # at-least-once: a redelivered notification must not make a second event
        publisher.publish(topic, json.dumps(payload).encode(), **attributes).result(timeout=30)
    run_id = f"{name}-{VERSION}"
    record = wait_record(stack.project, run_id, timeout=150)
    assert record.terminal_state is not None and record.terminal_state.value == "failed"
    assert record.first_failure_cause is not None
    claims = _storage_claims(firestore_client, run_id)
    assert [c["result"]["shape"] for c in claims] == ["gcs"]
    assert claims[0]["result"]["published"] is True


def test_a_resubmitted_step_ends_again_through_its_notifications(  # type: ignore[no-untyped-def]
    stack: StackState, gcs_client, firestore_client, tmp_path: Path, uid: str
) -> None:
    """Marin resubmits a failed step in the watched bucket: RUNNING over the FAILED token, a new attempt record, then
    the new token. The RUNNING write and the attempt record (its step still runs) are dropped; the new token's
    generation is a new end: every stage runs once more under the new pass's scope, the chain gains the attempt,
    the finished record never goes back to in_progress, and a redelivered notification is still one write."""
    from google.cloud import pubsub_v1

    from rlcleanup.adapters.firestore_records import firestore_stores

    bucket = stack.env["RLCLEANUP_RUNS_BUCKET"]
    write_sample_run(tmp_path, "failed-first-link")
    name = f"resubmit-{uid}"
    run_uri = upload_sample_run(gcs_client, tmp_path, bucket, f"r/{uid}", rename=name, status_last=True)
    run_id = f"{name}-{VERSION}"
    first = wait_record(stack.project, run_id, timeout=150)
    assert len(first.chain.attempts) == 3

    store, claims = firestore_stores(project=stack.project)
    status = gcs_client.bucket(bucket).blob(f"{run_uri.removeprefix(f'gs://{bucket}/')}/.executor_status")
    status.upload_from_string(b"RUNNING\n")
    old = next(b for b in gcs_client.list_blobs(bucket, prefix=f"r/{uid}/") if b.name.endswith("/fe91ad59edb3.json"))
    attempt = json.loads(old.download_as_bytes())
    new_id = "0a1b2c3d4e5f"
    attempt["request"]["attempt_id"] = attempt["response"]["attempt_id"] = new_id
    attempt["execution"] |= {"started_at": "2026-11-30T10:00:00Z", "ended_at": "2026-11-30T10:30:00Z"}
    gcs_client.bucket(bucket).blob(old.name.replace("fe91ad59edb3", new_id)).upload_from_string(json.dumps(attempt))
    time.sleep(3)  # the RUNNING phase: its notifications are handled and change nothing
    during = store.get(run_id)
    assert during is not None and during.status == first.status
    status.upload_from_string(b"FAILED\n")
    status.reload()

    deadline, record, scope = time.monotonic() + 150, None, None
    while time.monotonic() < deadline:
        passes = claims.results(run_id, "pass:")
        scope = next(iter(passes), "pass:").removeprefix("pass:")
        if scope and claims.result(run_id, f"{scope}/select") is not None:
            record = store.get(run_id)
            break
        assert (store.get(run_id) or first).status.value != "in_progress"  # never regressed meanwhile
        time.sleep(0.2)
    assert record is not None, f"the new end was not handled: {claims.results(run_id, '')}"
    assert len(record.chain.attempts) == 4 and record.chain.attempts[-1].attempt_id == new_id
    assert record.preserved_locations[0].endswith(f"/passes/{scope}") and record.status.value != "in_progress"

    # A redelivered notification of the new token (the real service's shape this time) is still one write.
    publisher = pubsub_v1.PublisherClient()
    key = status.name
    attributes = {
        "bucketId": bucket,
        "eventType": "OBJECT_FINALIZE",
        "notificationConfig": f"projects/_/buckets/{bucket}/notificationConfigs/1",
        "objectGeneration": str(status.generation),
        "objectId": key,
        "payloadFormat": "NONE",
        "resource": f"projects/_/buckets/{bucket}/objects/{key}#{status.generation}",
    }
    publisher.publish(publisher.topic_path(stack.project, "storage-events"), b"", **attributes).result(timeout=30)
    time.sleep(3)
    assert list(claims.results(run_id, "pass:")) == [f"pass:{scope}"]
    outcomes = [c["result"] for c in _storage_claims(firestore_client, run_id) if c["result"]["object"].endswith(key)]
    assert sorted(r["published"] for r in outcomes) == [False, False, True, True]  # RUNNING x2, the two tokens
