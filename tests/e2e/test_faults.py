"""Fault injection on the real stack: function processes killed with SIGKILL (mid-copy and at a step boundary),
the Firestore emulator restarted mid-run, poison messages through Pub/Sub push and dead-lettering.

Leases: a claim's `lease_until` is written by the process that takes it, from that process's
RLCLEANUP_LEASE_SECONDS (the function's timeout on the stack: 540 s for capture-part). A delivery killed
mid-copy leaves its claim `running` until that lease runs out, and every redelivery before then answers 500
("being processed by another worker"). So the crash test first restarts capture-part with a 4 s lease — shorter
than the emulator's 10 s minimum backoff, so the first redelivery after the kill already finds the lease expired
and takes the claim over — and puts the function back with its topology lease afterwards.

Deadlines: the Firestore outage tests wait for an in-flight delivery to fail and log the outage, which takes the
record store's deadline (RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS, 30 s by default). They restart capture-part, whose
deliveries are the ones in flight, with a 6 s deadline, so the outage shows in seconds, and put the default back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import sample_on_gcs, wait_record
from google.cloud.firestore_v1.base_query import FieldFilter

from rlcleanup.adapters.firestore_records import FirestoreRunRecords
from rlcleanup.models.record import CompletionRecord
from rlcleanup.stack import StackState, kill_server, restart_function, start_server
from rlcleanup.stack.emit import job_event, publish_event

pytestmark = pytest.mark.e2e
SHORT_LEASE = "4"
SHORT_STORE_DEADLINE = "6"  # s: long enough for the emulator's answers on a loaded machine, far below the 30 s default
EXTRA_LOGS = 600  # with the sample's own files: 4 capture parts of <= 200 objects in the `run` group


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("gs://").partition("/")
    return bucket, key


def _big_sample(stack: StackState, gcs_client: Any, tmp: Path, uid: str, tag: str) -> tuple[str, str]:
    """The completed-resumed sample plus EXTRA_LOGS small log files: capture takes long enough to kill it."""
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp, "completed-resumed", f"{tag}-{uid}")
    bucket, key = _split(run_uri)
    gcs_bucket = gcs_client.bucket(bucket)

    def put(i: int) -> None:
        gcs_bucket.blob(f"{key}/logs/noise/rank-{i:04d}.log").upload_from_string(f"noise {i} {uid}\n" * (i % 7 + 1))

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(put, range(EXTRA_LOGS)))
    return run_uri, run_id


def _steps(firestore_client: Any, run_id: str) -> dict[str, dict[str, Any]]:
    ref = firestore_client.collection("runs").document(run_id).collection("steps")
    return {snap.id: snap.to_dict() for snap in ref.stream()}


def _wait_step(
    firestore_client: Any, run_id: str, prefix: str, state: str, timeout: float = 60.0
) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = _steps(firestore_client, run_id)
        hits = {k: v for k, v in steps.items() if k.startswith(prefix) and v.get("state") == state}
        if hits:
            return hits
        time.sleep(0.02)
    raise AssertionError(f"{run_id}: no {prefix}* step in state {state} within {timeout} s")


def _one_record(firestore_client: Any, run_uri: str) -> list[str]:
    query = firestore_client.collection("runs").where(filter=FieldFilter("run_uri", "==", run_uri))
    return [s.id for s in query.stream()]


def _assert_manifest_complete(gcs_client: Any, record: Any, run_uri: str) -> dict[str, Any]:
    """Every evidence object of the run is in the manifest, and every listed object is preserved whole: present
    at its destination with the source's size and crc32c; nothing under the preserved root is unlisted."""
    assert record.manifest_uri, record
    mbucket, mkey = _split(record.manifest_uri)
    manifest: dict[str, Any] = json.loads(gcs_client.bucket(mbucket).blob(mkey).download_as_bytes())
    root_bucket, root_key = _split(manifest["preserved_root"])
    preserved = {f"gs://{root_bucket}/{b.name}": b for b in gcs_client.list_blobs(root_bucket, prefix=root_key + "/")}
    sbucket, skey = _split(run_uri)
    upload_prefix = skey.split("/durable/")[0] + "/"  # the run's durable root and its temp root (checkpoints)
    sources = {f"gs://{sbucket}/{b.name}": b for b in gcs_client.list_blobs(sbucket, prefix=upload_prefix)}
    listed = {o["destination"]: o for o in manifest["objects"]}
    assert manifest["object_count"] == len(listed) > manifest["captured_object_count"] == record.preserved_object_count
    copied_sources = {o["source"] for o in listed.values() if o["source"] not in ("derived", "unknown")}
    listed_only: set[str] = set()  # weights are listed (uri, size, crc32c) in the derived listings, not copied
    for name in ("checkpoints-listing.jsonl", "exports-listing.jsonl"):
        text = gcs_client.bucket(root_bucket).blob(f"{root_key}/derived/{name}").download_as_text()
        listed_only |= {json.loads(line)["uri"] for line in text.splitlines() if line}
    assert copied_sources <= set(sources)
    missing = set(sources) - copied_sources - listed_only
    assert not missing, sorted(missing)[:5]  # the manifest is complete: every source object copied or listed
    for dest, obj in listed.items():
        blob = preserved.get(dest)
        assert blob is not None, f"listed but not preserved: {dest}"
        assert (blob.size, blob.crc32c) == (obj["size"], obj["crc32c"]), f"half-written or altered: {dest}"
        if obj["source"] not in ("derived", "unknown"):  # unknown: there, but not copied by this capture
            src = sources[obj["source"]]
            assert (src.size, src.crc32c) == (obj["size"], obj["crc32c"]), dest
    unlisted = {u for u in preserved if u not in listed}
    assert unlisted == {record.manifest_uri}  # sealed last: everything is listed but the manifest itself
    return manifest


