"""Issue 49 part 2 on the real stack: a sample run finished by the deployed functions, a signed publish grant on
`authority-grants`, the apply-grant function publishing the verified model, and the sample subscriber
(examples/evaluation_trigger, served by functions-framework behind a Pub/Sub push subscription on model-events, as
docs/events-out.md deploys it) receiving exactly one `model-published` event and writing one evaluation request."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import sample_on_gcs, wait_record

from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.authority.grants import Approver, Grant, new_key, public_b64, register_approver, sign
from rlcleanup.models.model_events import ModelEventType, event_id
from rlcleanup.runtime.backends import open_bus
from rlcleanup.runtime.topology import load_topology
from rlcleanup.stack import StackState
from rlcleanup.stack.emit import job_event, publish_event

pytestmark = pytest.mark.e2e

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "evaluation_trigger" / "main.py"
TOPOLOGY = load_topology()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout} s")


@pytest.fixture
def subscriber(stack: StackState, tmp_path: Path, uid: str) -> Iterator[tuple[Path, Path]]:
    """The sample subscriber on functions-framework, and its push subscription on model-events (the emulator's)."""
    from google.cloud import pubsub_v1

    requests, log = tmp_path / "evaluation-requests", tmp_path / "subscriber.log"
    requests.mkdir()
    port = _free_port()
    script = Path(sys.executable).parent / "functions-framework"
    argv = [str(script), "--source", str(SAMPLE), "--target", "start_evaluation", "--signature-type", "cloudevent"]
    env = {**os.environ, "EVALUATION_REQUESTS": str(requests)}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    subscriptions = pubsub_v1.SubscriberClient()
    topic = TOPOLOGY.route("apply-grant", "announce")
    name = subscriptions.subscription_path(stack.project, f"start-evaluation-{uid}")
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        _wait(listening, "the sample subscriber did not listen")
        subscriptions.create_subscription(
            request={
                "name": name,
                "topic": f"projects/{stack.project}/topics/{topic}",
                "push_config": {"push_endpoint": f"http://127.0.0.1:{port}/projects/{stack.project}/topics/{topic}"},
                "ack_deadline_seconds": 60,
            }
        )
        yield requests, log
    finally:
        subscriptions.delete_subscription(request={"subscription": name})
        subscriptions.close()
        proc.terminate()
        proc.wait(timeout=10)


def test_a_publish_through_a_grant_reaches_the_sample_subscriber_once(
    stack: StackState, gcs_client: Any, firestore_client: Any, subscriber: tuple[Path, Path], tmp_path: Path, uid: str
) -> None:
    requests, log = subscriber
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path / "run", "completed-resumed", uid)
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    record = wait_record(stack.project, run_id)
    assert record.status.value == "awaiting_authority", record.errors

    records, _ = firestore_stores(project=stack.project, client=firestore_client)
    dest_root = tmp_path / "models"
    dest_root.mkdir(mode=0o700)
    key = new_key()
    approver = f"alice-{uid}"
    register_approver(
        records, Approver(approver_id=approver, public_key=public_b64(key), allowed_prefixes=[str(dest_root)])
    )
    candidate = max((c for c in record.candidates if c.valid), key=lambda c: c.step)
    now = datetime.now(UTC)
    grant = Grant(
        run_id=run_id, action="publish", step=candidate.step, digest=candidate.digest,
        destination=str(dest_root / "m"), visibility="private", granted_by=approver, granted_at=now,
        expires_at=now + timedelta(hours=1), reason="evaluate it",
    )  # fmt: skip
    grants_topic = next(f.trigger for f in TOPOLOGY.functions if f.name == "apply-grant")
    open_bus(stack.project).publish(grants_topic, json.dumps(sign(grant, key)).encode(), {"run_id": run_id})

    expected = event_id(ModelEventType.published, grant.grant_id, grant.destination, grant.digest)
    written = _wait(lambda: sorted(requests.glob("*.json")), "no evaluation request was written", timeout=90)
    assert [p.name for p in written] == [f"{expected}.json"]
    request = json.loads(written[0].read_text())
    assert (request["run_id"], request["step"], request["model"]) == (run_id, candidate.step, grant.destination)
    assert request["manifest_digest"] == candidate.digest and request["model_identity"] == candidate.model_identity
    assert Path(request["provenance"]).is_file()  # the verified publish's provenance.json, beside the model
    assert record.run_id == run_id and (records.get(run_id) or record).authority_actions[-1].state == "published"

    def deliveries() -> list[dict[str, Any]]:
        lines = log.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith('{"received"')]

    received = _wait(deliveries, "the subscriber logged no delivery")
    assert received == [{"received": expected, "type": "dev.rlcleanup.model.published", "created": True}]
