"""The function entry points under functions-framework (its Flask app, as Cloud Run serves it), against the
emulators: CloudEvents in structured and binary mode, raw Pub/Sub push, poison messages, transient errors."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.firestore_records import FirestoreRunRecords, firestore_stores
from rlcleanup.stack import StackState
from rlcleanup.stack.emit import job_event

pytestmark = pytest.mark.integration
MAIN = Path(__file__).resolve().parents[2] / "functions" / "main.py"
PUBSUB_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"


@pytest.fixture(scope="module")
def client(stack: StackState):  # type: ignore[no-untyped-def]
    import logging

    import functions_framework

    from rlcleanup.runtime import functions
    from rlcleanup.settings import load_settings

    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    # A cold start in this process, now that the stack's env is exported: the settings were read when another test
    # module first imported the functions module, before the stack existed.
    cold = (functions.SETTINGS, functions._ports)
    functions.SETTINGS, functions._ports = load_settings(), None
    app = functions_framework.create_app("on_job_event", str(MAIN), "cloudevent")
    yield app.test_client()
    functions.SETTINGS, functions._ports = cold
    root.handlers[:] = saved  # the entry path installs its JSON log handler on the root logger: undo that
    root.setLevel(level)


def _message(payload: bytes, message_id: str = "m-1") -> dict[str, Any]:
    return {
        "data": base64.b64encode(payload).decode(),
        "attributes": {"source": "iris"},
        "messageId": message_id,
        "publishTime": datetime.now(UTC).isoformat(),
    }


def _push(client: Any, stack: StackState, payload: bytes) -> Any:
    """A raw Pub/Sub push request, exactly as the push subscription sends it."""
    body = {"subscription": f"projects/{stack.project}/subscriptions/on-job-event-push", "message": _message(payload)}
    return client.post(f"/projects/{stack.project}/topics/job-events", json=body)


def _running(uid: str, tag: str) -> tuple[bytes, str, str]:
    run_uri = f"gs://somewhere/durable/ep-{tag}-{uid}/v1"
    event = job_event(run_uri, "RUNNING", job_id=f"job-{tag}-{uid}")
    return event.model_dump_json().encode(), f"ep-{tag}-{uid}-v1", event.event_key


def _ledgered(stack: StackState, run_id: str, key: str) -> dict[str, Any] | None:
    from google.cloud import firestore

    snap = firestore.Client(project=stack.project).document(f"runs/{run_id}/events/{key}").get()
    return snap.to_dict() if snap.exists else None


def test_structured_cloud_event(client, stack: StackState, uid: str) -> None:  # type: ignore[no-untyped-def]
    data, run_id, key = _running(uid, "structured")
    body = {
        "specversion": "1.0",
        "type": PUBSUB_TYPE,
        "source": f"//pubsub.googleapis.com/projects/{stack.project}/topics/job-events",
        "id": "structured-1",
        "datacontenttype": "application/json",
        "data": {"message": _message(data)},
    }
    resp = client.post("/", data=json.dumps(body), headers={"Content-Type": "application/cloudevents+json"})
    assert resp.status_code == 200, resp.data
    assert "non-terminal" in _ledgered(stack, run_id, key)["outcome"]


def test_binary_cloud_event(client, stack: StackState, uid: str) -> None:  # type: ignore[no-untyped-def]
    data, run_id, key = _running(uid, "binary")
    headers = {
        "ce-specversion": "1.0",
        "ce-type": PUBSUB_TYPE,
        "ce-source": f"//pubsub.googleapis.com/projects/{stack.project}/topics/job-events",
        "ce-id": "binary-1",
        "Content-Type": "application/json",
    }
    resp = client.post("/", data=json.dumps({"message": _message(data)}), headers=headers)
    assert resp.status_code == 200, resp.data
    assert "non-terminal" in _ledgered(stack, run_id, key)["outcome"]


def test_raw_pubsub_push(client, stack: StackState, uid: str) -> None:  # type: ignore[no-untyped-def]
    data, run_id, key = _running(uid, "push")
    body = {"subscription": f"projects/{stack.project}/subscriptions/on-job-event-push", "message": _message(data)}
    resp = client.post(f"/projects/{stack.project}/topics/job-events", json=body)
    assert resp.status_code == 200, resp.data
    assert "non-terminal" in _ledgered(stack, run_id, key)["outcome"]


def _pull_dlq(stack: StackState, predicate: Any, timeout: float = 20.0) -> Any:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    sub = subscriber.subscription_path(stack.project, "on-job-event-dlq-sub")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            resp = subscriber.pull(request={"subscription": sub, "max_messages": 100}, timeout=10)
            found = None
            for received in resp.received_messages:
                if predicate(received.message):
                    found = received.message
            if resp.received_messages:
                subscriber.acknowledge(
                    request={"subscription": sub, "ack_ids": [m.ack_id for m in resp.received_messages]}
                )
            if found is not None:
                return found
        return None
    finally:
        subscriber.close()


def _poison(stack: StackState, data: bytes) -> dict[str, Any] | None:
    key = hashlib.sha256(data).hexdigest()[:32]
    return FirestoreRunRecords(project=stack.project).get_doc("poison_messages", key)


def test_undecodable_push_is_recorded_acked_and_dead_lettered(client, stack: StackState, uid: str) -> None:  # type: ignore[no-untyped-def]
    garbage = b"\xff\xfe not json " + uid.encode()  # valid base64 (Pub/Sub always sends that), not JSON
    resp = _push(client, stack, garbage)
    assert resp.status_code == 200  # acked: no retry can fix it
    parked = _pull_dlq(stack, lambda m: m.data == garbage)
    assert parked is not None and parked.attributes["rlcleanup_error"] == "invalid_message"
    assert parked.attributes["source"] == "iris"  # the original attributes travel with the copy
    doc = _poison(stack, garbage)
    assert doc is not None and doc["code"] == "invalid_message" and doc["step"] == "on_job_event"


def test_cloud_event_without_a_message_is_recorded_and_dead_lettered(client, stack: StackState, uid: str) -> None:  # type: ignore[no-untyped-def]
    body = {
        "specversion": "1.0",
        "type": PUBSUB_TYPE,
        "source": f"//pubsub.googleapis.com/projects/{stack.project}/topics/job-events",
        "id": f"nomsg-{uid}",
        "datacontenttype": "application/json",
        "data": {"not_a_message": uid},
    }
    resp = client.post("/", data=json.dumps(body), headers={"Content-Type": "application/cloudevents+json"})
    assert resp.status_code == 200
    parked = _pull_dlq(stack, lambda m: uid.encode() in m.data and b"not_a_message" in m.data)
    assert parked is not None and parked.attributes["rlcleanup_error"] == "undecodable"
    doc = _poison(stack, parked.data)
    assert doc is not None and doc["code"] == "undecodable"


def test_schema_invalid_message_is_filed_never_on_the_run_it_names(client, stack: StackState, uid: str) -> None:  # type: ignore[no-untyped-def]
    """A schema-invalid event binds nothing (docs/authority.md §8 P11): filed with its error and dead-lettered, and
    no record is created under the run id it names."""
    payload = json.dumps({"run_uri": f"gs://somewhere/durable/inv-{uid}/v1", "state": "SUCCEEDED"}).encode()
    resp = _push(client, stack, payload)
    assert resp.status_code == 200
    assert FirestoreRunRecords(project=stack.project).get(f"inv-{uid}-v1") is None
    doc = _poison(stack, payload)
    assert doc is not None and (doc["step"], doc["code"]) == ("on_job_event", "invalid_message")
    parked = _pull_dlq(stack, lambda m: m.data == payload)
    assert parked is not None and parked.attributes["rlcleanup_error"] == "invalid_message"


def test_transient_error_answers_500(client, stack: StackState, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    """Another delivery holds the run's classify claim (unexpired lease): retry later, i.e. HTTP 500."""
    from rlcleanup.cli.upload import upload_sample_run
    from rlcleanup.samples.generator import VERSION, write_sample_run

    write_sample_run(tmp_path, "completed-resumed")
    name = f"busy-{uid}"
    run_uri = upload_sample_run(gcs_client, tmp_path, stack.buckets["runs"], f"ep/{uid}", rename=name)
    records, claims = firestore_stores(project=stack.project)
    # The lease belongs to another delivery (another Pub/Sub message): a redelivery of the *same* message would
    # take its own dead lease over, so the holder names another message as its owner.
    owner = f"another-delivery-{uid}"
    assert claims.claim(f"{name}-{VERSION}", "classify", 600, datetime.now(UTC), owner=owner).value == "acquired"
    data = job_event(run_uri, "SUCCEEDED").model_dump_json().encode()
    resp = _push(client, stack, data)
    assert resp.status_code == 500  # Pub/Sub redelivers; nothing was recorded as a permanent error
    record = records.get(f"{name}-{VERSION}")
    assert record is None or record.errors == []
