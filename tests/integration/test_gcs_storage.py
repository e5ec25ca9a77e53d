"""GcsStorage against fake-gcs-server (the stack's GCS emulator): what is GCS-specific. The port semantics every
object store shares run over gs:// and s3:// alike in test_object_storage.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.ports.storage import WriteOutcome

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
    """Several deliveries in one instance each copy with 8 workers: requests' default of 10 connections per host
    made capture-part log "Connection pool is full, discarding connection" in the 10,000-object run."""
    from rlcleanup.adapters import gcs_storage

    client = gcs_storage._client()  # STORAGE_EMULATOR_HOST points at the stack's fake-gcs-server
    for scheme in ("http://", "https://"):
        assert client._http.adapters[scheme]._pool_maxsize >= 64
