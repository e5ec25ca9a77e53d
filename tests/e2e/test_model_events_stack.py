"""Issue 49 on the real stack, the chain its "Done means" asks: a run with an owed HF export (the `deferred-export`
sample on the GCS emulator, finished by the deployed functions) -> the export grant's preview (`rlcleanup grant
--dry-run`) -> the grant (published to `authority-grants`, carried out by apply-grant) -> the job runs the tiny
converter on a real local Ray head (tests/servers/ray_head.py) -> the records sweep sees it end and puts the
validated export on the record as a valid candidate -> a signed publish grant of that candidate -> the sample
subscriber (examples/evaluation_trigger, served by functions-framework behind a Pub/Sub push subscription on
model-events, as docs/events-out.md deploys it) receives exactly one `model-published` event and writes one
evaluation request."""

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
from typer.testing import CliRunner

from rlcleanup.adapters.controllers.ray import RayController
from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.authority.grants import Approver, Grant, load_private_key, public_b64, register_approver, sign
from rlcleanup.cli.main import app
from rlcleanup.models.model_events import ModelEventType, event_id
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.controllers import ExportJobSpec
from rlcleanup.runtime.backends import open_bus
from rlcleanup.runtime.topology import load_topology
from rlcleanup.stack import StackState, restart_function
from rlcleanup.stack.emit import job_event, publish_event
from servers.ray_head import ray_head, wait_job

pytestmark = pytest.mark.e2e

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "evaluation_trigger" / "main.py"
CONVERTER = Path(__file__).resolve().parents[1] / "servers" / "tiny_converter.py"
GRANT_FUNCTIONS = ("apply-grant", "sweep")  # the one that submits, the one that follows the job
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


@pytest.fixture
def ray_for_exports(stack: StackState) -> Iterator[str]:
    """A real Ray head, and the stack's grant and sweep functions configured to run export jobs on it (restored
    after: no other test's functions know this head). The functions restart while the head boots."""
    with ray_head() as head:
        env = {
            "RLCLEANUP_EXPORT_CONVERTER": json.dumps([sys.executable, str(CONVERTER)]),
            "RLCLEANUP_EXPORT_CONTROLLER": "ray",
            "RLCLEANUP_RAY_DASHBOARD": head.url,
        }
        try:
            for fn in GRANT_FUNCTIONS:
                restart_function(stack, fn, extra_env=env)
            yield head.ready()
        finally:
            for fn in GRANT_FUNCTIONS:
                restart_function(stack, fn, extra_env={})


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout


def _record(project: str, run_id: str) -> CompletionRecord:
    records, _ = firestore_stores(project=project)
    record = records.get(run_id)
    assert record is not None
    return record


