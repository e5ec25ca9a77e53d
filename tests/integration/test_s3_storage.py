"""S3Storage beyond the shared port semantics, on the stack's real S3 server (SeaweedFS with SigV4 identities):
bad input (wrong endpoint, missing/wrong credentials, access denied, a bucket in another region, throttling) and
the cross-backend copies (S3 -> GCS / local, streamed, verified). The faults real S3 produces and SeaweedFS does
not (503 SlowDown, 301 PermanentRedirect) come from tests/servers/s3_fault_proxy.py, a proxy in front of it."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlcleanup.adapters.s3_client import S3Endpoint, named_endpoints
from rlcleanup.adapters.s3_storage import S3Storage, etag_md5
from rlcleanup.errors import ErrorKind, error_kind
from rlcleanup.ports.storage import StorageAccessError, StorageError, WriteOutcome
from rlcleanup.stack import procs, s3_server
from servers import s3_fault_proxy

pytestmark = pytest.mark.integration
_FAST_RETRY = {"max_retries": 3, "backoff": {"init_backoff": dt.timedelta(milliseconds=20)}}


@pytest.fixture
def bucket(s3_admin, uid: str) -> str:  # type: ignore[no-untyped-def]
    name = f"s3-test-{uid}"
    s3_admin.create_bucket(Bucket=name)
    return name


def _endpoint(
    url: str, key: str | None = s3_server.ADMIN_KEY, secret: str | None = s3_server.ADMIN_SECRET
) -> S3Endpoint:
    return S3Endpoint(name="test", endpoint_url=url, access_key_id=key, secret_access_key=secret)


@pytest.fixture
def fault_proxy(s3_endpoint: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The fault proxy in its own process group; its arguments come from the test's `faults` marker."""
    marker = request.node.get_closest_marker("faults")
    with s3_fault_proxy.running(s3_endpoint, tmp_path, *(list(marker.args) if marker else [])) as url:
        yield url


_stats = s3_fault_proxy.stats


def test_etag_kinds() -> None:
    assert etag_md5('"781e5e245d69b566979b86e28d23f2c7"') == "eB5eJF1ptWaXm4bijSPyxw=="
    assert etag_md5("d316408c159ea701ab954894bd3a92c2-2") is None  # multipart: not an MD5 of the bytes
    assert etag_md5(None) is None


def test_multipart_etag_is_recorded_as_such(s3_admin, bucket: str) -> None:  # type: ignore[no-untyped-def]
    up = s3_admin.create_multipart_upload(Bucket=bucket, Key="big/shard.bin")["UploadId"]
    parts = []
    for n in (1, 2):
        etag = s3_admin.upload_part(
            Bucket=bucket, Key="big/shard.bin", UploadId=up, PartNumber=n, Body=b"x" * (5 << 20)
        )
        parts.append({"ETag": etag["ETag"], "PartNumber": n})
    s3_admin.complete_multipart_upload(
        Bucket=bucket, Key="big/shard.bin", UploadId=up, MultipartUpload={"Parts": parts}
    )
    s3_admin.put_object(Bucket=bucket, Key="big/small.json", Body=b"{}")
    listed = {o.uri.rsplit("/", 1)[-1]: o for o in S3Storage().list(f"s3://{bucket}/big")}
    assert listed["shard.bin"].size == 10 << 20 and listed["shard.bin"].etag.endswith("-2")  # type: ignore[union-attr]
    assert listed["shard.bin"].md5 is None  # never mistaken for an MD5
    assert listed["small.json"].md5 == etag_md5(hashlib.md5(b"{}").hexdigest())


def test_wrong_secret_unknown_key_and_read_only_identity(s3_endpoint: str, s3_admin, bucket: str) -> None:  # type: ignore[no-untyped-def]
    s3_admin.put_object(Bucket=bucket, Key="k", Body=b"v")
    uri = f"s3://{bucket}/k"
    for key, secret in ((s3_server.ADMIN_KEY, "wrong"), ("nobody", "x")):
        with pytest.raises(StorageAccessError, match="access denied or bad credentials") as err:
            S3Storage([], _endpoint(s3_endpoint, key, secret)).stat(uri)
        assert s3_endpoint in str(err.value) and "wrong" not in str(err.value)  # names the endpoint, not the secret
        assert (
            error_kind(err.value) is ErrorKind.domain and err.value.code == "storage_access"
        )  # recorded, not retried forever
    reader = S3Storage([], _endpoint(s3_endpoint, s3_server.READER_KEY, s3_server.READER_SECRET))
    assert reader.read_bytes(uri) == b"v"
    with pytest.raises(StorageAccessError):
        reader.write_if_absent(f"s3://{bucket}/new", b"x")
    with pytest.raises(StorageAccessError):
        reader.delete(uri)
    assert s3_admin.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"