@contextlib.contextmanager
def _push_paused(stack: StackState, function: str) -> Iterator[None]:
    """Turn the function's push subscription into a pull one while its process is down, then back.

    The emulator counts every refused push as a delivery attempt and retries refused pushes at once, so while a
    port is dead a message burns attempts and grows its backoff (up to the 600 s maximum, or is dead-lettered
    after 10). On Cloud Run a crashed instance is replaced behind a URL that keeps answering; with one process
    per function, pausing push for the second the restart takes models that. The in-flight push the kill cut
    still counts as one failed attempt (10 s minimum backoff)."""
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    sub = subscriber.subscription_path(stack.project, f"{function}-push")
    endpoint = subscriber.get_subscription(request={"subscription": sub}).push_config.push_endpoint
    subscriber.modify_push_config(request={"subscription": sub, "push_config": {}})
    try:
        yield
    finally:
        subscriber.modify_push_config(request={"subscription": sub, "push_config": {"push_endpoint": endpoint}})
        subscriber.close()


@pytest.fixture
def short_store_deadline_capture(stack: StackState) -> Iterator[None]:
    """capture-part, whose deliveries are in flight when Firestore goes away, with a record-store deadline of
    SHORT_STORE_DEADLINE instead of the 30 s default (RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS): its calls fail, and
    log the outage, that much sooner; put back with the default afterwards."""
    restart_function(stack, "capture-part", extra_env={"RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS": SHORT_STORE_DEADLINE})
    try:
        yield
    finally:
        restart_function(stack, "capture-part")


@pytest.fixture
def short_lease_capture(stack: StackState) -> Iterator[None]:
    restart_function(stack, "capture-part", extra_env={"RLCLEANUP_LEASE_SECONDS": SHORT_LEASE})
    try:
        yield
    finally:
        restart_function(stack, "capture-part")  # back to the topology lease for the rest of the session


