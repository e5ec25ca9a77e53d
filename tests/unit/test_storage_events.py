"""Cloud Storage notifications → job events: both wire shapes (the real service's and fake-gcs-server's), which
writes mark a run's end, reading the notified generation, dedupe on (bucket, object, generation), and the
on-storage-event handler over an in-process bus and SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.errors import PermanentError
from rlcleanup.models.events import JobEvent
from rlcleanup.ports.storage import ObjectInfo
from rlcleanup.runtime.handlers import dispatch
from rlcleanup.runtime.ports import Ports
from rlcleanup.sources import gcs_notifications as gcsn

BUCKET = "team-runs"
R = "experiments/rl/math-rl/2026.12.01"
UPDATED = "2026-12-01T10:00:00.123Z"


def fake_gcs_message(name: str, generation: int, *, overwrote: int | None = None) -> tuple[bytes, dict[str, str]]:
    """What fake-gcs-server v1.54 publishes (internal/notification/event.go): no notificationConfig/resource
    attributes, no metageneration in the payload, `id` without the generation, int64s as strings."""
    payload = {
        "kind": "storage#object",
        "id": f"{BUCKET}/{name}",
        "name": name,
        "bucket": BUCKET,
        "generation": str(generation),
        "contentType": "text/plain",
        "timeCreated": UPDATED,
        "updated": UPDATED,
        "storageClass": "STANDARD",
        "size": "7",
        "md5Hash": "Zm9v",
        "crc32c": "AAAAAA==",
    }
    attributes = {
        "bucketId": BUCKET,
        "eventTime": "2026-12-01T10:00:01Z",
        "eventType": "OBJECT_FINALIZE",
        "objectGeneration": str(generation),
        "objectId": name,
        "payloadFormat": "JSON_API_V1",
    }
    if overwrote is not None:
        attributes["overwroteGeneration"] = str(overwrote)
    return json.dumps(payload).encode(), attributes


def real_gcs_message(name: str, generation: int, event_type: str = "OBJECT_FINALIZE") -> tuple[bytes, dict[str, str]]:
    """The real service's shape (cloud.google.com/storage/docs/pubsub-notifications): notificationConfig and
    resource attributes, a full object resource with metageneration, selfLink, mediaLink and etag."""
    payload = {
        "kind": "storage#object",
        "id": f"{BUCKET}/{name}/{generation}",
        "selfLink": f"https://www.googleapis.com/storage/v1/b/{BUCKET}/o/{name.replace('/', '%2F')}",
        "mediaLink": f"https://storage.googleapis.com/download/storage/v1/b/{BUCKET}/o/x?generation={generation}",
        "name": name,
        "bucket": BUCKET,
        "generation": str(generation),
        "metageneration": "1",
        "contentType": "application/json",
        "timeCreated": UPDATED,
        "updated": UPDATED,
        "storageClass": "STANDARD",
        "timeStorageClassUpdated": UPDATED,
        "size": "7",
        "md5Hash": "Zm9v",
        "crc32c": "AAAAAA==",
        "etag": "CKih16GjycICEAE=",
    }
    attributes = {
        "bucketId": BUCKET,
        "eventTime": "2026-12-01T10:00:01.000000Z",
        "eventType": event_type,
        "notificationConfig": f"projects/_/buckets/{BUCKET}/notificationConfigs/3",
        "objectGeneration": str(generation),
        "objectId": name,
        "payloadFormat": "JSON_API_V1",
        "resource": f"projects/_/buckets/{BUCKET}/objects/{name}#{generation}",
    }
    return json.dumps(payload).encode(), attributes


SHAPES = [pytest.param(fake_gcs_message, id="fake-gcs-server"), pytest.param(real_gcs_message, id="gcs")]


class Objects:
    """Objects by (uri, generation); the live one is the highest generation. Records every read."""

    def __init__(self) -> None:
        self.versions: dict[str, dict[int, bytes]] = {}
        self.reads: list[tuple[str, int | None]] = []

    def put(self, key: str, data: bytes, generation: int) -> None:
        self.versions.setdefault(f"gs://{BUCKET}/{key}", {})[generation] = data

    def read(self, uri: str, generation: int | None) -> bytes | None:
        self.reads.append((uri, generation))
        versions = self.versions.get(uri, {})
        if generation is None:
            return versions[max(versions)] if versions else None
        return versions.get(generation)

    # The Storage methods the handler's fallback path does not need; read_generation is what it uses.
    def read_generation(self, uri: str, generation: int | None, max_bytes: int = 1 << 20) -> bytes | None:
        data = self.read(uri, generation)
        return None if data is None else data[:max_bytes]

    def stat(self, uri: str) -> ObjectInfo | None:
        versions = self.versions.get(uri)
        return ObjectInfo(uri=uri, size=len(versions[max(versions)]), generation=max(versions)) if versions else None


# ---------------------------------------------------------------- parsing both shapes


@pytest.mark.parametrize("message", SHAPES)
def test_both_shapes_parse_to_the_same_identity(message: Any) -> None:
    data, attributes = message(f"{R}/.executor_status", 1764583200123456)
    n = gcsn.parse_notification(data, attributes)
    assert (n.bucket, n.name, n.generation) == (BUCKET, f"{R}/.executor_status", 1764583200123456)
    assert n.uri == f"gs://{BUCKET}/{R}/.executor_status"
    assert n.object is not None and n.object.size == 7
    assert n.observed_at == datetime(2026, 12, 1, 10, 0, 0, 123000, tzinfo=UTC)


def test_shape_is_told_apart_by_notification_config() -> None:
    fake = gcsn.parse_notification(*fake_gcs_message("a/.executor_status", 5))
    real = gcsn.parse_notification(*real_gcs_message("a/.executor_status", 5))
    assert fake.shape == "fake-gcs-server" and fake.object is not None and fake.object.metageneration is None
    assert real.shape == "gcs" and real.object is not None and real.object.metageneration == 1
    assert real.attributes.resource and real.attributes.notification_config
    assert fake.dedupe_key == real.dedupe_key  # same (bucket, object, generation): one write


def test_dedupe_key_is_bucket_object_generation() -> None:
    key = gcsn.parse_notification(*fake_gcs_message("a/b", 5)).dedupe_key
    assert gcsn.parse_notification(*fake_gcs_message("a/b", 5)).dedupe_key == key  # redelivery
    assert gcsn.parse_notification(*fake_gcs_message("a/b", 6)).dedupe_key != key  # overwrite
    assert gcsn.parse_notification(*fake_gcs_message("a/c", 5)).dedupe_key != key


def test_payload_format_none_has_no_object() -> None:
    _, attributes = real_gcs_message("a/b", 5)
    n = gcsn.parse_notification(b"", {**attributes, "payloadFormat": "NONE"})
    assert n.object is None
    assert n.observed_at == datetime(2026, 12, 1, 10, 0, 1, tzinfo=UTC)  # eventTime when there is no resource


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d, a: (d, {k: v for k, v in a.items() if k != "objectId"}), "objectId"),
        (lambda d, a: (d, {**a, "objectGeneration": "abc"}), "objectGeneration"),
        (lambda d, a: (b"{not json", a), "not an object resource"),
        (lambda d, a: (json.dumps({**json.loads(d), "generation": "6"}).encode(), a), "#6"),
        (lambda d, a: (json.dumps([1, 2]).encode(), a), "not an object resource"),
    ],
)
def test_malformed_notifications_are_refused_with_the_reason(mutate: Any, needle: str) -> None:
    data, attributes = mutate(*fake_gcs_message("a/.executor_status", 5))
    with pytest.raises(gcsn.NotificationError, match=needle):
        gcsn.parse_notification(data, attributes)


# ---------------------------------------------------------------- which writes mark a run's end


@pytest.mark.parametrize(
    ("name", "marker", "run_key"),
    [
        (f"{R}/.executor_status", gcsn.RunMarker.executor_status, R),
        (f"{R}/terminal.json", gcsn.RunMarker.terminal_manifest, R),
        (f"{R}/receipts/0123456789ab.json", gcsn.RunMarker.training_receipt, R),
        (f"{R}/exports/receipts/fp-1.json", gcsn.RunMarker.export_receipt, R),
        ("tmp/ttl=14d/skyrl/x/1/attempts/0123456789ab.json", gcsn.RunMarker.attempt_record, None),
        (f"{R}/.executor_status.lock", None, None),
        (f"{R}/exports/global_step_10/policy/model.safetensors", None, None),
        ("tmp/ttl=14d/skyrl/x/1/attempts/0123456789ab/logs/finelog.log", None, None),
        ("tmp/ttl=14d/skyrl/x/1/checkpoints/latest_ckpt_global_step.txt", None, None),
        (f"{R}/resolved-skyrl.json", None, None),
    ],
)
def test_classify_object_by_name(name: str, marker: gcsn.RunMarker | None, run_key: str | None) -> None:
    cls = gcsn.classify_object(name)
    assert cls.marker == marker
    assert cls.run_key == run_key


def _decide(objects: Objects, name: str, generation: int, **kw: Any) -> gcsn.Decision:
    return gcsn.decide(gcsn.parse_notification(*fake_gcs_message(name, generation, **kw)), objects.read)


def test_terminal_token_is_read_at_the_notified_generation() -> None:
    objects = Objects()
    objects.put(f"{R}/.executor_status", b"SUCCESS\n", 10)
    objects.put(f"{R}/.executor_status", b"RUNNING\n", 11)  # a resubmitted step overwrote it since
    decision = _decide(objects, f"{R}/.executor_status", 10)
    assert objects.reads == [(f"gs://{BUCKET}/{R}/.executor_status", 10)]
    assert decision.event is not None
    event = decision.event
    assert (event.source, event.state, event.run_uri) == ("gcs", "SUCCESS", f"gs://{BUCKET}/{R}")
    assert event.job_id == f"gs://{BUCKET}/{R}/.executor_status#10"
    assert event.is_terminal and event.controller_state is None  # a hint: the artifacts are the evidence


def test_running_over_a_terminal_token_is_dropped_and_says_why() -> None:
    objects = Objects()
    objects.put(f"{R}/.executor_status", b"RUNNING\n", 11)
    decision = _decide(objects, f"{R}/.executor_status", 11, overwrote=10)
    assert decision.event is None
    assert "non-terminal token RUNNING over generation 10" in decision.reason


def test_legacy_json_lines_token_last_line_wins() -> None:
    objects = Objects()
    objects.put(f"{R}/.executor_status", b'{"status": "RUNNING"}\n{"status": "failed"}\n', 3)
    decision = _decide(objects, f"{R}/.executor_status", 3)
    assert decision.event is not None and decision.event.state == "FAILED"


def test_a_vanished_generation_is_dropped() -> None:
    decision = _decide(Objects(), f"{R}/.executor_status", 3)
    assert decision.event is None and "gone" in decision.reason


def test_terminal_manifest_waits_for_a_running_executor() -> None:
    objects = Objects()
    objects.put(f"{R}/terminal.json", b"{}", 4)
    objects.put(f"{R}/.executor_status", b"RUNNING", 2)
    waiting = _decide(objects, f"{R}/terminal.json", 4)
    assert waiting.event is None and ".executor_status reads RUNNING" in waiting.reason
    objects.put(f"{R}/.executor_status", b"SUCCESS", 5)
    done = _decide(objects, f"{R}/terminal.json", 4)
    assert done.event is not None and done.event.state == "SUCCESS"


def test_receipts_without_an_executor_are_run_ends() -> None:
    objects = Objects()
    decision = _decide(objects, f"{R}/receipts/0123456789ab.json", 4)
    assert decision.event is not None
    assert (decision.event.run_uri, decision.event.attempt_id) == (f"gs://{BUCKET}/{R}", "0123456789ab")
    export = _decide(objects, f"{R}/exports/receipts/fp.json", 5)
    assert export.event is not None and export.event.run_uri == f"gs://{BUCKET}/{R}"


def test_attempt_record_names_its_run_root() -> None:
    objects = Objects()
    name = "tmp/ttl=14d/skyrl/math-rl/2026.12.01/attempts/0123456789ab.json"
    record = {"request": {"output_path": f"gs://{BUCKET}/{R}/"}, "response": {"state": "failed"}}
    objects.put(name, json.dumps(record).encode(), 7)
    decision = _decide(objects, name, 7)
    assert decision.event is not None
    assert (decision.event.state, decision.event.run_uri) == ("FAILED", f"gs://{BUCKET}/{R}")
    assert decision.event.attempt_id == "0123456789ab"


def test_attempt_record_from_the_terminal_manifest_uri_and_nonterminal_states() -> None:
    objects = Objects()
    name = f"{R}/attempts/0123456789ab.json"
    manifest = {"response": {"state": "succeeded", "model": {"terminal_manifest_uri": f"gs://o/{R}/terminal.json"}}}
    objects.put(name, json.dumps(manifest).encode(), 1)
    assert (_decide(objects, name, 1).event or pytest.fail("no event")).run_uri == f"gs://o/{R}"
    objects.put(name, json.dumps({"response": {"state": "submitted"}}).encode(), 2)
    assert "not terminal" in _decide(objects, name, 2).reason


def test_attempt_record_in_a_temp_root_without_output_path_is_dropped() -> None:
    objects = Objects()
    name = "tmp/ttl=14d/skyrl/math-rl/2026.12.01/attempts/0123456789ab.json"
    objects.put(name, json.dumps({"response": {"state": "failed"}}).encode(), 7)
    decision = _decide(objects, name, 7)
    assert decision.event is None and "names no run root" in decision.reason


def test_redelivered_notification_gives_the_same_event_key() -> None:
    objects = Objects()
    objects.put(f"{R}/.executor_status", b"FAILED", 9)
    first = _decide(objects, f"{R}/.executor_status", 9).event
    again = _decide(objects, f"{R}/.executor_status", 9).event
    assert first is not None and again is not None and first.event_key == again.event_key


# ---------------------------------------------------------------- the handler


def _ports(tmp_path: Path, objects: Objects) -> tuple[Ports, list[JobEvent]]:
    bus = InProcessBus()
    seen: list[JobEvent] = []
    bus.subscribe("job-events", lambda data, attrs, mid: seen.append(JobEvent.model_validate_json(data)))
    ports = Ports(
        storage=objects,
        records=SqliteRunRecords(tmp_path / "r.db"),
        claims=SqliteIdempotencyStore(tmp_path / "r.db"),
        bus=bus,
    )  # type: ignore[arg-type]
    return ports, seen


@pytest.mark.parametrize("message", SHAPES)
def test_handler_publishes_once_per_generation(tmp_path: Path, message: Any) -> None:
    objects = Objects()
    objects.put(f"{R}/.executor_status", b"SUCCESS", 12)
    ports, seen = _ports(tmp_path, objects)
    data, attributes = message(f"{R}/.executor_status", 12)
    out = [dispatch(ports, "on_storage_event", "on-storage-event-dlq", data, attributes) for _ in range(3)]
    ports.bus.drain()  # type: ignore[attr-defined]
    assert out[0].startswith("published: terminal token SUCCESS")
    assert out[1:] == [f"duplicate: gs://{BUCKET}/{R}/.executor_status#12 already handled"] * 2
    assert [(e.source, e.state, e.run_uri) for e in seen] == [("gcs", "SUCCESS", f"gs://{BUCKET}/{R}")]


def test_handler_drops_heartbeats_without_reading(tmp_path: Path) -> None:
    objects = Objects()
    ports, seen = _ports(tmp_path, objects)
    for name in (f"{R}/.executor_status.lock", f"{R}/exports/global_step_1/policy/model.safetensors"):
        out = dispatch(ports, "on_storage_event", "on-storage-event-dlq", *fake_gcs_message(name, 3))
        assert out.startswith("dropped: ")
    deleted = dispatch(
        ports, "on_storage_event", "on-storage-event-dlq", *real_gcs_message(f"{R}/terminal.json", 3, "OBJECT_DELETE")
    )
    assert deleted.startswith("dropped: OBJECT_DELETE")
    assert objects.reads == [] and seen == []


def test_handler_dead_letters_a_bad_notification(tmp_path: Path) -> None:
    ports, _ = _ports(tmp_path, Objects())
    out = dispatch(ports, "on_storage_event", "on-storage-event-dlq", b"{}", {"eventType": "OBJECT_FINALIZE"})
    assert out == "permanent error recorded: bad_notification"
    dead = [m for m in ports.bus.published if m.topic == "on-storage-event-dlq"]  # type: ignore[attr-defined]
    assert len(dead) == 1 and dead[0].attributes["rlcleanup_error"] == "bad_notification"


def test_bad_notification_is_a_permanent_error() -> None:
    from rlcleanup.runtime.source_handlers import on_storage_event

    with pytest.raises(PermanentError):
        on_storage_event(None, b"", {})  # type: ignore[arg-type]
