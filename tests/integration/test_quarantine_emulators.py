"""Issue 40 item 3 on the real servers: reclaim moves into the quarantine of the same bucket, `restore` gives every
object back byte-exact (CRC32C/MD5 as the server reports them; on GCS generation-pinned), a purge without its
grant is refused, and the quarantine's expiry removes only quarantined objects. GCS on fake-gcs-server (the
publish's bucket IAM read from a recorded policy, as in test_authority_emulators), S3 on SeaweedFS."""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # the authority tests' World
from test_authority_emulators import PRIVATE_POLICY, RecordedIam, _deliver, _doc, _grant, _world

from rlcleanup.adapters.gcs_visibility import bucket_visibility
from rlcleanup.authority import ledger, quarantine
from rlcleanup.authority import publish as publish_mod
from rlcleanup.authority.grants import new_key, sign
from rlcleanup.settings import QuarantineSettings

pytestmark = pytest.mark.integration

SETTINGS = QuarantineSettings()
PREFIX = f"{SETTINGS.prefix}/"


def _gcs_sums(gcs_client: Any, bucket: str, prefix: str) -> dict[str, tuple[str, str, bytes]]:
    """name → (crc32c, md5, bytes) as fake-gcs-server reports and serves them."""
    return {b.name: (b.crc32c, b.md5_hash, b.download_as_bytes()) for b in gcs_client.list_blobs(bucket, prefix=prefix)}


def _refusals(records: Any, run_id: str, grant_id: str) -> list[str]:
    """The refusals filed for a grant (a forged one is filed under its own document, not the grant id)."""
    return [d.refusal for _g, d in ledger.list_grants(records, run_id) if d.body.get("grant_id") == grant_id]


def _restore(ports: Any, run_id: str, now: datetime | None = None) -> quarantine.RestoreResult:
    record = ports.records.get(run_id)
    return quarantine.restore(ports.storage, ports.records, record, now or datetime.now(UTC), SETTINGS)


def test_gcs_reclaim_quarantines_restores_generation_pinned_purges_under_grant_and_expires(
    stack: Any, gcs_client: Any, firestore_client: Any, uid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        publish_mod,
        "read_visibility",
        lambda _storage, uri: bucket_visibility(uri, RecordedIam(gcs_client, PRIVATE_POLICY, "enforced")),
    )
    w = _world(stack, gcs_client, firestore_client, uid, tmp_path)
    publish = _grant(w)
    _deliver(w, publish)
    assert _doc(w, publish)["state"] == "used", _doc(w, publish)
    cand = next(c for c in w.ports.records.get(w.run_id).candidates if c.step == 40)
    export_prefix = cand.uri.removeprefix(f"gs://{w.runs}/") + "/"
    before = _gcs_sums(gcs_client, w.runs, export_prefix)
    assert before

    reclaim = _grant(w, "reclaim")
    _deliver(w, reclaim)
    assert _doc(w, reclaim)["state"] == "used", _doc(w, reclaim)
    assert _gcs_sums(gcs_client, w.runs, export_prefix) == {}  # moved out of the run
    held_prefix = f"{PREFIX}{w.run_id}/{reclaim.grant_id}/"
    held = _gcs_sums(gcs_client, w.runs, held_prefix)
    assert {name.removeprefix(held_prefix): sums for name, sums in held.items()} == before  # same bucket, same sums

    # A purge signed by no approver's key is refused, and a reclaim grant delivered again never purges.
    forged = _grant(w, "purge")
    w.emb.bus.publish("authority-grants", json.dumps(sign(forged, new_key())).encode(), {})
    w.emb.bus.drain()
    assert _refusals(w.ports.records, w.run_id, forged.grant_id) in (["unknown_approver"], ["bad_signature"])
    _deliver(w, reclaim)
    assert _gcs_sums(gcs_client, w.runs, held_prefix) == held

    # Generation pin: one quarantined object rewritten with the very same bytes is a new generation, not the
    # version the reclaim moved: restore refuses it and gives every other object back with its CRC32C and MD5.
    rewritten = sorted(held)[0]
    gcs_client.bucket(w.runs).blob(rewritten).upload_from_string(held[rewritten][2])
    result = _restore(w.ports, w.run_id)
    assert len(result.refused) == 1 and "generation" in result.refused[0], result
    restored_names = {u.removeprefix(f"gs://{w.runs}/") for u in result.restored}
    assert restored_names == set(before) - {rewritten.removeprefix(held_prefix)}
    now_in_run = _gcs_sums(gcs_client, w.runs, export_prefix)
    assert {n: now_in_run[n] for n in restored_names} == {n: before[n] for n in restored_names}
    assert set(_gcs_sums(gcs_client, w.runs, held_prefix)) == {rewritten}  # only the refused one is still held

    # The approver's purge grant deletes exactly what is still quarantined for (step, digest), nothing else.
    purge = _grant(w, "purge")
    _deliver(w, purge)
    assert _doc(w, purge)["state"] == "used", _doc(w, purge)
    assert _gcs_sums(gcs_client, w.runs, PREFIX) == {}
    assert _gcs_sums(gcs_client, w.runs, export_prefix) == {n: before[n] for n in restored_names}

    # Expiry (the lifecycle rule's job on a real bucket; `quarantine-expire` where there is none): a second
    # reclaim's quarantine goes once its days have passed; the run, and a look-alike prefix, stay.
    bucket = gcs_client.bucket(w.runs)
    bucket.blob(f"{SETTINGS.prefix}-other/keep.bin").upload_from_string(b"not quarantine")
    bucket.blob(f"sample/{PREFIX}not-at-the-root.bin").upload_from_string(b"a run's own file")
    run_before = {b.name for b in gcs_client.list_blobs(w.runs) if not b.name.startswith(PREFIX)}
    storage = w.ports.storage
    assert quarantine.expire(storage, f"gs://{w.runs}", SETTINGS, datetime.now(UTC)) == []
    bucket.blob(f"{PREFIX}{w.run_id}/g-old/x.bin").upload_from_string(b"moved a week ago")
    gone = quarantine.expire(storage, f"gs://{w.runs}", SETTINGS, datetime.now(UTC) + timedelta(days=SETTINGS.days))
    assert gone == [f"gs://{w.runs}/{PREFIX}{w.run_id}/g-old/x.bin"]
    assert {b.name for b in gcs_client.list_blobs(w.runs)} == run_before