def test_capture_part_killed_mid_copy_completes_after_redelivery(
    stack: StackState, gcs_client: Any, firestore_client: Any, tmp_path: Path, uid: str, short_lease_capture: None
) -> None:
    run_uri, run_id = _big_sample(stack, gcs_client, tmp_path, uid, "kill-copy")
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    running = _wait_step(firestore_client, run_id, "capture-part:", "running")
    # Freeze the instance the moment a part is seen running (SIGSTOP: no copy moves on while push is paused and the
    # claims are read), then SIGKILL the frozen group: the crash lands mid-copy however fast the copies have become.
    kill_server(stack, "fn-capture-part", signal.SIGSTOP)
    with _push_paused(stack, "capture-part"):
        kill_server(stack, "fn-capture-part")  # SIGKILL the whole functions-framework group, mid-copy
        killed_at = time.monotonic()
        steps = _steps(firestore_client, run_id)
        unfinished = [k for k in running if steps[k]["state"] == "running"]
        assert unfinished, "every claimed part finished before the kill: not a mid-copy crash"
        start_server(stack, "fn-capture-part", extra_env={"RLCLEANUP_LEASE_SECONDS": SHORT_LEASE})

    record = wait_record(stack.project, run_id, timeout=150)
    elapsed = time.monotonic() - killed_at
    assert record.status.value == "awaiting_authority", record.errors
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    assert record.errors == []  # a retaken part re-copies identical content: no write-once conflict
    assert len(record.candidates) == 4
    steps = _steps(firestore_client, run_id)
    # The plan is whole only once its last page is planned (the session stack pages at 500 objects, so this
    # run's ~660 are two pages, the second planned by capture-part: possibly the one killed).
    parts = steps["capture-plan"]["result"]["parts"]
    assert len(parts) >= 4
    assert all(steps[f"capture-part:{p}"]["state"] == "done" for p in parts)
    assert steps["fanin:capture"]["state"] == "done"
    manifest = _assert_manifest_complete(gcs_client, record, run_uri)
    assert manifest["object_count"] > EXTRA_LOGS
    assert _one_record(firestore_client, run_uri) == [run_id]
    assert elapsed < 120


def test_terminal_function_down_at_step_boundary(
    stack: StackState, gcs_client: Any, firestore_client: Any, tmp_path: Path, uid: str
) -> None:
    """establish-terminal-state is SIGKILLed before `run-classified` reaches it (the classify → terminal boundary)
    and only comes back once the capture side has finished; the run then completes from the redelivery."""
    kill_server(stack, "fn-establish-terminal-state")
    try:
        run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", f"kill-term-{uid}")
        publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
        _wait_step(firestore_client, run_id, "capture-plan", "done")
        steps = _steps(firestore_client, run_id)
        assert "terminal" not in steps and "fanin:capture" not in steps  # fan-in waits for the dead member
    finally:
        start_server(stack, "fn-establish-terminal-state")
    record = wait_record(stack.project, run_id, timeout=120)
    assert record.status.value == "awaiting_authority", record.errors
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    assert record.errors == [] and len(record.candidates) == 4
    _assert_manifest_complete(gcs_client, record, run_uri)
    assert _one_record(firestore_client, run_uri) == [run_id]


def _pull_all(subscriber: Any, sub: str, seconds: float) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        resp = subscriber.pull(request={"subscription": sub, "max_messages": 100}, timeout=5)
        if resp.received_messages:
            got += [m.message for m in resp.received_messages]
            subscriber.acknowledge(request={"subscription": sub, "ack_ids": [m.ack_id for m in resp.received_messages]})
        else:
            time.sleep(0.2)
    return got


