"""GcsStorage against fake-gcs-server (the stack's GCS emulator): what is GCS-specific. The port semantics every
object store shares run over gs:// and s3:// alike in test_object_storage.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.ports.storage import WriteOutcome
from servers.gcs_rewrite_standin import RewriteStandin

pytestmark = pytest.mark.integration


@pytest.fixture
def bucket(gcs_client, uid: str) -> str:  # type: ignore[no-untyped-def]
    name = f"gcs-test-{uid}"
    gcs_client.create_bucket(name)
    return name


@pytest.fixture
def gcs(gcs_client) -> GcsStorage:  # type: ignore[no-untyped-def]
    return GcsStorage(gcs_client)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "blob"])
def test_read_range_semantics(gcs_client, bucket: str, lean: bool) -> None:  # type: ignore[no-untyped-def]
    """Both ranged-read paths (pooled urllib3 GET, blob.download_as_bytes) agree on every edge."""
    gcs = GcsStorage(gcs_client, lean_reads=lean)
    data = bytes(range(256)) * 40  # 10,240 bytes
    names = ["plain.bin", "dir/sub dir/shard 00001-of-00030.safetensors", "q?x#y%20&z+é~'.bin", "a//b/./c"]
    for name in names:
        gcs_client.bucket(bucket).blob(name).upload_from_string(data)
    for name in names:
        uri = f"gs://{bucket}/{name}"
        assert gcs.read_range(uri, 0, 8) == data[:8], name
        assert gcs.read_range(uri, 8, 4096) == data[8:4104], name
        assert gcs.read_range(uri, 10_000, 1000) == data[10_000:], name  # short at the end
        assert gcs.read_range(uri, 10_239, 1) == data[-1:], name  # the last byte
        assert gcs.read_range(uri, 10_240, 8) == b"", name  # starts exactly at the end
        assert gcs.read_range(uri, 50_000, 8) == b"", name  # far beyond it
        assert gcs.read_range(uri, 5, 0) == b"", name
    with pytest.raises(FileNotFoundError):
        gcs.read_range(f"gs://{bucket}/no/such/object", 0, 8)
    with pytest.raises(FileNotFoundError):
        gcs.read_range(f"gs://{bucket}-missing-bucket/x", 0, 8)
    gcs_client.bucket(bucket).blob("empty").upload_from_string(b"")
    assert gcs.read_range(f"gs://{bucket}/empty", 0, 8) == b""
    assert (gcs._ranges is not None) is lean  # the lean path really served these reads


def test_lean_reads_share_a_pool_across_threads(gcs: GcsStorage, gcs_client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    blobs = {f"s/{k:03d}": bytes([k]) * (100 + k) for k in range(64)}
    for name, body in blobs.items():
        gcs_client.bucket(bucket).blob(name).upload_from_string(body)
    jobs = [(name, start) for name in blobs for start in (0, 50, 90, 200)] * 2  # interleaved hits, short and empty

    def read(job: tuple[str, int]) -> bool:
        name, start = job
        return gcs.read_range(f"gs://{bucket}/{name}", start, 60) == blobs[name][start : start + 60]

    with ThreadPoolExecutor(32) as pool:
        assert all(pool.map(read, jobs))
    with pytest.raises(FileNotFoundError):  # a 404 body left on a pooled connection would corrupt the next read
        gcs.read_range(f"gs://{bucket}/s/none", 0, 8)
    assert gcs.read_range(f"gs://{bucket}/s/000", 0, 8) == blobs["s/000"][:8]


def test_cross_backend_copies_stream_in_bounded_memory(gcs: GcsStorage, bucket: str, tmp_path: Path) -> None:
    """A local run preserved to GCS (and back): 40 MiB through the router without holding the file in memory."""
    import tracemalloc

    from rlcleanup.adapters.local_storage import LocalStorage
    from rlcleanup.adapters.storage_router import RoutingStorage

    router = RoutingStorage({"file": LocalStorage(checksums=False), "gs": gcs})
    src = tmp_path / "finelog.log"
    block = b"".join(f"line {i:07d} of a long training log\n".encode() for i in range(32768))
    with src.open("wb") as fh:
        for _ in range(40 * 1024 * 1024 // len(block) + 1):
            fh.write(block)
    dst = f"gs://{bucket}/preserved/finelog.log"
    tracemalloc.start()
    try:
        assert router.copy_if_absent(str(src), dst) is WriteOutcome.created
        up_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        back = tmp_path / "back" / "finelog.log"
        assert router.copy_if_absent(dst, str(back)) is WriteOutcome.created
        down_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = src.stat().st_size
    assert gcs.stat(dst) is not None and gcs.stat(dst).size == size  # type: ignore[union-attr]
    assert back.read_bytes() == src.read_bytes()
    assert max(up_peak, down_peak) < size // 2, (up_peak, down_peak, size)  # a few 4 MiB chunks, not the file
    # Write-once on both sides: identical content is recognised, different content is a conflict.
    assert router.copy_if_absent(str(src), dst) is WriteOutcome.identical
    assert router.copy_if_absent(dst, str(back)) is WriteOutcome.identical
    other = tmp_path / "other.log"
    other.write_bytes(b"different\n")
    assert router.copy_if_absent(str(other), dst) is WriteOutcome.conflict
    assert router.copy_if_absent(dst, str(other)) is WriteOutcome.conflict


def test_the_default_client_keeps_enough_connections_for_concurrent_copies() -> None:
    """Several deliveries in one instance each copy with a pool of workers: requests' default of 10 connections per host
    made capture-part log "Connection pool is full, discarding connection" in the 10,000-object run."""
    from rlcleanup.adapters.gcs_client import default_client

    client = default_client()  # STORAGE_EMULATOR_HOST points at the stack's fake-gcs-server
    for scheme in ("http://", "https://"):
        assert client._http.adapters[scheme]._pool_maxsize >= 64


def test_lean_stat_matches_the_blob_stat(gcs: GcsStorage, gcs_client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    """copy_if_absent stats through the lean pool: the same ObjectInfo as get_blob, field for field."""
    names = ["plain.bin", "dir/sub dir/shard 00001-of-00030.safetensors", "q?x#y%20&z+é~'.bin"]
    for name in names:
        gcs_client.bucket(bucket).blob(name).upload_from_string(name.encode() * 7)
    lean = gcs._range_reader()
    assert lean is not None
    for name in names:
        assert lean.stat(bucket, name) == gcs.stat(f"gs://{bucket}/{name}"), name
    assert lean.stat(bucket, "no/such") is None


def test_lean_listing_matches_list_blobs_across_pages(gcs: GcsStorage, gcs_client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    """list() goes through the lean pool (validation's listing): the same ObjectInfo as the Blob path, in
    name order, folder placeholders skipped, and pages followed."""
    from rlcleanup.adapters.gcs_client import RANGE_POOL

    b = gcs_client.bucket(bucket)
    for name in ["p/a", "p/b/c", "p/dir/", "p/z", "q/other"]:
        b.blob(name).upload_from_string(name.encode())
    blob_path = list(GcsStorage(gcs_client, lean_reads=False).list(f"gs://{bucket}/p"))
    assert [o.uri for o in blob_path] == [f"gs://{bucket}/p/{n}" for n in ("a", "b/c", "z")]
    assert list(gcs.list(f"gs://{bucket}/p")) == blob_path
    lean = gcs._range_reader()
    assert lean is not None
    pages = []
    real_json = lean._json

    def small_pages(method: str, path: str, query: dict) -> tuple[int, dict]:  # type: ignore[type-arg]
        pages.append(dict(query))
        return real_json(method, path, {**query, "maxResults": 2})

    lean._json = small_pages  # type: ignore[method-assign]
    assert list(gcs.list(f"gs://{bucket}/p")) == blob_path
    assert len(pages) >= 2 and "pageToken" in pages[-1]
    assert RANGE_POOL >= 32


def test_warm_reads_opens_the_pools_connections(gcs: GcsStorage, bucket: str) -> None:
    """warm_reads(n) opens n connections in the background; the reads that follow reuse them."""
    import time

    gcs.write_if_absent(f"gs://{bucket}/w", b"0123456789")
    lean = gcs._range_reader()
    assert lean is not None
    opened: list[object] = []
    real_open = lean.media._open

    def counting_open() -> object:
        opened.append(None)
        return real_open()

    lean.media._open = counting_open  # type: ignore[method-assign]
    gcs.warm_reads(4)
    deadline = time.monotonic() + 10
    while lean.media.idle() < 4:
        assert time.monotonic() < deadline, "warm_reads did not open 4 connections"
        time.sleep(0.01)
    assert len(opened) == 4
    gcs.warm_reads(4)  # already warm: nothing new
    assert gcs.read_range(f"gs://{bucket}/w", 2, 3) == b"234"
    assert len(opened) == 4 and lean.media.idle() == 4


def test_copy_follows_rewrite_tokens(gcs_client, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A rewrite GCS answers in several calls (across classes or locations: at most maxBytesRewrittenPerCall each)
    is followed to the end, token by token (tests/servers/gcs_rewrite_standin.py answers as GCS does)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    monkeypatch.setenv("RLCLEANUP_COPY_GCS_REWRITE_BYTES_PER_CALL", str(1024 * 1024))
    gcs_client.bucket(bucket).blob("big/src").upload_from_string(b"x" * (3 * 1024 * 1024))
    proxy = RewriteStandin(str(gcs_client.api_endpoint))
    try:
        client = storage.Client(
            project=gcs_client.project,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": proxy.url},
        )
        gcs = GcsStorage(client)
        assert gcs.copy_if_absent(f"gs://{bucket}/big/src", f"gs://{bucket}/big/dst") is WriteOutcome.created
        assert [c["token"] for c in proxy.calls] == [None, "rw-1048576", "rw-2097152"]
        assert gcs_client.bucket(bucket).blob("big/dst").download_as_bytes() == b"x" * (3 * 1024 * 1024)
        assert gcs.copy_if_absent(f"gs://{bucket}/big/src", f"gs://{bucket}/big/dst") is WriteOutcome.identical
        assert len(proxy.calls) == 3  # a replay stats, never rewrites
    finally:
        proxy.close()


def test_capture_through_real_latency_is_complete_and_write_once(
    gcs_client, bucket: str, uid: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """copy_part's pool over real round trips (bench/latency_proxy.py, 5 ms each way): every object copied once,
    a replay is all identical, and a source changed since is a conflict that leaves the first copy in place."""
    import os
    import sys

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from rlcleanup.models.parts import CaptureItem, CapturePart
    from rlcleanup.stack import procs
    from rlcleanup.steps.capture import COPY_WORKERS, copy_part

    src = gcs_client.bucket(bucket)
    items = []
    for k in range(3 * COPY_WORKERS + 5):  # more objects than workers: the pool reuses its connections
        body = f"line {k}\n".encode() * (k + 1)
        src.blob(f"run/logs/{k:03d}.log").upload_from_string(body)
        source, rel = f"gs://{bucket}/run/logs/{k:03d}.log", f"run/logs/{k:03d}.log"
        items.append(CaptureItem(source=source, dest_rel=rel, size=len(body), kind="log"))
    target = str(gcs_client.api_endpoint).removeprefix("http://").rstrip("/")
    script = str(Path(__file__).resolve().parents[2] / "bench" / "latency_proxy.py")
    argv = lambda port: [sys.executable, script, "--port", str(port), "--target", target, "--delay-ms", "5"]  # noqa: E731
    server, port = procs.start_listening("latency-proxy", argv, procs.accepts, state_dir=tmp_path, env=dict(os.environ))
    try:
        client = storage.Client(
            project=gcs_client.project,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": f"http://127.0.0.1:{port}"},
        )
        gcs = GcsStorage(client)
        dest = f"gs://{bucket}/preserved/{uid}"
        first = copy_part(gcs, dest, CapturePart(part_id="p-0", items=items))
        assert not first.conflicts and not first.missing
        assert sorted(o.destination for o in first.objects) == [f"{dest}/{i.dest_rel}" for i in items]
        for k in range(len(items)):
            got = src.blob(f"preserved/{uid}/run/logs/{k:03d}.log").download_as_bytes()
            assert got == f"line {k}\n".encode() * (k + 1)
        again = copy_part(gcs, dest, CapturePart(part_id="p-1", items=items))
        assert len(again.objects) == len(items) and not again.conflicts  # identical replays
        src.blob("run/logs/007.log").upload_from_string(b"rewritten since\n")
        third = copy_part(gcs, dest, CapturePart(part_id="p-2", items=items))
        assert third.conflicts == [f"{dest}/run/logs/007.log"]
        assert src.blob(f"preserved/{uid}/run/logs/007.log").download_as_bytes() == b"line 7\n" * 8
    finally:
        procs.stop_group(server.pid, popen=server.popen)


def test_requests_are_counted_by_price_class(gcs_client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    """The cost model's counter (ports/usage.py) sees every request the adapter sends, in its price class."""
    from rlcleanup.ports import usage

    gcs_client.bucket(bucket).blob("u/src").upload_from_string(b"evidence")
    gcs = GcsStorage(gcs_client)
    src, dst = f"gs://{bucket}/u/src", f"gs://{bucket}/u/dst"

    def delta(action) -> dict[str, int]:  # type: ignore[no-untyped-def]
        before = usage.totals()
        action()
        return {k: v - before[k] for k, v in usage.totals().items() if v != before[k]}

    # stat the destination, look for an unfinished rewrite's recorded token (a 404: docs/s3.md "Large copies"), rewrite
    assert delta(lambda: gcs.copy_if_absent(src, dst)) == {usage.GCS_CLASS_B: 2, usage.GCS_CLASS_A: 1}
    assert delta(lambda: gcs.copy_if_absent(src, dst)) == {usage.GCS_CLASS_B: 2}  # a replay: both stats
    assert delta(lambda: list(gcs.list(f"gs://{bucket}/u"))) == {usage.GCS_CLASS_A: 1}  # one listing page
    assert delta(lambda: gcs.read_range(src, 0, 4)) == {usage.GCS_CLASS_B: 1}
    assert delta(lambda: gcs.write_if_absent(f"gs://{bucket}/u/new", b"x")) == {usage.GCS_CLASS_A: 1}
    assert delta(lambda: gcs.delete(f"gs://{bucket}/u/new")) == {usage.GCS_FREE: 1}