def test_an_owed_export_runs_on_ray_and_its_published_model_reaches_the_sample_subscriber_once(
    stack: StackState,
    gcs_client: Any,
    firestore_client: Any,
    ray_for_exports: str,
    subscriber: tuple[Path, Path],
    tmp_path: Path,
    uid: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requests, log = subscriber
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path / "run", "deferred-export", uid)
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    record = wait_record(stack.project, run_id)
    owed = next(c for c in record.candidates if c.step == 20)
    assert owed.state.value == "convertible" and owed.export_request is not None, record.candidates

    # The approver: a key from `keygen`, registered for the run's own root (the export's destination) and the
    # local models directory the publish goes to.
    for var, name in (("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(var, str(tmp_path / name))
    monkeypatch.setenv("RLCLEANUP_EXPORT_CONVERTER", json.dumps([sys.executable, str(CONVERTER)]))
    monkeypatch.setenv("RLCLEANUP_EXPORT_CONTROLLER", "ray")
    monkeypatch.setenv("RLCLEANUP_RAY_DASHBOARD", ray_for_exports)
    approver = f"alice-{uid}"
    code, out = _cli("keygen", "--id", approver)
    assert code == 0, out
    key_file = next(Path(line.split()[2]) for line in out.splitlines() if line.startswith("private key:"))
    key = load_private_key(key_file.read_bytes())
    records, _ = firestore_stores(project=stack.project, client=firestore_client)
    dest_root = tmp_path / "models"
    dest_root.mkdir(mode=0o700)
    register_approver(
        records,
        Approver(approver_id=approver, public_key=public_b64(key), allowed_prefixes=[str(dest_root), run_uri]),
    )

    # Preview, then the grant, both through the CLI against the stack's store and bus.
    grant = ("grant", run_id, "--action", "export", "--step", "20", "--key", approver, "--json")
    code, out = _cli(*grant, "--project", stack.project, "--dry-run")
    preview = json.loads(out)
    assert code == 0 and preview["would"] == "submit", preview
    assert preview["argv"][:2] == [sys.executable, str(CONVERTER)] and preview["controller"] == "ray"
    assert preview["throughput"]["basis"] == "default"  # no earlier export of this size has a recorded end
    code, out = _cli(*grant, "--project", stack.project)
    assert code == 0 and json.loads(out)["state"] == "published", out

    def submitted() -> Any:
        actions = [a for a in _record(stack.project, run_id).authority_actions if a.action == "export"]
        return actions[0] if actions and actions[0].export_job is not None else None

    action = _wait(submitted, "the export grant submitted no job", timeout=90)
    job = action.export_job
    assert job.controller == "ray" and job.job_id.startswith("rlcleanup-export-20-") and job.argv == preview["argv"]
    ray = RayController(ray_for_exports)
    assert wait_job(ray, job.job_id) == "SUCCEEDED", ray.snapshot(job.job_id).logs
    assert "tiny_converter: step 20 exit 0" in (ray.job_log_tail(job.job_id, 4096) or "")  # the route a failure reads
    # A redelivery of the same submission id finds the job instead of submitting a second one.
    again = ray.submit(ExportJobSpec(submission_id=job.job_id, argv=tuple(job.argv)))
    assert again.already and again.state == "SUCCEEDED"
    assert len([j for j in ray.list_jobs() if j.submission_id == job.job_id]) == 1
    # The job moved the request as upstream's submit_export does; rlcleanup wrote nothing into it.
    request = json.loads(open_request(gcs_client, owed.export_request.uri))
    assert (request["status"], request["attempts"], request["last_exit_code"]) == ("complete", 1, 0)

    # The records sweep follows the job: it ended, so the new export is validated and put on the record.
    sweep_topic = TOPOLOGY.trigger_of("sweep")
    open_bus(stack.project).publish(sweep_topic, json.dumps({"kind": "records"}).encode(), {"kind": "records"})

    def followed_to_its_end() -> Any:  # the job's end is the pass's last write (after the candidate)
        record = _record(stack.project, run_id)
        [action] = [a for a in record.authority_actions if a.action == "export"]
        return record if action.export_job is not None and action.export_job.ended_at is not None else None

    followed = _wait(followed_to_its_end, "the sweep did not see the export job end", timeout=90)
    [action] = [a for a in followed.authority_actions if a.action == "export"]
    assert action.export_job is not None and action.export_job.state == "SUCCEEDED"
    assert action.export_job.exit_code == 0 and action.export_job.duration_seconds is not None
    # What a later export's preflight measures from: the bytes it converted, its submission and its recorded end.
    assert action.export_job.bytes == preview["checkpoint_bytes"] and action.export_job.submitted_at is not None
    assert action.export_job.ended_at is not None and action.export_job.ended_at >= action.export_job.submitted_at
    candidate = next(c for c in followed.candidates if c.step == 20)
    assert candidate.valid and candidate.uri.rstrip("/").endswith("exports/global_step_20/policy"), candidate.problems
    assert not [i for i in followed.remaining_work if "global_step_20" in i or i.startswith("export job ")]
    assert not [e for e in followed.errors if e.code.startswith("export_job")], followed.errors

    # Publish the new candidate under a grant: the sample subscriber hears of it once.
    now = datetime.now(UTC)
    publish = Grant(
        run_id=run_id, action="publish", step=20, digest=candidate.digest,
        destination=str(dest_root / "m"), visibility="private", granted_by=approver, granted_at=now,
        expires_at=now + timedelta(hours=1), reason="evaluate the exported final checkpoint",
    )  # fmt: skip
    grants_topic = TOPOLOGY.trigger_of("apply-grant")
    open_bus(stack.project).publish(grants_topic, json.dumps(sign(publish, key)).encode(), {"run_id": run_id})

    expected = event_id(ModelEventType.published, publish.grant_id, publish.destination, publish.digest)
    written = _wait(lambda: sorted(requests.glob("*.json")), "no evaluation request was written", timeout=90)
    assert [p.name for p in written] == [f"{expected}.json"]
    evaluation = json.loads(written[0].read_text())
    assert (evaluation["run_id"], evaluation["step"], evaluation["model"]) == (run_id, 20, publish.destination)
    assert evaluation["manifest_digest"] == candidate.digest
    assert evaluation["model_identity"] == candidate.model_identity
    assert Path(evaluation["provenance"]).is_file()  # the verified publish's provenance.json, beside the model
    assert _record(stack.project, run_id).authority_actions[-1].state == "published"

    def deliveries() -> list[dict[str, Any]]:
        lines = log.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith('{"received"')]

    received = _wait(deliveries, "the subscriber logged no delivery")
    assert received == [{"received": expected, "type": "dev.rlcleanup.model.published", "created": True}]


def open_request(gcs_client: Any, uri: str) -> str:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    return str(gcs_client.bucket(bucket).blob(name).download_as_text())