def _s3_sums(s3_admin: Any, bucket: str, prefix: str) -> dict[str, tuple[str, str, bytes]]:
    """key → (ETag, MD5 of the bytes served, bytes): a single-part object's ETag is its MD5."""
    found = {}
    for page in s3_admin.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents") or []:
            data = s3_admin.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            found[obj["Key"]] = (obj["ETag"].strip('"'), hashlib.md5(data, usedforsecurity=False).hexdigest(), data)
    return found


def test_s3_reclaim_quarantines_restores_byte_exact_purges_under_grant_and_expires(
    s3_admin: Any, tmp_path: Path, uid: str
) -> None:
    from test_s3_authority import _s3_world

    bucket = f"s3-quar-{uid}"
    s3_admin.create_bucket(Bucket=bucket)
    w = _s3_world(tmp_path, bucket)
    w.deliver(w.message(w.grant()))
    cand = w.candidate(40)
    export_prefix = cand.uri.removeprefix(f"s3://{bucket}/") + "/"
    before = _s3_sums(s3_admin, bucket, export_prefix)
    assert before and all(etag == md5 for etag, md5, _ in before.values())

    reclaim = w.grant("reclaim")
    w.deliver(w.message(reclaim))
    assert w.action(reclaim.grant_id)["state"] == "reclaimed", w.action(reclaim.grant_id)
    assert _s3_sums(s3_admin, bucket, export_prefix) == {}
    held_prefix = f"{PREFIX}{w.run_id}/{reclaim.grant_id}/"
    held = _s3_sums(s3_admin, bucket, held_prefix)
    assert {k.removeprefix(held_prefix): v for k, v in held.items()} == before

    forged = w.grant("purge")
    w.deliver(w.message(forged, key=new_key()))
    refusals = _refusals(w.stack.ports.records, w.run_id, forged.grant_id)
    assert refusals in (["unknown_approver"], ["bad_signature"]), refusals
    assert _s3_sums(s3_admin, bucket, held_prefix) == held

    result = _restore(w.stack.ports, w.run_id)
    assert not result.refused and len(result.restored) == len(before), result
    assert _s3_sums(s3_admin, bucket, export_prefix) == before  # every byte, ETag and MD5 as before
    assert _s3_sums(s3_admin, bucket, PREFIX) == {}

    # A restore writes new versions with the same bytes and records the version it put back beside the validated
    # one (issue 47 item 5): a new reclaim grant of the validated digest is accepted on those restored versions and
    # quarantines the same bytes again; a second restore gives them back.
    again = w.grant("reclaim")
    w.deliver(w.message(again))
    assert w.action(again.grant_id)["state"] == "reclaimed", w.action(again.grant_id)
    assert _s3_sums(s3_admin, bucket, export_prefix) == {}
    again_prefix = f"{PREFIX}{w.run_id}/{again.grant_id}/"
    assert {k.removeprefix(again_prefix): v for k, v in _s3_sums(s3_admin, bucket, again_prefix).items()} == before
    result = _restore(w.stack.ports, w.run_id)
    assert not result.refused and len(result.restored) == len(before), result
    assert _s3_sums(s3_admin, bucket, export_prefix) == before

    s3_admin.put_object(Bucket=bucket, Key=f"{PREFIX}{w.run_id}/g-old/x.bin", Body=b"moved a week ago")
    s3_admin.put_object(Bucket=bucket, Key=f"{SETTINGS.prefix}-other/keep.bin", Body=b"not quarantine")
    kept = set(_s3_sums(s3_admin, bucket, "")) - {f"{PREFIX}{w.run_id}/g-old/x.bin"}
    storage = w.stack.ports.storage
    assert quarantine.expire(storage, f"s3://{bucket}", SETTINGS, datetime.now(UTC)) == []
    gone = quarantine.expire(storage, f"s3://{bucket}", SETTINGS, datetime.now(UTC) + timedelta(days=SETTINGS.days))
    assert gone == [f"s3://{bucket}/{PREFIX}{w.run_id}/g-old/x.bin"]
    assert set(_s3_sums(s3_admin, bucket, "")) == kept


