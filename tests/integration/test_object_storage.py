"""The Storage port's semantics on both object stores, against real servers the suite starts: fake-gcs-server
(gs://) and SeaweedFS (s3://, an S3-compatible server that enforces conditional writes and SigV4 identities).
Each test runs once per scheme; the setup writes through each store's own client, never through the adapter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.ports.storage import Storage, WriteOutcome

pytestmark = pytest.mark.integration


@dataclass
class Store:
    scheme: str
    storage: Storage
    bucket: str
    put: Callable[[str, bytes], None]  # name -> bytes, through the store's own client

    def uri(self, name: str) -> str:
        return f"{self.scheme}://{self.bucket}/{name}"


@pytest.fixture(params=["gs", "s3"])
def store(request: pytest.FixtureRequest, uid: str) -> Store:
    bucket = f"store-test-{uid}"
    if request.param == "gs":
        client = request.getfixturevalue("gcs_client")
        client.create_bucket(bucket)
        return Store("gs", GcsStorage(client), bucket, lambda n, b: client.bucket(bucket).blob(n).upload_from_string(b))
    admin = request.getfixturevalue("s3_admin")
    request.getfixturevalue("s3_endpoint")  # conftest points this process's default S3 endpoint at the stack
    admin.create_bucket(Bucket=bucket)
    return Store("s3", S3Storage(), bucket, lambda n, b: admin.put_object(Bucket=bucket, Key=n, Body=b))


def test_stat_list_and_reads(store: Store) -> None:
    s = store.storage
    store.put("run/a.txt", b"0123456789")
    store.put("run/sub/b.log", b"first\nsecond\r\nthird")
    store.put("run/dir/", b"")  # a folder placeholder: not an object of the run
    store.put("runner/other.txt", b"x")  # shares the string prefix, not the folder

    info = s.stat(store.uri("run/a.txt"))
    assert info is not None and info.size == 10 and info.md5 == "eB5eJF1ptWaXm4bijSPyxw=="  # MD5 of the bytes
    if store.scheme == "gs":
        assert info.crc32c and info.generation
    else:
        assert info.etag == "781e5e245d69b566979b86e28d23f2c7" and info.crc32c is None
    assert s.stat(store.uri("run/missing")) is None
    assert [o.uri for o in s.list(store.uri("run"))] == [store.uri("run/a.txt"), store.uri("run/sub/b.log")]
    assert [o.uri for o in s.list(store.uri("run/"))] == [store.uri("run/a.txt"), store.uri("run/sub/b.log")]
    assert list(s.list(store.uri("nothing-here"))) == []

    assert s.read_range(store.uri("run/a.txt"), 2, 3) == b"234"
    assert s.read_range(store.uri("run/a.txt"), 8, 100) == b"89"  # short at the end
    assert s.read_range(store.uri("run/a.txt"), 0, 0) == b""
    assert s.read_bytes(store.uri("run/a.txt")) == b"0123456789"
    with pytest.raises(ValueError):
        s.read_bytes(store.uri("run/a.txt"), max_bytes=5)
    with pytest.raises(FileNotFoundError):
        s.read_bytes(store.uri("run/nope"))
    assert list(s.iter_lines(store.uri("run/sub/b.log"))) == ["first", "second", "third"]


def test_read_range_edges(store: Store) -> None:
    data = bytes(range(256)) * 40  # 10,240 bytes
    names = ["plain.bin", "dir/sub dir/shard 00001-of-00030.safetensors", "q?x#y%20&z+é~'.bin"]
    for name in names:
        store.put(name, data)
    for name in names:
        uri = store.uri(name)
        assert store.storage.read_range(uri, 0, 8) == data[:8], name
        assert store.storage.read_range(uri, 8, 4096) == data[8:4104], name
        assert store.storage.read_range(uri, 10_000, 1000) == data[10_000:], name
        assert store.storage.read_range(uri, 10_239, 1) == data[-1:], name
        assert store.storage.read_range(uri, 10_240, 8) == b"", name  # starts exactly at the end
        assert store.storage.read_range(uri, 50_000, 8) == b"", name  # far beyond it
    with pytest.raises(FileNotFoundError):
        store.storage.read_range(store.uri("no/such/object"), 0, 8)
    store.put("empty", b"")
    assert store.storage.read_range(store.uri("empty"), 0, 8) == b""


def test_ranged_reads_share_a_pool_across_threads(store: Store) -> None:
    from concurrent.futures import ThreadPoolExecutor

    blobs = {f"s/{k:03d}": bytes([k]) * (100 + k) for k in range(48)}
    for name, body in blobs.items():
        store.put(name, body)
    jobs = [(name, start) for name in blobs for start in (0, 50, 90, 200)]

    def read(job: tuple[str, int]) -> bool:
        name, start = job
        return store.storage.read_range(store.uri(name), start, 60) == blobs[name][start : start + 60]

    with ThreadPoolExecutor(32) as pool:
        assert all(pool.map(read, jobs))
    with pytest.raises(FileNotFoundError):
        store.storage.read_range(store.uri("s/none"), 0, 8)
    assert store.storage.read_range(store.uri("s/000"), 0, 8) == blobs["s/000"][:8]


def test_iter_lines_streams_large_objects(store: Store) -> None:
    lines = [f"step {i}: " + "x" * 200 for i in range(60_000)]  # ~12.5 MB: several 4 MiB chunks
    store.put("big.log", "\n".join(lines).encode())
    seen = 0
    for i, line in enumerate(store.storage.iter_lines(store.uri("big.log"))):
        assert line == lines[i]
        seen += 1
    assert seen == len(lines)


def test_write_if_absent(store: Store) -> None:
    uri = store.uri("w/obj.json")
    assert store.storage.write_if_absent(uri, b'{"a": 1}') is WriteOutcome.created
    assert store.storage.write_if_absent(uri, b'{"a": 1}') is WriteOutcome.identical
    assert store.storage.write_if_absent(uri, b'{"a": 2}') is WriteOutcome.conflict
    assert store.storage.read_bytes(uri) == b'{"a": 1}'  # the server enforced the precondition: never overwritten


def test_copy_if_absent_is_server_side_and_write_once(store: Store) -> None:
    s = store.storage
    store.put("src/a.bin", b"A" * 1000)
    store.put("src/b.bin", b"B" * 1000)
    assert s.copy_if_absent(store.uri("src/a.bin"), store.uri("dst/a.bin")) is WriteOutcome.created
    assert s.read_bytes(store.uri("dst/a.bin")) == b"A" * 1000
    assert s.copy_if_absent(store.uri("src/a.bin"), store.uri("dst/a.bin")) is WriteOutcome.identical
    assert s.copy_if_absent(store.uri("src/b.bin"), store.uri("dst/a.bin")) is WriteOutcome.conflict
    assert s.read_bytes(store.uri("dst/a.bin")) == b"A" * 1000
    with pytest.raises(FileNotFoundError):
        s.copy_if_absent(store.uri("src/none.bin"), store.uri("dst/none.bin"))


def test_delete(store: Store) -> None:
    store.put("d/x", b"x")
    assert store.storage.delete(store.uri("d/x")) is True
    assert store.storage.stat(store.uri("d/x")) is None
    assert store.storage.delete(store.uri("d/x")) is False


def test_list_after_resumes_in_name_order_on_the_server(store: Store) -> None:
    """A paged capture plan resumes after the last name it listed (ports.storage.list_in_name_order). Name order
    is byte order ('.' sorts before '/'), the name itself is not listed again, and a name that is gone still
    resumes. GCS resumes on the server (ListsAfter, `startOffset`); S3 does not: SeaweedFS orders `start-after`
    by directory entries (after `run/a.txt` it skips `run/a/b.txt`), so a server-side resume could silently skip
    objects of a run on such a server; the S3 adapter lists and the helper sorts and filters."""
    from rlcleanup.ports.storage import ListsAfter, list_in_name_order

    names = ["run/a.txt", "run/a/b.txt", "run/a0", "run/b/c/d.log", "run/z"]
    for name in names:
        store.put(name, name.encode())
    store.put("runner/x", b"x")  # shares the string prefix, not the folder
    s = store.storage
    assert isinstance(s, ListsAfter) == (store.scheme == "gs")
    uris = [store.uri(n) for n in names]

    def after(start: str | None, prefix: str = "run") -> list[str]:
        return [o.uri for o in list_in_name_order(s, store.uri(prefix), start)]

    assert after(None) == uris
    for i, uri in enumerate(uris):
        assert after(uri) == uris[i + 1 :], uri
    assert after(store.uri("run/a1")) == uris[3:]  # never existed
    assert after(store.uri("ruu")) == []  # past the prefix
    assert after(store.uri("aaa")) == uris  # before the prefix
    assert after(uris[1], "run/") == uris[2:]
    if store.scheme == "gs":  # and through the stock client, as when the lean pool is off
        stock = GcsStorage(s.client, lean_reads=False)  # type: ignore[attr-defined]
        assert [o.uri for o in stock.list_after(store.uri("run"), uris[1])] == uris[2:]


def test_listings_carry_creation_time_so_temp_objects_know_when_they_die(store: Store) -> None:
    """GCS timeCreated, S3 Last-Modified: a `tmp/ttl=<N>d/` object dies created + N days (steps/expiry.py)."""
    from datetime import UTC, datetime, timedelta

    from rlcleanup.ports.storage import list_in_name_order
    from rlcleanup.steps.expiry import expires_at

    before = datetime.now(UTC) - timedelta(minutes=5)
    store.put("tmp/ttl=3d/skyrl/users/a/job/checkpoints/latest_ckpt_global_step.txt", b"5")
    store.put("users/a/skyrl/job/resolved-skyrl.json", b"{}")
    listed = {o.uri: o for prefix in ("tmp", "users") for o in store.storage.list(store.uri(prefix))}
    temp = listed[store.uri("tmp/ttl=3d/skyrl/users/a/job/checkpoints/latest_ckpt_global_step.txt")]
    durable = listed[store.uri("users/a/skyrl/job/resolved-skyrl.json")]
    assert temp.created is not None and temp.created >= before
    # The backend declares its lifecycle rule on what it lists (ports/lifecycle.py): fake-gcs is GCS (the Age
    # condition), SeaweedFS an S3-compatible store (created + N days, assumed); AWS would round to midnight UTC.
    from rlcleanup.ports.lifecycle import GCS_AGE, S3_COMPATIBLE_EXPIRATION

    assert temp.lifecycle is (GCS_AGE if store.scheme == "gs" else S3_COMPATIBLE_EXPIRATION)
    dies = expires_at(temp)
    assert dies is not None and dies == temp.created + timedelta(days=3)
    assert expires_at(durable) is None
    stat = store.storage.stat(temp.uri)
    assert stat is not None and stat.created == temp.created
    assert [o.created for o in list_in_name_order(store.storage, store.uri("tmp"))] == [temp.created]
