"""Authority on the real emulators: GCS (fake-gcs-server) for copies and verification, Firestore for grants.

The handlers run in-process over the emulator adapters (the deployed functions are exercised by tests/e2e).
fake-gcs-server does not model bucket IAM: `GET /storage/v1/b/{bucket}/iam` answers 404 and buckets carry no
iamConfiguration. So against the emulator a publish is refused as `visibility_unknown` (tested below), and the
tests that need an IAM answer read it from a recorded GCS getIamPolicy response while every byte still moves
through the emulator.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.gcs_visibility import bucket_visibility
from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.authority import publish as publish_mod
from rlcleanup.authority.grants import Approver, Grant, new_key, public_b64, register_approver, sign
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.handlers import resolve_run_id
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.topology import load_topology
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.samples.v3 import write_model_manifest
from rlcleanup.settings import DeploymentSettings

pytestmark = pytest.mark.integration

# Shapes as GCS returns them (storage#policy); members per https://cloud.google.com/storage/docs/access-control/iam
# A new bucket's default bindings: every project viewer/editor can read it, so it is `internal`, not private.
DEFAULT_POLICY = [
    {"role": "roles/storage.legacyBucketOwner", "members": ["projectEditor:p", "projectOwner:p"]},
    {"role": "roles/storage.legacyBucketReader", "members": ["projectViewer:p"]},
]
PRIVATE_POLICY = [
    {"role": "roles/storage.legacyBucketOwner", "members": ["projectOwner:p"]},
    {"role": "roles/storage.objectAdmin", "members": ["serviceAccount:rlcleanup@p.iam.gserviceaccount.com"]},
]
PUBLIC_POLICY = [*DEFAULT_POLICY, {"role": "roles/storage.objectViewer", "members": ["allUsers"]}]


class RecordedIam:
    """The real emulator client, except that bucket IAM comes from a recorded policy."""

    def __init__(self, real: Any, bindings: list[dict[str, Any]], prevention: str = "inherited") -> None:
        self.real, self.bindings, self.prevention = real, bindings, prevention

    def get_bucket(self, name: str) -> Any:
        self.real.get_bucket(name)  # the bucket must really exist on the emulator
        bindings = self.bindings
        return SimpleNamespace(
            iam_configuration=SimpleNamespace(
                public_access_prevention=self.prevention, uniform_bucket_level_access_enabled=True
            ),
            get_iam_policy=lambda requested_policy_version=3: SimpleNamespace(bindings=bindings),
        )


NAME = "math-rl-selection-policy"


def _upload(gcs_client: Any, local_root: Path, bucket: str, uid: str) -> str:
    """Upload a sample run. Text has the local root rewritten (the run's own paths point into GCS) and the run
    name made unique (run ids key Firestore documents, shared by every test of the session)."""
    gs_root = f"gs://{bucket}/sample"
    b = gcs_client.bucket(bucket)
    for path in sorted(p for p in local_root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if not path.name.endswith((".safetensors", ".pt")):
            data = data.replace(str(local_root).encode(), gs_root.encode()).replace(
                NAME.encode(), f"{NAME}-{uid}".encode()
            )
        b.blob(f"sample/{str(path.relative_to(local_root)).replace(NAME, f'{NAME}-{uid}')}").upload_from_string(data)
    return gs_root


@pytest.fixture
def world(stack: Any, gcs_client: Any, firestore_client: Any, uid: str, tmp_path: Path) -> SimpleNamespace:
    return _world(stack, gcs_client, firestore_client, uid, tmp_path)


@pytest.fixture
def manifest_world(stack: Any, gcs_client: Any, firestore_client: Any, uid: str, tmp_path: Path) -> SimpleNamespace:
    """The same run, its step-40 export carrying the model manifest MarinSkyRL writes (samples/v3.py)."""
    return _world(stack, gcs_client, firestore_client, uid, tmp_path, manifest_step=40)


def _world(
    stack: Any, gcs_client: Any, firestore_client: Any, uid: str, tmp_path: Path, manifest_step: int | None = None
) -> SimpleNamespace:
    runs, dest = f"auth-runs-{uid}", f"auth-dest-{uid}"
    gcs_client.create_bucket(runs)
    gcs_client.create_bucket(dest)
    local = tmp_path / "sample"
    run_root = write_sample_run(local, "selection-policy")
    if manifest_step is not None:  # the export's files hold neither the local root nor the run name: uploaded as is
        write_model_manifest(
            next(run_root.glob(f"**/global_step_{manifest_step}/policy")), model_id="o/m", revision="r"
        )
    gs_root = _upload(gcs_client, local, runs, uid)
    bus = InProcessBus()
    records, claims = firestore_stores(project=stack.project, client=firestore_client)
    ports = Ports(
        storage=RoutingStorage({"gs": GcsStorage(gcs_client)}),
        records=records,
        claims=claims,
        bus=bus,
        settings=DeploymentSettings.model_construct(preserve_root=f"gs://{runs}/preserved"),
    )
    emb = EmbeddedStack(ports=ports, bus=bus)
    for fn in load_topology().functions:  # every function has its stage table row
        bus.subscribe(fn.trigger, emb._handler(fn))
    run_uri = gs_root + "/" + str(run_root.relative_to(local)).replace(NAME, f"{NAME}-{uid}")
    event = manual_event(run_uri)
    emb.emit(event)
    run_id = resolve_run_id(ports, event)
    record = ports.records.get(run_id)
    assert record is not None and record.status.value == "awaiting_authority", record
    key = new_key()
    approver = Approver(
        approver_id=f"alice-{uid}", public_key=public_b64(key), allowed_prefixes=[f"gs://{dest}/models"]
    )
    register_approver(ports.records, approver)
    return SimpleNamespace(
        emb=emb, ports=ports, run_id=run_id, key=key, dest=dest, runs=runs, approver=approver.approver_id
    )


def _grant(w: SimpleNamespace, action: str = "publish", visibility: str = "private") -> Grant:
    record = w.ports.records.get(w.run_id)
    cand = next(c for c in record.candidates if c.step == 40)
    now = datetime.now(UTC)
    return Grant(
        run_id=w.run_id, action=action, step=40, digest=cand.digest, destination=f"gs://{w.dest}/models/m40",
        visibility=visibility, granted_by=w.approver, granted_at=now, expires_at=now + timedelta(hours=1),
    )  # fmt: skip


def _deliver(w: SimpleNamespace, grant: Grant) -> None:
    w.emb.bus.publish("authority-grants", json.dumps(sign(grant, w.key)).encode(), {})
    w.emb.bus.drain()


def _doc(w: SimpleNamespace, grant: Grant) -> dict[str, Any]:
    doc = w.ports.records.get_doc(f"runs/{w.run_id}/grants", grant.grant_id)
    assert doc is not None
    return doc


def _dest_objects(gcs_client: Any, bucket: str) -> list[str]:
    return [b.name for b in gcs_client.list_blobs(bucket)]


def test_fake_gcs_cannot_answer_iam_so_publish_is_refused(world: SimpleNamespace, gcs_client: Any) -> None:
    reading = bucket_visibility(f"gs://{world.dest}/models", gcs_client)
    assert reading.visibility is None and "404" in reading.evidence  # the emulator has no IAM endpoint
    grant = _grant(world)
    _deliver(world, grant)
    doc = _doc(world, grant)
    assert doc["state"] == "refused" and doc["refusal"] == "visibility_unknown"
    assert _dest_objects(gcs_client, world.dest) == []


def test_public_gcs_destination_under_private_grant_is_refused(
    world: SimpleNamespace, gcs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        publish_mod,
        "read_visibility",
        lambda _storage, uri: bucket_visibility(uri, RecordedIam(gcs_client, PUBLIC_POLICY)),
    )
    grant = _grant(world, visibility="private")
    _deliver(world, grant)
    doc = _doc(world, grant)
    assert doc["refusal"] == "visibility_broader" and "allUsers" in doc["detail"]
    assert _dest_objects(gcs_client, world.dest) == []


def test_default_bucket_bindings_read_internal_so_a_private_grant_is_refused(
    world: SimpleNamespace, gcs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        publish_mod,
        "read_visibility",
        lambda _storage, uri: bucket_visibility(uri, RecordedIam(gcs_client, DEFAULT_POLICY, "enforced")),
    )
    grant = _grant(world, visibility="private")
    _deliver(world, grant)
    doc = _doc(world, grant)
    assert doc["refusal"] == "visibility_broader" and "projectViewer:p" in doc["detail"], doc
    assert _dest_objects(gcs_client, world.dest) == []


def test_gcs_publish_server_side_copy_verified_and_grant_in_firestore(
    world: SimpleNamespace, gcs_client: Any, firestore_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        publish_mod,
        "read_visibility",
        lambda _storage, uri: bucket_visibility(uri, RecordedIam(gcs_client, PRIVATE_POLICY, "enforced")),
    )
    storage = world.ports.storage
    streamed: list[str] = []
    real_write = storage.backend("gs").write_if_absent

    def spy_write(uri: str, data: bytes, content_type: str = "application/octet-stream"):  # type: ignore[no-untyped-def]
        streamed.append(uri)
        return real_write(uri, data, content_type)

    monkeypatch.setattr(storage.backend("gs"), "write_if_absent", spy_write)
    grant = _grant(world)
    _deliver(world, grant)

    doc = _doc(world, grant)
    assert doc["state"] == "used" and doc["outcome"]["state"] == "published", doc
    # Only provenance (into the private staging area) and the marker are written by this process; every artifact
    # object, and the scanned provenance itself, reached the destination as a generation-pinned server-side rewrite.
    assert sorted(u.rsplit("/", 1)[-1] for u in streamed if "/models/" in u) == ["_PUBLISHED.json"]
    assert [u.rsplit("/", 1)[-1] for u in streamed if "/authority/staging/" in u] == ["provenance.json"]
    assert not [b.name for b in gcs_client.list_blobs(world.runs) if "/authority/staging/" in b.name]
    bucket = gcs_client.bucket(world.dest)
    prov = json.loads(bucket.blob("models/m40/provenance.json").download_as_bytes())
    for row in prov["manifest"]:
        blob = bucket.get_blob(f"models/m40/{row['name']}")
        assert blob is not None and blob.size == row["size"] and blob.crc32c == row["crc32c"]
    assert bucket.get_blob("models/m40/_PUBLISHED.json") is not None

    # The grant lives in Firestore at runs/{run_id}/grants/{grant_id}; the record summarizes it.
    snap = (
        firestore_client.collection("runs").document(world.run_id).collection("grants").document(grant.grant_id).get()
    )
    assert snap.exists and snap.to_dict()["state"] == "used"
    record = world.ports.records.get(world.run_id)
    assert [(a.action, a.state) for a in record.authority_actions] == [("publish", "published")]
    assert record.authority_actions[0].verified_objects == len(prov["manifest"])

    _deliver(world, grant)  # replayed: refused and recorded, nothing copied again
    record = world.ports.records.get(world.run_id)
    assert [(a.state, a.refusal) for a in record.authority_actions] == [("published", None), ("refused", "replayed")]


def test_gcs_publish_of_a_manifested_export_states_which_sha256_it_did_not_check(
    manifest_world: SimpleNamespace, gcs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34 item 7 on GCS: the generation-pinned server-side rewrite sees no byte, so no sha256 exists to hold
    against the model manifest. The publish is not slowed to stream the export; the outcome says so explicitly:
    the manifest's identity, each file whose sha256 was not checked, and that sizes and CRC32C matched."""
    w = manifest_world
    monkeypatch.setattr(
        publish_mod,
        "read_visibility",
        lambda _storage, uri: bucket_visibility(uri, RecordedIam(gcs_client, PRIVATE_POLICY, "enforced")),
    )
    record = w.ports.records.get(w.run_id)
    cand = next(c for c in record.candidates if c.step == 40)
    assert cand.valid and cand.model_identity is not None, cand.problems
    grant = _grant(w)
    _deliver(w, grant)
    doc = _doc(w, grant)
    assert doc["state"] == "used" and doc["outcome"]["state"] == "published", doc
    said = doc["outcome"]["model_manifest"]
    assert said["identity"] == cand.model_identity and said["sha256_verified"] == []
    assert "model-00001-of-00003.safetensors" in said["sha256_not_checked"] and len(said["sha256_not_checked"]) == 9
    assert "sha256 not checked for 9 file(s)" in doc["outcome"]["detail"]
    assert (
        "sizes matched the manifest and the server copied exactly the pinned source version" in doc["outcome"]["detail"]
    )
    bucket = gcs_client.bucket(w.dest)
    assert bucket.get_blob("models/m40/_PUBLISHED.json") is not None


def test_gcs_shard_rewritten_with_identical_bytes_after_approval_is_refused(
    world: SimpleNamespace, gcs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P1 on GCS: the grant pins generations. Re-uploading the very same bytes (same size, CRC32C and MD5) makes a
    new generation, so the grant no longer covers it: nothing reaches the destination."""
    monkeypatch.setattr(
        publish_mod,
        "read_visibility",
        lambda _storage, uri: bucket_visibility(uri, RecordedIam(gcs_client, PRIVATE_POLICY, "enforced")),
    )
    grant = _grant(world)
    record = world.ports.records.get(world.run_id)
    cand = next(c for c in record.candidates if c.step == 40)
    bucket_name, prefix = cand.uri.removeprefix("gs://").split("/", 1)
    blob = gcs_client.bucket(bucket_name).get_blob(f"{prefix}/model-00002-of-00003.safetensors")
    data = blob.download_as_bytes()
    old_generation = blob.generation
    gcs_client.bucket(bucket_name).blob(blob.name).upload_from_string(data)  # same bytes, new generation
    fresh = gcs_client.bucket(bucket_name).get_blob(blob.name)
    assert fresh.generation != old_generation and fresh.crc32c == blob.crc32c and fresh.md5_hash == blob.md5_hash
    _deliver(world, grant)
    doc = _doc(world, grant)
    assert doc["state"] == "refused" and doc["refusal"] == "wrong_digest", doc
    assert _dest_objects(gcs_client, world.dest) == []
    assert not [b.name for b in gcs_client.list_blobs(world.runs) if "/authority/staging/" in b.name]


def test_gcs_reclaim_deletes_only_twin_verified_generations(
    world: SimpleNamespace, gcs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P2 on GCS: publish, then overwrite one destination twin (new generation, same bytes): reclaim stops at it
    and keeps that source; the plan lives in Firestore, not in a bucket."""
    monkeypatch.setattr(
        publish_mod,
        "read_visibility",
        lambda _storage, uri: bucket_visibility(uri, RecordedIam(gcs_client, PRIVATE_POLICY, "enforced")),
    )
    _deliver(world, _grant(world))
    dest = gcs_client.bucket(world.dest)
    twin = dest.get_blob("models/m40/model-00003-of-00003.safetensors")
    dest.blob(twin.name).upload_from_string(twin.download_as_bytes())  # same bytes, another generation
    reclaim = _grant(world, "reclaim")
    _deliver(world, reclaim)
    doc = _doc(world, reclaim)
    assert doc["refusal"] == "destination_altered" and "generation" in doc["detail"], doc
    record = world.ports.records.get(world.run_id)
    cand = next(c for c in record.candidates if c.step == 40)
    bucket_name, prefix = cand.uri.removeprefix("gs://").split("/", 1)
    assert gcs_client.bucket(bucket_name).get_blob(f"{prefix}/model-00003-of-00003.safetensors") is not None
    plan = world.ports.records.get_doc(f"runs/{world.run_id}/reclaim_plans", reclaim.grant_id)
    assert plan is None or all(d["uri"].startswith(cand.uri + "/") for d in plan["delete"])


def test_every_preview_renders_on_a_gcs_run(
    world: SimpleNamespace, gcs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38 item 3 on GCS (fake-gcs): publish, hand-off, register, cancel, then (after the publish) reclaim,
    text and JSON (a cancel of the ended run refused, as its grant is); fake-gcs has no IAM endpoint, so the destination's bindings are read from a recorded policy."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # the authority tests' helpers
    from authority_support import rendered_preview

    from rlcleanup.authority.preview import preview_grant

    monkeypatch.setattr(
        publish_mod,
        "read_visibility",
        lambda _storage, uri: bucket_visibility(uri, RecordedIam(gcs_client, PRIVATE_POLICY, "enforced")),
    )
    record = world.ports.records.get(world.run_id)
    for action in ("publish", "handoff", "register"):
        preview = rendered_preview(world.ports.storage, world.ports.records, record, _grant(world, action))
        assert action not in ("publish", "handoff") or all(o["crc32c"] for o in preview["objects"])
    # A cancel of a run whose end was observed is refused in the preview exactly as the grant would (issue 47)
    cancel = preview_grant(world.ports.storage, record, _grant(world, "cancel"), datetime.now(UTC), world.ports.records)
    assert cancel["would"] == "refuse" and cancel["refusal"] == "run_ended", cancel
    assert _dest_objects(gcs_client, world.dest) == []
    _deliver(world, _grant(world))
    preview = rendered_preview(world.ports.storage, world.ports.records, record, _grant(world, "reclaim"))
    assert preview["delete"] and all(d["uri"].startswith(f"gs://{world.runs}/") for d in preview["delete"])


def test_a_revoked_approver_on_firestore_keeps_its_used_grant_and_loses_its_pending_one(
    world: SimpleNamespace, gcs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P37 on Firestore, through the CLI (`approver revoke`, `approver list`, `grants` with --json)."""
    from typer.testing import CliRunner

    from rlcleanup.cli.main import app

    private = RecordedIam(gcs_client, PRIVATE_POLICY, "enforced")
    monkeypatch.setattr(publish_mod, "read_visibility", lambda _storage, uri: bucket_visibility(uri, private))
    cli = CliRunner()
    used = _grant(world)
    _deliver(world, used)
    assert _doc(world, used)["outcome"]["state"] == "published"
    world.ports.records.update(world.run_id, {"status": "in_progress"})  # the next grant waits for its record
    waiting = _grant(world, action="reclaim")
    _deliver(world, waiting)
    assert _doc(world, waiting)["state"] == "pending"

    result = cli.invoke(app, ["approver", "revoke", world.approver, "--by", "sec", "--reason", "key leaked", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["revoked_by"] == "sec"
    listed = json.loads(cli.invoke(app, ["approver", "list", "--json"]).stdout)
    (mine,) = [a for a in listed if a["approver_id"] == world.approver]
    assert mine["revoked_by"] == "sec" and mine["revoked_reason"] == "key leaked" and mine["revoked_at"]

    world.ports.records.update(world.run_id, {"status": "awaiting_authority"})
    world.emb.bus.publish("record-ready", json.dumps({"run_id": world.run_id}).encode(), {"run_id": world.run_id})
    world.emb.bus.drain()
    assert (_doc(world, waiting)["state"], _doc(world, waiting)["refusal"]) == ("refused", "approver_revoked")
    fresh = _grant(world, action="reclaim")  # signed anew with the revoked key: refused on arrival
    _deliver(world, fresh)
    assert _doc(world, fresh)["refusal"] == "approver_revoked"
    rows = json.loads(cli.invoke(app, ["grants", world.run_id, "--json"]).stdout)
    assert [(r["grant_id"], r["state"], r["refusal"]) for r in rows] == [
        (used.grant_id, "used", None),
        (waiting.grant_id, "refused", "approver_revoked"),
        (fresh.grant_id, "refused", "approver_revoked"),
    ]
    assert all("sec" in r["approver_revoked"] for r in rows)
    record = world.ports.records.get(world.run_id)
    assert (record.authority_actions[0].action, record.authority_actions[0].state) == ("publish", "published")
    assert gcs_client.bucket(world.dest).get_blob("models/m40/_PUBLISHED.json") is not None