def test_missing_credentials_are_a_clear_error(
    s3_endpoint: str, bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageAccessError, match="no S3 credentials"):
        S3Storage([], _endpoint(s3_endpoint, None, None)).stat(f"s3://{bucket}/k")


def test_profile_credentials_from_the_config_files(
    s3_endpoint: str, s3_admin, bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    creds = tmp_path / "credentials"
    creds.write_text(
        f"[coreweave]\naws_access_key_id = {s3_server.READER_KEY}\naws_secret_access_key = {s3_server.READER_SECRET}\n"
    )
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_PROFILE", "coreweave")
    s3_admin.put_object(Bucket=bucket, Key="p", Body=b"from-profile")
    assert S3Storage.from_env(dict(os.environ)).read_bytes(f"s3://{bucket}/p") == b"from-profile"


def test_named_endpoints_route_their_buckets(s3_endpoint: str, s3_admin, bucket: str) -> None:  # type: ignore[no-untyped-def]
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # the default endpoint is wrong on purpose
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "RLCLEANUP_S3_ENDPOINT_COREWEAVE": json.dumps(
            {
                "endpoint_url": s3_endpoint,
                "buckets": [bucket],
                "access_key_id": s3_server.READER_KEY,
                "secret_access_key": s3_server.READER_SECRET,
            }
        ),
    }
    s3_admin.put_object(Bucket=bucket, Key="n", Body=b"named")
    storage = S3Storage.from_env(env)
    assert storage.endpoint_for(bucket).name == "coreweave" and storage.endpoint_for("other").name == "default"
    assert storage.read_bytes(f"s3://{bucket}/n") == b"named"
    assert "secret" not in repr(storage.endpoint_for(bucket))
    with pytest.raises(StorageAccessError, match="RLCLEANUP_S3_ENDPOINT_BAD"):
        named_endpoints({"RLCLEANUP_S3_ENDPOINT_BAD": "{not json"})


def test_wrong_endpoint_fails_after_bounded_retries(bucket: str) -> None:
    dead = f"http://127.0.0.1:{procs.free_port()}"
    storage = S3Storage([], _endpoint(dead), retry=_FAST_RETRY)
    t0 = time.monotonic()
    with pytest.raises(StorageError, match=dead.replace(".", r"\.")) as err:
        storage.read_range(f"s3://{bucket}/k", 0, 8)
    assert time.monotonic() - t0 < 30
    assert (
        error_kind(err.value) is ErrorKind.transient
    )  # transient: the delivery is retried with backoff, then dead-lettered


@pytest.mark.faults("--slowdown", "2")
def test_throttling_is_retried_with_backoff(fault_proxy: str, s3_admin, bucket: str) -> None:  # type: ignore[no-untyped-def]
    s3_admin.put_object(Bucket=bucket, Key="t", Body=b"0123456789")
    storage = S3Storage([], _endpoint(fault_proxy), retry=_FAST_RETRY)
    assert storage.read_range(f"s3://{bucket}/t", 2, 3) == b"234"
    stats = _stats(fault_proxy)
    assert (stats["requests"], stats["throttled"]) == (3, 2)  # two 503 SlowDown, then the retry that got through


@pytest.mark.faults("--slowdown", "1000")
def test_throttling_that_never_ends_is_transient_not_silent(fault_proxy: str, bucket: str) -> None:
    storage = S3Storage([], _endpoint(fault_proxy), retry=_FAST_RETRY)
    with pytest.raises(StorageError, match=r"SlowDown|503") as err:
        storage.read_range(f"s3://{bucket}/t", 0, 8)
    assert error_kind(err.value) is ErrorKind.transient
    assert _stats(fault_proxy)["throttled"] == 4  # the first try and three retries, then it gave up