def test_poison_through_push_is_dead_lettered_once(stack: StackState, firestore_client, uid: str) -> None:  # type: ignore[no-untyped-def]
    """Undecodable, schema-invalid and unknown-run events published to `job-events`: each is acked on its first
    push (never retried), recorded, and parked exactly once on `on-job-event-dlq`."""
    from google.cloud import pubsub_v1

    from rlcleanup.adapters.pubsub_bus import PubSubBus

    undecodable = b"\xff\xfe not json " + uid.encode()
    invalid = json.dumps({"run_uri": f"gs://somewhere/durable/poison-inv-{uid}/v1", "state": "SUCCEEDED"}).encode()
    unknown_uri = f"gs://{stack.buckets['runs']}/nowhere/durable/poison-unknown-{uid}/v1"
    unknown = job_event(unknown_uri, "SUCCEEDED").model_dump_json().encode()
    bus = PubSubBus(project=stack.project)
    for data in (undecodable, invalid, unknown):
        bus.publish("job-events", data, {"source": "iris", "poison_test": uid})

    subscriber = pubsub_v1.SubscriberClient()
    try:
        sub = subscriber.subscription_path(stack.project, "on-job-event-dlq-sub")
        parked: list[Any] = []
        deadline = time.monotonic() + 30
        while len(parked) < 3 and time.monotonic() < deadline:
            parked += [m for m in _pull_all(subscriber, sub, 1.0) if m.attributes.get("poison_test") == uid]
        # Longer than the 10 s minimum backoff: a message answered 500 would have been pushed (and parked) again.
        parked += [m for m in _pull_all(subscriber, sub, 12.0) if m.attributes.get("poison_test") == uid]
    finally:
        subscriber.close()
    by_data = {m.data: m for m in parked}
    assert len(parked) == 3 and set(by_data) == {undecodable, invalid, unknown}, [
        (m.data[:60], dict(m.attributes)) for m in parked
    ]
    codes = {data: by_data[data].attributes["rlcleanup_error"] for data in by_data}
    assert codes[undecodable] == codes[invalid] == "invalid_message"
    assert codes[unknown] not in ("", "invalid_message"), codes[unknown]
    log = Path(stack.state_dir, "fn-on-job-event.log").read_text(errors="replace")
    assert log.count(uid) >= 3
    assert log.count(f"poison-unknown-{uid}") >= 1
    # A schema-invalid event binds nothing (docs/authority.md §8 P11): no record under the id it names, the refusal
    # filed under poison_messages. A run in the run buckets without a readable config is recorded failed under
    # its own location's hashed id, never the readable id a real run could declare.
    assert firestore_client.collection("runs").document(f"poison-inv-{uid}-v1").get().to_dict() is None
    filed = [d.to_dict() for d in firestore_client.collection("poison_messages").stream()]
    assert [d["code"] for d in filed if d.get("named_run_id") == f"poison-inv-{uid}-v1"] == ["invalid_message"]
    unknown_records = [
        d.to_dict() for d in firestore_client.collection("runs").where("run_uri", "==", unknown_uri).stream()
    ]
    assert len(unknown_records) == 1 and unknown_records[0]["run_id"].startswith(f"poison-unknown-{uid}-v1-")
    assert len(unknown_records[0]["errors"]) == 1, unknown_records


@contextlib.contextmanager
def _server_down_for_every_delivery(stack: StackState, function: str) -> Iterator[None]:
    """The function's push subscription made again pointing at a port nothing listens on (its server down for
    every delivery: each push refused), with the shortest retry policy and delivery limit Pub/Sub allows (0-1 s
    backoff, 5 attempts), so the emulator dead-letters its messages in seconds; then made again as provisioned."""
    import socket

    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    sub = subscriber.subscription_path(stack.project, f"{function}-push")
    provisioned = subscriber.get_subscription(request={"subscription": sub})
    with socket.socket() as probe:  # a free port, closed again: pushes to it are refused
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    down = pubsub_v1.types.Subscription()
    down._pb.CopyFrom(provisioned._pb)
    down.push_config.push_endpoint = f"http://127.0.0.1:{dead}/projects/{stack.project}/topics/{provisioned.topic}"
    down.retry_policy.minimum_backoff = {"seconds": 0}
    down.retry_policy.maximum_backoff = {"seconds": 1}
    down.dead_letter_policy.max_delivery_attempts = 5
    subscriber.delete_subscription(request={"subscription": sub})
    subscriber.create_subscription(request=down)
    try:
        yield
    finally:
        subscriber.delete_subscription(request={"subscription": sub})
        subscriber.create_subscription(request=provisioned)
        subscriber.close()


