"""A grant's copies on S3 stay server-side and pinned (issue 36 item 1, docs/authority.md P36; a preserve grant's
too, issue 49).

An S3 run preserved to S3 and published to an S3 bucket of the same endpoint: every pinned copy (source ->
staging -> destination) is a CopyObject or UploadPartCopy conditioned on the pinned ETag, so no shard byte passes
through the process (counted per object by tests/servers/s3_fault_proxy.py), and a source overwritten after the
pin was checked is refused by the server: the grant is `source_changed`, nothing is left at the destination and no
incomplete upload keeps bytes. The multipart path runs with its threshold lowered by its setting
(RLCLEANUP_COPY_S3_MULTIPART_THRESHOLD), as tests/integration/test_large_copies.py does.

S3 has no visibility read-back (adapters/storage_registry.py), so a publish to s3:// reads `unknown` and is
refused; as the GCS emulator tests do for IAM, the reading is stood in for (a private bucket) so the copies run."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # the authority tests' World
from authority_support import World

import rlcleanup.authority.preserve as preserve_mod
import rlcleanup.authority.publish as publish_mod
from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.authority.grants import Approver, new_key, public_b64, register_approver
from rlcleanup.authority.preserve import checkpoint_of, preserve_target
from rlcleanup.formats.safetensors_header import DEFAULT_FIRST_BLOCK
from rlcleanup.models.vocab import Visibility
from rlcleanup.ports.storage import ObjectInfo, SourceChangedError, VisibilityReading, WriteOutcome
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.handlers import resolve_run_id
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.samples.upload import upload_sample_run_to
from rlcleanup.settings import MIB
from rlcleanup.stack import s3_server
from servers import s3_fault_proxy

pytestmark = pytest.mark.integration
_stats = s3_fault_proxy.stats


@pytest.fixture
def proxy(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every S3 request of the process under test through the counting proxy."""
    (tmp_path / "proxy").mkdir()
    with s3_fault_proxy.running(s3_endpoint, tmp_path / "proxy") as url:
        for name, value in s3_server.client_env(url).items():
            monkeypatch.setenv(name, value)
        yield url


def _private_bucket(_storage: Any, uri: str) -> VisibilityReading:
    return VisibilityReading(Visibility.private, f"{uri}: a SeaweedFS bucket with no policy (test stand-in)")


def _world(
    tmp: Path, s3_admin: Any, uid: str, monkeypatch: pytest.MonkeyPatch, sample: str = "selection-policy"
) -> tuple[World, str, str]:
    """An S3 run of `sample` whose evidence (and so a publish's staging) is preserved to S3, and a second bucket
    of the same endpoint that alice may grant a copy to (a publish's or a preserve's destination); returns the
    world, the run bucket and that destination bucket. Both grants' visibility readings are stood in for."""
    bucket, destination = f"s3-pin-{uid}", f"s3-dst-{uid}"
    s3_admin.create_bucket(Bucket=bucket)
    s3_admin.create_bucket(Bucket=destination)
    monkeypatch.setattr(publish_mod, "read_visibility", _private_bucket)
    monkeypatch.setattr(preserve_mod, "read_visibility", _private_bucket)
    write_sample_run(tmp / "sample", sample)
    run_uri = upload_sample_run_to(S3Storage(), tmp / "sample", f"s3://{bucket}/iris/job")
    stack = EmbeddedStack.create(tmp / "records.db", f"s3://{bucket}/preserved")
    key = new_key()
    register_approver(
        stack.ports.records,
        Approver(approver_id="alice", public_key=public_b64(key), allowed_prefixes=[f"s3://{destination}"]),
    )
    event = manual_event(run_uri)
    stack.emit(event)
    world = World(stack, run_uri, resolve_run_id(stack.ports, event), key, tmp / "unused", tmp)
    assert world.record.preserved_locations[0].startswith(f"s3://{bucket}/preserved"), world.record
    return world, bucket, destination