def test_bucket_in_another_region_is_a_clear_permanent_error(
    s3_endpoint: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    request.node.add_marker(pytest.mark.faults("--other-region", "eu-bucket"))
    proxy = request.getfixturevalue("fault_proxy")
    with pytest.raises(StorageAccessError, match="another region") as err:
        S3Storage([], _endpoint(proxy), retry=_FAST_RETRY).read_range("s3://eu-bucket/k", 0, 8)
    assert error_kind(err.value) is ErrorKind.domain


def test_s3_to_gcs_and_local_stream_verified_and_write_once(
    s3_admin, bucket: str, gcs_client, uid: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    import tracemalloc

    from rlcleanup.adapters.gcs_storage import GcsStorage
    from rlcleanup.adapters.storage_router import RoutingStorage

    gcs_bucket = f"s3-dst-{uid}"
    gcs_client.create_bucket(gcs_bucket)
    router = RoutingStorage({"gs": GcsStorage(gcs_client), "s3": S3Storage()})
    block = b"".join(f"line {i:07d} of a long training log\n".encode() for i in range(32768))
    body = block * (48 * 1024 * 1024 // len(block) + 1)  # ~48 MiB: the GCS upload alone holds ~4 x its 4 MiB chunk
    s3_admin.put_object(Bucket=bucket, Key="attempts/0/train.log", Body=body)
    src = f"s3://{bucket}/attempts/0/train.log"
    dst = f"gs://{gcs_bucket}/preserved/train.log"
    local = tmp_path / "preserved" / "train.log"
    tracemalloc.start()
    try:
        assert router.copy_if_absent(src, dst) is WriteOutcome.created
        up_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        assert router.copy_if_absent(src, str(local)) is WriteOutcome.created
        down_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert max(up_peak, down_peak) < len(body) // 2, (up_peak, down_peak)  # chunks, not the object
    got = gcs_client.bucket(gcs_bucket).get_blob("preserved/train.log")
    assert got.size == len(body) and got.md5_hash == etag_md5(hashlib.md5(body).hexdigest())
    assert local.read_bytes() == body
    assert router.copy_if_absent(src, dst) is WriteOutcome.identical
    assert router.copy_if_absent(src, str(local)) is WriteOutcome.identical
    s3_admin.put_object(Bucket=bucket, Key="attempts/0/other.log", Body=b"different\n")
    assert router.copy_if_absent(f"s3://{bucket}/attempts/0/other.log", dst) is WriteOutcome.conflict
    assert router.copy_if_absent(f"s3://{bucket}/attempts/0/other.log", str(local)) is WriteOutcome.conflict
    assert gcs_client.bucket(gcs_bucket).get_blob("preserved/train.log").size == len(body)  # never overwritten


def test_cli_run_on_an_s3_run_preserves_locally(s3_endpoint: str, bucket: str, tmp_path: Path) -> None:
    """`rlcleanup run s3://…` (embedded): the run is read from the S3 server, evidence lands in a local root."""
    from typer.testing import CliRunner

    from rlcleanup.cli.main import app
    from rlcleanup.samples.generator import VERSION, write_sample_run
    from rlcleanup.samples.upload import upload_sample_run_to

    write_sample_run(tmp_path / "sample", "completed-resumed")
    run_uri = upload_sample_run_to(S3Storage(), tmp_path / "sample", f"s3://{bucket}/iris/job")
    preserve = tmp_path / "preserved"
    result = CliRunner().invoke(
        app, ["run", run_uri, "--preserve-to", str(preserve), "--db", str(tmp_path / "r.db"), "--json"]
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["run_uri"] == run_uri and record["terminal_state"] == "completed"
    assert [(c["step"], c["valid"]) for c in record["candidates"]] == [(s, True) for s in (5, 10, 15, 20)]
    assert record["preserved_object_count"] > 20
    manifest = json.loads(Path(record["manifest_uri"]).read_text())
    assert all(o["source"].startswith(f"s3://{bucket}/") for o in manifest["objects"] if o["source"] != "derived")
    assert record["run_id"].endswith(VERSION)


def test_a_stopped_server_leaves_nothing_in_tmp(tmp_path: Path) -> None:
    """weed puts its unix sockets in /tmp whatever its flags, and its glog files in $TMPDIR: after `stop`, none of
    its sockets is left there, and its logs were written inside the state dir."""
    with s3_server.running(tmp_path) as srv:
        made = [path for path in srv.sockets if path.exists()]
        assert made, "weed created none of the sockets socket_paths names: the names are out of date"
        assert all(path.is_socket() for path in made)
    assert not [path for path in srv.sockets if path.exists()]
    assert list((tmp_path / "s3-tmp").glob("weed.*")), "weed's glog files did not go to the state dir"
