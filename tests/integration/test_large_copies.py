"""Copies of any size stay server-side (issue 36): an S3 object over the multipart threshold is copied as ranged
UploadPartCopy parts, and a GCS rewrite across storage classes is followed token by token. Each copy is killed
half way (SIGKILL of the process copying), then resumed: the resumed copy goes on from what was done (S3: the
parts the server lists; GCS: the recorded token), the destination never exists before it is whole, and no byte of
the object passes through the process (counted by the proxy / stand-in in front of the server).

The S3 threshold is lowered by its setting (RLCLEANUP_COPY_S3_MULTIPART_THRESHOLD) so the multipart path runs on
a 23 MiB object; tests/unit/test_copy_plan.py holds the real threshold's decision and bench/bench_large_copy.py
copies a real 5 GiB + 1 MiB object at it (bench/RESULTS.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.ports.storage import StorageError, WriteOutcome
from rlcleanup.settings import MIB
from rlcleanup.stack import s3_server
from servers import s3_fault_proxy
from servers.gcs_rewrite_standin import RewriteStandin

pytestmark = pytest.mark.integration
_SMALL_COPIES = {
    "RLCLEANUP_COPY_S3_MULTIPART_THRESHOLD": str(6 * MIB),
    "RLCLEANUP_COPY_S3_PART_BYTES": str(5 * MIB),
    "RLCLEANUP_COPY_S3_WORKERS": "1",
    "RLCLEANUP_COPY_GCS_REWRITE_BYTES_PER_CALL": str(MIB),
}
_COPY = "import os, sys\nfrom rlcleanup.adapters.{module} import {cls}\n{cls}.from_env(os.environ).copy_if_absent(sys.argv[1], sys.argv[2])\n"


@pytest.fixture
def counting_proxy(s3_endpoint: str, tmp_path: Path) -> Iterator[str]:
    """The S3 fault proxy, counting body bytes and part copies, each part copy held 0.4 s (time to kill)."""
    with s3_fault_proxy.running(s3_endpoint, tmp_path, "--delay-part-copy", "0.4") as url:
        yield url


_stats = s3_fault_proxy.stats


def _kill_when(proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        assert time.monotonic() < deadline, "the copy never got half way"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def _child(module: str, cls: str, src: str, dst: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    code = _COPY.format(module=module, cls=cls)
    return subprocess.Popen(
        [sys.executable, "-c", code, src, dst], env=env, start_new_session=True, stderr=subprocess.PIPE
    )


def test_s3_multipart_copy_killed_half_way_resumes_server_side(
    s3_admin: Any, counting_proxy: str, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = f"s3-copy-{uid}"
    s3_admin.create_bucket(Bucket=bucket)
    data = os.urandom(23 * MIB)  # 5 parts of 5 MiB (the last 3 MiB)
    s3_admin.put_object(Bucket=bucket, Key="ckpt/shard.bin", Body=data)
    src, dst = f"s3://{bucket}/ckpt/shard.bin", f"s3://{bucket}/preserved/shard.bin"
    env = {**os.environ, **s3_server.client_env(counting_proxy), **_SMALL_COPIES}

    def parts_held() -> set[int]:
        uploads = s3_admin.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        if not uploads:
            return set()
        parts = s3_admin.list_parts(Bucket=bucket, Key=uploads[0]["Key"], UploadId=uploads[0]["UploadId"])
        return {int(p["PartNumber"]) for p in parts.get("Parts", [])}

    _kill_when(_child("s3_storage", "S3Storage", src, dst, env), lambda: len(parts_held()) >= 2)
    time.sleep(1.0)  # a part copy the proxy was holding when the client died still lands on the server
    held = parts_held()
    assert 2 <= len(held) < 5
    # Half way, nothing looks whole: the destination does not exist, the upload is still open.
    assert "Contents" not in s3_admin.list_objects_v2(Bucket=bucket, Prefix="preserved/")
    before = _stats(counting_proxy)
    assert before["creates"] == 1

    for name, value in {**s3_server.client_env(counting_proxy), **_SMALL_COPIES}.items():
        monkeypatch.setenv(name, value)
    storage = S3Storage.from_env(os.environ)
    assert storage.copy_if_absent(src, dst) is WriteOutcome.created
    after = _stats(counting_proxy)

    # SeaweedFS gives a copied part an ETag of its own scheme (not the MD5 of the part), so no kept part can be
    # verified against the source (issue 45): the resumed copy aborts that upload and copies afresh, server-side.
    # On S3 a copied part's ETag is its MD5: the parts are verified and kept
    # (test_s3_resumed_multipart_copy_keeps_only_parts_verified_against_the_source).
    assert after["creates"] == 2
    resumed = after["part_copies"][len(before["part_copies"]) :]
    assert sorted(resumed) == [1, 2, 3, 4, 5]
    assert after["body_bytes"] - before["body_bytes"] < 64 * 1024  # XML only: 0 of the 23 MiB through the process
    assert s3_admin.get_object(Bucket=bucket, Key="preserved/shard.bin")["Body"].read() == data
    assert not s3_admin.list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert "Contents" not in s3_admin.list_objects_v2(Bucket=bucket, Prefix="_rlcleanup/")  # state deleted
    # A replay compares by the source ETag the copy recorded (a multipart ETag never equals the source's).
    assert storage.copy_if_absent(src, dst) is WriteOutcome.identical
    s3_admin.put_object(Bucket=bucket, Key="ckpt/other.bin", Body=os.urandom(7 * MIB))
    assert storage.copy_if_absent(f"s3://{bucket}/ckpt/other.bin", dst) is WriteOutcome.conflict


def test_s3_multipart_copy_of_a_source_overwritten_mid_copy_is_aborted(
    s3_admin: Any, counting_proxy: str, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every part is pinned to the source's ETag: an overwrite half way fails the copy (transient: the retry copies
    the new version), the upload is aborted (no incomplete upload keeps bytes) and nothing looks whole."""
    import threading

    bucket = f"s3-changed-{uid}"
    s3_admin.create_bucket(Bucket=bucket)
    s3_admin.put_object(Bucket=bucket, Key="ckpt/shard.bin", Body=os.urandom(23 * MIB))
    src, dst = f"s3://{bucket}/ckpt/shard.bin", f"s3://{bucket}/preserved/shard.bin"
    for name, value in {**s3_server.client_env(counting_proxy), **_SMALL_COPIES}.items():
        monkeypatch.setenv(name, value)
    newer = os.urandom(17 * MIB)

    def overwrite_after_two_parts() -> None:
        deadline = time.monotonic() + 60
        while len(_stats(counting_proxy)["part_copies"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        s3_admin.put_object(Bucket=bucket, Key="ckpt/shard.bin", Body=newer)

    writer = threading.Thread(target=overwrite_after_two_parts)
    writer.start()
    storage = S3Storage.from_env(os.environ)
    with pytest.raises(StorageError, match="changed while it was being copied"):
        storage.copy_if_absent(src, dst)
    writer.join()
    assert not s3_admin.list_multipart_uploads(Bucket=bucket).get("Uploads")  # aborted
    assert "Contents" not in s3_admin.list_objects_v2(Bucket=bucket, Prefix="preserved/")
    assert "Contents" not in s3_admin.list_objects_v2(Bucket=bucket, Prefix="_rlcleanup/")
    assert storage.copy_if_absent(src, dst) is WriteOutcome.created  # the redelivery copies the new version
    assert s3_admin.get_object(Bucket=bucket, Key="preserved/shard.bin")["Body"].read() == newer


def test_s3_copy_between_buckets_is_server_side(
    s3_admin: Any, counting_proxy: str, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two buckets of one endpoint: one CopyObject (small) or a multipart copy (large), never streamed."""
    a, b = f"s3-from-{uid}", f"s3-to-{uid}"
    s3_admin.create_bucket(Bucket=a)
    s3_admin.create_bucket(Bucket=b)
    small, large = os.urandom(1000), os.urandom(12 * MIB)
    s3_admin.put_object(Bucket=a, Key="small", Body=small)
    s3_admin.put_object(Bucket=a, Key="large", Body=large)
    for name, value in {**s3_server.client_env(counting_proxy), **_SMALL_COPIES}.items():
        monkeypatch.setenv(name, value)
    storage = S3Storage.from_env(os.environ)
    for key, body in (("small", small), ("large", large)):
        assert storage.copy_if_absent(f"s3://{a}/{key}", f"s3://{b}/{key}") is WriteOutcome.created
        assert storage.copy_if_absent(f"s3://{a}/{key}", f"s3://{b}/{key}") is WriteOutcome.identical
        assert s3_admin.get_object(Bucket=b, Key=key)["Body"].read() == body
    assert _stats(counting_proxy)["body_bytes"] < 64 * 1024


def test_gcs_rewrite_across_classes_killed_half_way_resumes_from_its_token(
    gcs_client: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    standard, nearline = f"gcs-std-{uid}", f"gcs-nearline-{uid}"
    gcs_client.create_bucket(standard)
    cold = gcs_client.bucket(nearline)
    cold.storage_class = "NEARLINE"
    gcs_client.create_bucket(cold)
    data = os.urandom(10 * MIB)
    gcs_client.bucket(standard).blob("ckpt/shard.bin").upload_from_string(data)
    src, dst = f"gs://{standard}/ckpt/shard.bin", f"gs://{nearline}/preserved/shard.bin"
    standin = RewriteStandin(str(gcs_client.api_endpoint), delay=0.3)
    try:
        env = {**os.environ, **_SMALL_COPIES, "STORAGE_EMULATOR_HOST": standin.url}
        code = (
            "import sys\nfrom rlcleanup.adapters.gcs_storage import GcsStorage\n"
            "GcsStorage().copy_if_absent(sys.argv[1], sys.argv[2])\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, src, dst], env=env, start_new_session=True, stderr=subprocess.PIPE
        )
        _kill_when(proc, lambda: len(standin.calls) >= 4)
        killed_at = len(standin.calls)
        assert gcs_client.bucket(nearline).get_blob("preserved/shard.bin") is None  # never a partial object
        assert all(call["max"] == MIB for call in standin.calls)  # every call bounded by the setting

        for name, value in _SMALL_COPIES.items():
            monkeypatch.setenv(name, value)
        client = storage.Client(
            project=gcs_client.project, credentials=AnonymousCredentials(), client_options={"api_endpoint": standin.url}
        )
        assert GcsStorage(client).copy_if_absent(src, dst) is WriteOutcome.created

        tokens = [call["token"] for call in standin.calls]
        assert tokens.count(None) == 1  # started once: the resumed process never restarted from zero
        resumed = standin.calls[killed_at]["token"]
        assert resumed is not None and int(resumed.removeprefix("rw-")) >= (killed_at - 1) * MIB
        assert standin.calls[-1]["done"] and len(standin.calls) <= 10 + 1  # one call per MiB, at most one redone
        assert standin.body_bytes < 64 * 1024  # JSON only: 0 of the 10 MiB through either process
        assert gcs_client.bucket(nearline).blob("preserved/shard.bin").download_as_bytes() == data
        assert not list(gcs_client.list_blobs(nearline, prefix="_rlcleanup/"))  # the token's state deleted
    finally:
        standin.close()


def _interrupted_upload(s3_admin: Any, bucket: str, dst_key: str, state: dict[str, Any]) -> str:
    """An upload as an interrupted copy leaves it (its state object under `_rlcleanup/copies/`), begun by us."""
    from rlcleanup.adapters.s3_copy import SOURCE_ETAG_META, MultipartCopyState, ServerSideCopier
    from rlcleanup.settings import CopySettings, read

    upload_id = s3_admin.create_multipart_upload(
        Bucket=bucket, Key=dst_key, Metadata={SOURCE_ETAG_META: state["source_etag"]}
    )["UploadId"]
    copier = ServerSideCopier(s3_admin, read(CopySettings))
    body = MultipartCopyState(upload_id=upload_id, **state).model_dump_json()
    s3_admin.put_object(Bucket=bucket, Key=copier.state_key(f"s3://{bucket}/{dst_key}"), Body=body.encode())
    return str(upload_id)


def test_s3_resumed_multipart_copy_keeps_only_parts_verified_against_the_source(
    s3_admin: Any, counting_proxy: str, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45: whoever can write the destination bucket can read the upload id from the resume state and upload
    a part of the right size into it. A resumed copy keeps a listed part only when its ETag is the MD5 of the
    source's bytes at that range (read once, held to the source's ETag); a spliced part aborts that upload (the copy
    starts afresh), and an upload begun for another grant is aborted, never resumed."""
    for name, value in {**s3_server.client_env(counting_proxy), **_SMALL_COPIES}.items():
        monkeypatch.setenv(name, value)
    bucket = f"s3-splice-{uid}"
    s3_admin.create_bucket(Bucket=bucket)
    data = os.urandom(23 * MIB)  # 5 parts of 5 MiB (the last 3 MiB)
    s3_admin.put_object(Bucket=bucket, Key="ckpt/shard.bin", Body=data)
    storage = S3Storage.from_env(os.environ)
    src = storage.stat(f"s3://{bucket}/ckpt/shard.bin")
    assert src is not None and src.etag
    state = {"source": src.uri, "source_etag": src.etag, "size": src.size, "part_bytes": 5 * MIB}

    parts = [data[i : i + 5 * MIB] for i in range(0, len(data), 5 * MIB)]

    # Two parts uploaded with the source's bytes (ETag = their MD5, as S3 gives a copied part): verified by one
    # ranged read each and kept; only the other three are copied.
    dst_key = "published/shard.bin"
    upload_id = _interrupted_upload(s3_admin, bucket, dst_key, {**state, "grant_id": "g1"})
    for number in (1, 2):
        s3_admin.upload_part(Bucket=bucket, Key=dst_key, UploadId=upload_id, PartNumber=number, Body=parts[number - 1])
    before = _stats(counting_proxy)
    assert storage.copy_etag_if_absent(src, f"s3://{bucket}/{dst_key}", grant_id="g1") is WriteOutcome.created
    after = _stats(counting_proxy)
    assert sorted(after["part_copies"][len(before["part_copies"]) :]) == [3, 4, 5]
    assert after["creates"] == before["creates"]  # the same upload resumed
    assert 10 * MIB <= after["body_bytes"] - before["body_bytes"] < 10 * MIB + 64 * 1024  # the kept parts, once
    assert s3_admin.get_object(Bucket=bucket, Key=dst_key)["Body"].read() == data

    # A part of the right size with someone else's bytes spliced in: that upload is aborted, the copy starts afresh.
    spliced_key = "published/spliced.bin"
    spliced = _interrupted_upload(s3_admin, bucket, spliced_key, {**state, "grant_id": "g1"})
    s3_admin.upload_part(Bucket=bucket, Key=spliced_key, UploadId=spliced, PartNumber=1, Body=parts[0])
    s3_admin.upload_part(Bucket=bucket, Key=spliced_key, UploadId=spliced, PartNumber=2, Body=os.urandom(5 * MIB))
    before = _stats(counting_proxy)
    assert storage.copy_etag_if_absent(src, f"s3://{bucket}/{spliced_key}", grant_id="g1") is WriteOutcome.created
    after = _stats(counting_proxy)
    assert sorted(after["part_copies"][len(before["part_copies"]) :]) == [1, 2, 3, 4, 5]
    assert after["creates"] == before["creates"] + 1
    assert s3_admin.get_object(Bucket=bucket, Key=spliced_key)["Body"].read() == data
    with pytest.raises(Exception, match="NoSuchUpload"):
        s3_admin.list_parts(Bucket=bucket, Key=spliced_key, UploadId=spliced)

    # An upload begun for another grant is never resumed: aborted, and the copy starts afresh.
    other_key = "published/other.bin"
    foreign = _interrupted_upload(s3_admin, bucket, other_key, {**state, "grant_id": "another-grant"})
    s3_admin.upload_part(Bucket=bucket, Key=other_key, UploadId=foreign, PartNumber=1, Body=data[: 5 * MIB])
    assert storage.copy_etag_if_absent(src, f"s3://{bucket}/{other_key}", grant_id="g1") is WriteOutcome.created
    assert s3_admin.get_object(Bucket=bucket, Key=other_key)["Body"].read() == data
    with pytest.raises(Exception, match="NoSuchUpload"):
        s3_admin.list_parts(Bucket=bucket, Key=other_key, UploadId=foreign)
    assert not s3_admin.list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert "Contents" not in s3_admin.list_objects_v2(Bucket=bucket, Prefix="_rlcleanup/")