def _keys(s3_admin: Any, bucket: str, prefix: str) -> list[str]:
    return [o["Key"] for o in s3_admin.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def _shards(storage: S3Storage, export_uri: str) -> dict[str, ObjectInfo]:
    return {o.uri.rsplit("/", 1)[-1]: o for o in storage.list(export_uri) if o.uri.endswith(".safetensors")}


def _header_bytes(s3_admin: Any, info: ObjectInfo) -> int:
    """A safetensors file's 8-byte length and JSON header: all a secret scan or validation reads of it."""
    bucket, key = info.uri.removeprefix("s3://").split("/", 1)
    head = s3_admin.get_object(Bucket=bucket, Key=key, Range="bytes=0-7")["Body"].read()
    return 8 + int.from_bytes(head, "little")


def _only_the_scans_header_read(through: dict[str, int], name: str, header: int) -> None:
    """No byte of the shard's source or destination went through the process (the copies are server-side); of
    its staged copy, only what the secret scan reads of any safetensors file (the first block, then the header
    it names), a bound whatever the shard's size: a 10 GiB shard costs the same."""
    staged = {p: n for p, n in through.items() if "/authority/staging/" in p}
    assert through == staged, (name, through)  # the source's and destination's keys: 0 bytes
    assert sum(staged.values()) <= DEFAULT_FIRST_BLOCK + header, (name, staged, header)


def _publish(w: World, published: str) -> tuple[dict[str, Any], str]:
    destination = f"s3://{published}/models/m"
    grant = w.grant(destination=destination)
    w.deliver(w.message(grant))
    return w.action(grant.grant_id), destination


def test_an_s3_to_s3_publish_moves_no_shard_byte_through_the_process(
    s3_admin: Any, proxy: str, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, _, published = _world(tmp_path, s3_admin, uid, monkeypatch)
    cand = w.candidate()
    storage = S3Storage()
    shards = _shards(storage, cand.uri)
    assert len(shards) == 3 and max(o.size for o in shards.values()) > 2 * DEFAULT_FIRST_BLOCK  # whole: seen
    before = _stats(proxy)["object_bodies"]

    action, destination = _publish(w, published)

    assert action["state"] == "published", action
    moved = {p: n - before.get(p, 0) for p, n in _stats(proxy)["object_bodies"].items() if n != before.get(p, 0)}
    for name, src in shards.items():
        # The shard's bytes at its source, its staged copy and its destination: only its header was ever read
        # (validation and the secret scan), never the tensors; the copies moved none of them.
        through = {p: n for p, n in moved.items() if p.endswith(f"/{name}")}
        _only_the_scans_header_read(through, name, _header_bytes(s3_admin, src))
        dst = storage.stat(f"{destination}/{name}")
        assert dst is not None and dst.size == src.size and dst.etag == src.etag  # a CopyObject of a single part
    assert s3_admin.get_object(Bucket=published, Key="models/m/_PUBLISHED.json")["ContentLength"] > 0
    # The grant's proofs say how each copy was pinned: server-side, no sha256, held to the destination's version.
    twins = w.grant_doc(action["grant_id"])["outcome"]["twins"]
    assert {t["name"] for t in twins} >= set(shards)
    for twin in twins:
        proof = twin["proof"]
        assert proof["sha256"] is None and proof["source_etag"] and proof["destination_fingerprint"], proof

    # Reclaim re-verifies each twin against its proof (by version, reading no byte) and deletes the S3 sources.
    reclaim = w.grant("reclaim", destination=destination)
    w.deliver(w.message(reclaim))
    assert w.action(reclaim.grant_id)["state"] == "reclaimed", w.action(reclaim.grant_id)
    assert all(storage.stat(src.uri) is None for src in shards.values())
    assert all(storage.stat(f"{destination}/{name}") is not None for name in shards)


def test_a_source_overwritten_after_the_pin_is_refused_by_the_server(
    s3_admin: Any, proxy: str, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overwrite lands after pinning.still_pinned checked the fingerprint and before the server copies:
    only the CopySourceIfMatch condition can refuse it."""
    w, bucket, published = _world(tmp_path, s3_admin, uid, monkeypatch)
    backend = w.stack.ports.storage.backend("s3")
    assert isinstance(backend, S3Storage)
    real = backend.copy_etag_if_absent
    overwritten: list[str] = []

    def overwrite_then_copy(src: ObjectInfo, dst_uri: str, grant_id: str | None = None) -> WriteOutcome:
        if src.uri.endswith(".safetensors") and not overwritten:
            bucket_, key = src.uri.removeprefix("s3://").split("/", 1)
            s3_admin.put_object(Bucket=bucket_, Key=key, Body=os.urandom(src.size))  # same size, other bytes
            overwritten.append(src.uri)
        return real(src, dst_uri, grant_id=grant_id)

    monkeypatch.setattr(backend, "copy_etag_if_absent", overwrite_then_copy)
    action, _ = _publish(w, published)

    assert overwritten and action["state"] == "refused" and action["refusal"] == "source_changed", action
    assert "no longer the pinned" in action["detail"]
    assert _keys(s3_admin, published, "models/") == []  # nothing at the destination
    assert not [k for k in _keys(s3_admin, bucket, "preserved/") if "/_staging/" in k or "staging" in k]
    assert not s3_admin.list_multipart_uploads(Bucket=bucket).get("Uploads")


_MULTIPART = {"RLCLEANUP_COPY_S3_MULTIPART_THRESHOLD": str(64 * 1024), "RLCLEANUP_COPY_S3_WORKERS": "2"}


def test_a_large_publish_goes_through_the_multipart_copy_pinned(
    s3_admin: Any, proxy: str, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards over the (lowered) threshold: every pinned copy of them is an ETag-pinned UploadPartCopy (the proxy
    counts them) and no shard byte passes through the process."""
    for name, value in _MULTIPART.items():
        monkeypatch.setenv(name, value)
    w, _, published = _world(tmp_path, s3_admin, uid, monkeypatch)
    shards = _shards(S3Storage(), w.candidate().uri)
    large = {n for n, o in shards.items() if o.size > 64 * 1024}
    assert len(large) == 2  # 134 KiB and 99 KiB; the 32 KiB one stays one CopyObject
    stats = _stats(proxy)

    action, _ = _publish(w, published)

    assert action["state"] == "published", action
    after = _stats(proxy)
    copies = after["part_copies"][len(stats["part_copies"]) :]
    assert len(copies) == 2 * len(large)  # source -> staging, staging -> destination: one part each
    moved = {p: n - stats["object_bodies"].get(p, 0) for p, n in after["object_bodies"].items()}
    for name in large:
        through = {p: n for p, n in moved.items() if n and p.endswith(f"/{name}")}
        _only_the_scans_header_read(through, name, _header_bytes(s3_admin, shards[name]))
        head = s3_admin.head_object(Bucket=published, Key=f"models/m/{name}")
        assert head["ETag"].strip('"').endswith("-1") and head["ContentLength"] == shards[name].size
    assert not s3_admin.list_multipart_uploads(Bucket=published).get("Uploads")


def test_the_multipart_copy_of_a_source_overwritten_after_the_pin_is_refused(
    s3_admin: Any, proxy: str, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the threshold, the pin is each UploadPartCopy's x-amz-copy-source-if-match: the upload is aborted,
    its resume state deleted, nothing at the destination, no byte of the object read."""
    for name, value in _MULTIPART.items():
        monkeypatch.setenv(name, value)
    bucket = f"s3-pinmp-{uid}"
    s3_admin.create_bucket(Bucket=bucket)
    data = os.urandom(6 * MIB)
    s3_admin.put_object(Bucket=bucket, Key="ckpt/shard.bin", Body=data)
    storage = S3Storage()
    pinned = storage.stat(f"s3://{bucket}/ckpt/shard.bin")
    assert pinned is not None
    s3_admin.put_object(Bucket=bucket, Key="ckpt/shard.bin", Body=os.urandom(6 * MIB))  # after the pin

    with pytest.raises(SourceChangedError, match="changed while it was being copied"):
        storage.copy_etag_if_absent(pinned, f"s3://{bucket}/published/shard.bin")

    assert _keys(s3_admin, bucket, "published/") == []
    assert not s3_admin.list_multipart_uploads(Bucket=bucket).get("Uploads")  # aborted
    assert _keys(s3_admin, bucket, "_rlcleanup/") == []  # its resume state deleted
    assert _stats(proxy)["object_bodies"].get(f"/{bucket}/ckpt/shard.bin", 0) == 0


def test_a_preserve_on_s3_copies_the_checkpoint_server_side_pinned_and_verified(
    s3_admin: Any, proxy: str, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49: a preserve grant copies an owed export's checkpoint to a durable bucket of the same endpoint, every
    object a CopyObject conditioned on its pinned ETag (no byte through the process), each copy verified, the
    marker last; the export grant would then read that copy."""
    w, bucket, durable = _world(tmp_path, s3_admin, uid, monkeypatch, "deferred-export")
    step, digest = preserve_target(w.stack.ports.storage, w.record, 20, None)
    checkpoint = checkpoint_of(w.record, step)
    assert checkpoint is not None and checkpoint.startswith(f"s3://{bucket}/")
    sources = {o.uri.removeprefix(checkpoint + "/"): o for o in S3Storage().list(checkpoint)}
    before = _stats(proxy)["object_bodies"]

    destination = f"s3://{durable}/keep/s20"
    grant = w.grant("preserve", step=step, digest=digest, destination=destination)
    w.deliver(w.message(grant))

    action = w.action(grant.grant_id)
    assert action["state"] == "preserved" and action["refusal"] is None, action
    moved = {p: n - before.get(p, 0) for p, n in _stats(proxy)["object_bodies"].items() if n != before.get(p, 0)}
    copied = [p for p in moved if "/global_step_20/" in p or "/keep/s20/" in p]
    assert copied == [f"/{durable}/keep/s20/_PRESERVED.json"], moved  # every object server-side; the marker ours
    for name, src in sources.items():
        dst = S3Storage().stat(f"{destination}/{name}")
        assert dst is not None and dst.size == src.size and dst.etag == src.etag, name
    preserved = action["preserved"]
    assert {o["name"] for o in preserved["objects"]} == set(sources) and preserved["manifest_digest"] == digest
    marker = json.loads(s3_admin.get_object(Bucket=durable, Key="keep/s20/_PRESERVED.json")["Body"].read())
    assert all(o["source_etag"] and o["sha256"] is None for o in marker["objects"]), marker  # ETag-pinned copies