def test_a_message_pubsub_dead_letters_lands_on_the_run_record(
    stack: StackState, gcs_client: Any, tmp_path: Path, uid: str
) -> None:
    """Issue 47 item 2 on the stack: plan-capture's server is down for every delivery, so Pub/Sub dead-letters the
    run's capture-planning message after its attempts, and nothing of plan-capture ever ran to record it. The
    dead-letter recorder (pushed plan-capture-dlq through plan-capture-dlq-record) records retries_exhausted
    with the step and the fix on the run and fails it; `rlcleanup show` prints both."""
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", f"dlq-{uid}")
    with _server_down_for_every_delivery(stack, "plan-capture"):
        publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
        store = FirestoreRunRecords(project=stack.project)
        deadline = time.monotonic() + 60
        record = store.get(run_id)
        while (record is None or record.status.value != "failed") and time.monotonic() < deadline:
            time.sleep(0.2)
            record = store.get(run_id)
    assert record is not None and record.status.value == "failed", (record, _log_tail(stack, "fn-record-dead-letter"))
    [error] = [e for e in record.errors if e.code == "retries_exhausted"]
    assert error.step == "plan_capture", record.errors
    assert "all 5 deliveries" in error.message  # Pub/Sub's own count (CloudPubSubDeadLetterSourceDeliveryCount)
    assert "fix:" in error.message and "plan-capture-dlq-sub" in error.message, error.message
    assert any("could not finish step plan_capture" in w for w in record.remaining_work), record.remaining_work
    rlcleanup = shutil.which("rlcleanup", path=str(Path(sys.executable).parent))
    assert rlcleanup
    shown = subprocess.run(
        [rlcleanup, "show", run_id, "--backend", "firestore", "--project", stack.project],
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    text = " ".join((shown.stdout + shown.stderr).split())
    assert "failed" in text and "retries_exhausted" in text and "plan-capture-dlq-sub" in text, text


def _log_tail(stack: StackState, name: str, lines: int = 15) -> str:
    text = Path(stack.state_dir, f"{name}.log").read_text(errors="replace").splitlines()
    return "\n".join(line[:400] for line in text[-lines:])


def _record_store_errors(stack: StackState, run_id: str, kind: str) -> list[dict[str, Any]]:
    """The ERROR lines a function wrote for `run_id` about the record store (`kind`: RecordStoreUnavailable/Lost)."""
    found = []
    for path in sorted(Path(stack.state_dir).glob("fn-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if kind not in line or run_id not in line:
                continue
            entry = json.loads(line)
            if entry.get("severity") == "ERROR" and (entry.get("error") or {}).get("type") == kind:
                found.append({**entry, "log": path.name})
    return found


def _wait_errors(stack: StackState, run_id: str, kind: str, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _record_store_errors(stack, run_id, kind)
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no {kind} ERROR line for {run_id} within {timeout} s\n{_tails(stack)}")


_EXPLAIN = ("fn-on-job-event", "fn-establish-terminal-state", "fn-scan-log-part", "fn-plan-capture", "fn-capture-part")


def _tails(stack: StackState) -> str:
    return json.dumps({n: _log_tail(stack, n) for n in _EXPLAIN}, indent=1)


def _wait_or_explain(stack: StackState, run_id: str, timeout: float = 150) -> CompletionRecord:
    """The run's finished record; else fail with the tails of the function logs that explain why not."""
    try:
        return wait_record(stack.project, run_id, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_tails(stack)}") from None


def _assert_outage_logged(stack: StackState, run_id: str) -> None:
    """While Firestore was down, a function logged one ERROR line naming the run, its step and the cause."""
    unavailable = _wait_errors(stack, run_id, "RecordStoreUnavailable", timeout=60)
    entry = unavailable[0]
    assert entry["run_id"] == run_id and entry["step"], entry
    assert entry["message"].startswith(f"record store unavailable: run {run_id}, step {entry['step']}, "), entry
    assert entry["error"]["operation"] and entry["error"]["cause"], entry
    # the cause is the client's own words: refused connections or a deadline (bounded, not the 60-300 s default)
    assert any(w in entry["error"]["cause"] for w in ("Timeout of", "Deadline", "connect")), entry


def test_firestore_unresponsive_mid_run_completes_through_redelivery(
    stack: StackState,
    gcs_client: Any,
    firestore_client: Any,
    tmp_path: Path,
    uid: str,
    short_store_deadline_capture: None,
) -> None:
    """A Firestore outage as production has it (the service stops answering, its data stays): the emulator is
    frozen (SIGSTOP) for longer than the record store's deadline (RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS), mid-copy, then resumed (SIGCONT). The
    deliveries in flight fail with a logged RecordStoreUnavailable (HTTP 500), Pub/Sub redelivers them with
    backoff, and the run completes from redelivery alone: no event is re-emitted."""
    run_uri, run_id = _big_sample(stack, gcs_client, tmp_path, uid, "fs-freeze")
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    _wait_step(firestore_client, run_id, "capture-part:", "running")  # copies in flight
    kill_server(stack, "firestore", signal.SIGSTOP)
    try:
        _assert_outage_logged(stack, run_id)  # within the deadline, while Firestore is still down
        time.sleep(2.0)
    finally:
        kill_server(stack, "firestore", signal.SIGCONT)
    record = _wait_or_explain(stack, run_id)
    assert record.status.value == "awaiting_authority", record.errors
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    assert record.errors == [] and len(record.candidates) == 4
    _assert_manifest_complete(gcs_client, record, run_uri)
    assert _one_record(firestore_client, run_uri) == [run_id]
    assert _record_store_errors(stack, run_id, "RecordStoreLost") == []  # nothing was lost


def test_firestore_restarted_mid_run(
    stack: StackState, gcs_client, firestore_client, tmp_path: Path, uid: str, short_store_deadline_capture: None
) -> None:  # type: ignore[no-untyped-def]
    """The Firestore emulator is SIGKILLed mid-run and started again on the same port, empty: the emulator keeps
    its state in memory, and `--export-on-exit` does not run on a crash (nor, measured, on SIGTERM of the bare
    emulator script), so a restart is a total loss of records and claims. Real Firestore never loses committed
    data; that outage is `test_firestore_unresponsive_mid_run_completes_through_redelivery`.

    What holds here, through redelivery alone:
    - while it is down, the deliveries in flight fail within the bounded deadline with an ERROR line naming
      the run, the step and the cause (HTTP 500 → redelivery), instead of blocking in the client's retries;
    - once it is back, a redelivered step of the run notices the database came back empty (its epoch document
      changed) and its record is gone: RecordStoreLost, recorded on the run (status `failed`, code
      `record_store_lost`), rebuilt from what the message carries: the run's URI (never "unknown") and the exact
      recover command; logged at ERROR and dead-lettered. Redelivery cannot complete the run: the plan, the claims
      and the record it would resume from are what was lost.
    Then the command that error names, `rlcleanup recover RUN_ID` (the operator supplies nothing else: the event
    that started the run travelled in every stage message and was kept), completes the run from scratch, however
    many claims were written after the reset: one record, a complete manifest, no write-once conflicts."""
    run_uri, run_id = _big_sample(stack, gcs_client, tmp_path, uid, "fs-restart")
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    _wait_step(firestore_client, run_id, "capture-part:", "running")  # copies in flight
    kill_server(stack, "firestore")
    rlcleanup = shutil.which("rlcleanup", path=str(Path(sys.executable).parent))
    assert rlcleanup
    env = {**os.environ, **stack.env}
    cli = [rlcleanup, "stack"]
    try:
        _assert_outage_logged(stack, run_id)
    finally:  # from another process, as an operator heals it: `stack up` kept how it started the emulator
        healed = subprocess.run(
            [*cli, "restart", "firestore", "--state-dir", stack.state_dir], env=env, capture_output=True, text=True
        )
    assert healed.returncode == 0 and "rlcleanup recover RUN_ID" in healed.stderr, healed.stderr
    probed = subprocess.run([*cli, "status", "--json", "--state-dir", stack.state_dir], env=env, capture_output=True)
    assert json.loads(probed.stdout)["servers"]["firestore"] == "running"
    store = FirestoreRunRecords(project=stack.project)
    deadline = time.monotonic() + 90
    lost: list[Any] = []
    while not lost and time.monotonic() < deadline:  # redelivery alone: nothing is re-emitted yet
        record = store.get(run_id)
        lost = [e for e in (record.errors if record else []) if e.code == "record_store_lost"]
        time.sleep(0.5)
    assert lost, _record_store_errors(stack, run_id, "RecordStoreLost")
    assert record is not None and record.status.value == "failed"
    assert f"run {run_id}, step " in lost[0].message and f"`rlcleanup recover {run_id}`" in lost[0].message
    assert record.run_uri == run_uri and any(f"`rlcleanup recover {run_id}`" in w for w in record.remaining_work)
    assert _record_store_errors(stack, run_id, "RecordStoreLost")  # and the function logged it at ERROR

    done = subprocess.run([rlcleanup, "recover", run_id], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr  # what the error says remains, with nothing but the run's id
    record = _wait_or_explain(stack, run_id)
    assert record.status.value == "awaiting_authority", record.errors
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    assert len(record.candidates) == 4
    assert [e for e in record.errors if e.code == "write_once_conflict"] == []
    assert {e.code for e in record.errors} <= {"record_store_lost"}  # the loss stays in the record's history
    _assert_manifest_complete(gcs_client, record, run_uri)
    assert _one_record(firestore_client, run_uri) == [run_id]