def _uploads(s3_admin: Any, bucket: str) -> dict[str, str]:
    """key → upload id of the incomplete multipart uploads the server holds in `bucket`."""
    return {u["Key"]: u["UploadId"] for u in s3_admin.list_multipart_uploads(Bucket=bucket).get("Uploads") or []}


def test_s3_incomplete_uploads_are_listed_in_preview_and_ledger_and_aborted_only_by_reclaim(
    s3_admin: Any, tmp_path: Path, uid: str
) -> None:
    """Issue 36 item 3 / issue 40 item 4 on SeaweedFS: an interrupted upload (CreateMultipartUpload + UploadPart, no
    Complete) under the granted export and one under the run's checkpoints: both counted on the record and shown in
    the reclaim preview (count, bytes, age); a preview and a publish abort nothing; the reclaim grant aborts only
    the one under its export."""
    from authority_support import rendered_preview
    from test_s3_authority import _s3_world

    from rlcleanup.authority import storage_ledger
    from rlcleanup.cli.preview_text import render_preview

    bucket = f"s3-mpu-{uid}"
    s3_admin.create_bucket(Bucket=bucket)
    w = _s3_world(tmp_path, bucket)
    export_key = w.candidate(40).uri.removeprefix(f"s3://{bucket}/") + "/model-00009-of-00009.safetensors"
    other_key = w.run_uri.removeprefix(f"s3://{bucket}/") + "/checkpoints/global_step_50/interrupted.distcp"
    sizes = {export_key: 300_000, other_key: 123_456}
    for key, size in sizes.items():
        upload_id = s3_admin.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        s3_admin.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=b"\x01" * size)
    started = _uploads(s3_admin, bucket)
    assert set(started) == set(sizes)

    ports = w.stack.ports
    measured = storage_ledger.measure(ports.storage, w.record, "test", datetime.now(UTC))
    ledger = storage_ledger.record_ledger(ports.records, w.record.run_id, measured)
    uploads = next(c for c in ledger.classes if c.name == "incomplete_uploads")
    assert (uploads.objects, uploads.bytes) == (2, sum(sizes.values()))
    assert (w.record.incomplete_uploads, w.record.incomplete_upload_bytes) == (2, sum(sizes.values()))

    publish = w.grant()
    w.deliver(w.message(publish))
    assert w.action(publish.grant_id)["state"] == "published"
    assert _uploads(s3_admin, bucket) == started  # a publish never aborts

    reclaim = w.grant("reclaim")
    preview = rendered_preview(ports.storage, ports.records, w.record, reclaim)
    listed = {u["key_uri"].removeprefix(f"s3://{bucket}/"): u for u in preview["incomplete_uploads"]}
    assert {k: (u["bytes"], u["parts"], u["abort"]) for k, u in listed.items()} == {
        export_key: (sizes[export_key], 1, True),
        other_key: (sizes[other_key], 1, False),
    }
    assert all(datetime.now(UTC) - datetime.fromisoformat(u["initiated"]) < timedelta(hours=1) for u in listed.values())
    text = render_preview(json.loads(json.dumps(preview)))
    assert f"incomplete uploads: 2, {sum(sizes.values())} B" in text, text
    assert f"aborts incomplete upload s3://{bucket}/{export_key} (1 parts, {sizes[export_key]} B, started" in text
    assert f"lists incomplete upload s3://{bucket}/{other_key} (1 parts, {sizes[other_key]} B, started" in text
    assert " h ago)" in text
    assert _uploads(s3_admin, bucket) == started  # a preview never aborts

    w.deliver(w.message(reclaim))
    done = w.action(reclaim.grant_id)
    assert done["state"] == "reclaimed", done
    assert _uploads(s3_admin, bucket) == {other_key: started[other_key]}  # only the granted export's upload
    after = w.record.storage_ledger
    assert after is not None and after.label == f"after reclaim {reclaim.grant_id}"
    assert (w.record.incomplete_uploads, w.record.incomplete_upload_bytes) == (1, sizes[other_key])
