"""A hostile run shape is bounded (issue 37 item 3): many tiny files are paged through without re-listing the
whole run per page, and a run past the deployment's ceiling of objects is refused with a clear error."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.ports.storage import ListsAfter, ListsInAnyOrder, ObjectInfo, UnsafePathError, list_in_name_order
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run


def _with_tiny_files(tmp_path: Path, count: int, where: str = "logs") -> Path:
    root = write_sample_run(tmp_path / "src", "selection-policy")
    target = sorted((tmp_path / "src").rglob(f"attempts/*/{where}"))[-1] / "many"
    target.mkdir(parents=True)
    for i in range(count):
        (target / f"f{i:05d}.log").write_bytes(b"step %d ok\n" % i)
    return root


@pytest.mark.parametrize(("ceiling", "page"), [(50, 20), (50, 1000), (120, 7)])
def test_a_run_over_the_object_ceiling_is_refused_as_run_too_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ceiling: int, page: int
) -> None:
    monkeypatch.setenv("RLCLEANUP_MAX_RUN_OBJECTS", str(ceiling))
    monkeypatch.setenv("RLCLEANUP_CAPTURE_PAGE_OBJECTS", str(page))
    root = _with_tiny_files(tmp_path, 300)
    record = run_embedded(str(root), db_path=tmp_path / "r.db", preserve_root=str(tmp_path / "p"))
    assert record is not None and record.status.value == "failed"
    too_large = [e for e in record.errors if e.code == "run_too_large"]
    assert too_large and "RLCLEANUP_MAX_RUN_OBJECTS" in too_large[0].message
    assert f"ceiling of {ceiling} objects" in too_large[0].message
    # Bounded: at most the pages up to the ceiling were planned, nothing was sealed as if complete.
    assert record.preserved_object_count <= ceiling + page


def test_many_tiny_files_under_the_ceiling_are_paged_and_every_one_preserved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLCLEANUP_CAPTURE_PAGE_OBJECTS", "100")
    root = _with_tiny_files(tmp_path, 450)
    record = run_embedded(str(root), db_path=tmp_path / "r.db", preserve_root=str(tmp_path / "p"))
    assert record is not None and record.status.value == "awaiting_authority", record.errors
    preserved = list((tmp_path / "p").rglob("many/f*.log"))
    assert len(preserved) == 450
    # The storage ledger at completion is one bounded pass too: past one page of objects it is not measured
    # inline, and the record says so with the command that measures it.
    note = record.storage_ledger_note
    assert record.storage_ledger is None and note is not None
    assert "more than 100 objects" in note and f"rlcleanup storage --refresh {record.run_id}" in note
    from rlcleanup.authority.storage_ledger import measure, record_ledger
    from rlcleanup.runtime.embedded import EmbeddedStack

    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "p"))
    ledger = record_ledger(
        stack.ports.records, record.run_id, measure(stack.ports.storage, record, "refresh", record.updated_at)
    )
    refreshed = stack.ports.records.get(record.run_id)
    assert refreshed is not None and refreshed.storage_ledger_note is None  # measured now: the note is gone
    assert refreshed.storage_bytes == ledger.bytes and ledger.objects > 450


def test_a_local_page_hashes_only_what_it_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resuming a local listing after a name neither re-hashes nor re-enters what sorts before it (it did: every
    page listed and checksummed the whole tree, quadratic in the run's size)."""
    import rlcleanup.adapters.local_storage as local

    for d in range(20):
        for f in range(50):
            path = tmp_path / f"d{d:02d}" / f"f{f:02d}"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(b"x")
    hashed: list[Path] = []
    real = local.file_checksums
    monkeypatch.setattr(local, "file_checksums", lambda p: hashed.append(p) or real(p))
    storage = LocalStorage()
    assert isinstance(storage, ListsAfter)
    cursor = str(tmp_path / "d17" / "f49")
    page = [o.uri for _, o in zip(range(10), list_in_name_order(storage, str(tmp_path), cursor), strict=False)]
    assert page[0].endswith("d18/f00") and len(page) == 10
    assert len(hashed) <= 11  # this page (and the one look-ahead), not the 1,000 files of the tree


@settings(max_examples=40, deadline=None)
@given(st.lists(st.from_regex(r"[a-c.\-_0-9]{1,3}(/[a-c.\-_0-9]{1,3}){0,2}", fullmatch=True), min_size=1, max_size=25))
def test_a_local_listing_after_any_name_is_exactly_the_sorted_tail(names: list[str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        made: list[str] = []
        for name in names:
            path = base / name
            if any(part in (".", "..") for part in name.split("/")):
                continue  # not a file name: `.`/`..` name directories that already exist
            if any(p.exists() and p.is_file() for p in [*path.parents][: len(Path(name).parts) - 1]):
                continue  # a file where a directory is wanted: skip (the run would not hold both)
            if path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"")
            made.append(name)
        storage = LocalStorage()
        everything = sorted(o.uri for o in storage.list(tmp))
        cursors = [None, *everything, *(random.Random(len(everything)).sample(everything, min(3, len(everything))))]
        for cursor in cursors:
            tail = [u for u in everything if cursor is None or u > cursor]
            assert [o.uri for o in storage.list_after(tmp, cursor)] == tail


def test_a_symlink_met_on_a_resumed_local_listing_is_still_refused(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"1")
    (tmp_path / "z").symlink_to("/etc/hostname")
    storage = LocalStorage()
    with pytest.raises(UnsafePathError):
        list(storage.list_after(str(tmp_path), str(tmp_path / "a")))


class _ServerOrderedListing:
    """A backend that lists in an order of its own and cannot resume after a name (S3 as SeaweedFS orders it);
    records how many objects each pass has produced and the most any consumer could hold at once."""

    def __init__(self, names: list[str], seed: int) -> None:
        self.infos = [ObjectInfo(uri=f"s3://b/run/{n}", size=1) for n in names]
        random.Random(seed).shuffle(self.infos)
        self.passes = 0

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:  # the port's name order (unused by the paged path)
        return iter(sorted(self.infos, key=lambda o: o.uri))

    def list_any_order(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        self.passes += 1
        yield from self.infos


@settings(max_examples=60, deadline=None)
@given(
    names=st.lists(st.text(alphabet="ab./-0", min_size=1, max_size=6), min_size=0, max_size=60, unique=True),
    chunk=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=1000),
    cut=st.integers(min_value=0, max_value=60),
)
def test_a_server_ordered_listing_resumes_in_name_order_in_bounded_passes(
    names: list[str], chunk: int, seed: int, cut: int
) -> None:
    """S3 (issue 37 item 3): the paged plans' listing after a cursor is exactly the sorted tail, produced in passes
    that each keep at most `chunk` objects, one pass per chunk (never the whole listing held and sorted)."""
    store = _ServerOrderedListing(names, seed)
    assert isinstance(store, ListsInAnyOrder) and not isinstance(store, ListsAfter)
    everything = sorted(o.uri for o in store.infos)
    cursor = everything[cut] if cut < len(everything) else None
    tail = [u for u in everything if cursor is None or u > cursor]
    got = [o.uri for o in list_in_name_order(store, "s3://b/run", cursor, chunk=chunk)]  # type: ignore[arg-type]
    assert got == tail
    assert store.passes == max(1, -(-len(tail) // chunk))  # one pass per chunk of the tail


def test_a_page_of_a_server_ordered_listing_stops_after_its_passes() -> None:
    """A consumer that takes one page stops the listing: 25,000 objects, a page of 5,000, one pass of requests."""
    store = _ServerOrderedListing([f"f{i:06d}" for i in range(25_000)], seed=7)
    page = list(itertools.islice(list_in_name_order(store, "s3://b/run", None), 5_000))  # type: ignore[arg-type]
    assert [o.uri for o in page] == [f"s3://b/run/f{i:06d}" for i in range(5_000)]
    assert store.passes == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    names=st.lists(
        st.lists(st.sampled_from(["a", "a.b", "a-", "b", "ab", "z", "0"]), min_size=1, max_size=3).map("/".join),
        min_size=1,
        max_size=25,
        unique=True,
    ),
    chunk=st.integers(min_value=1, max_value=5),
    cursor=st.integers(min_value=0, max_value=30),
)
def test_a_local_walk_in_passes_lists_exactly_the_files_after_the_cursor_in_name_order(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, names: list[str], chunk: int, cursor: int
) -> None:
    """The local walk keeps at most WALK_CHUNK names per pass of a directory (a million-file directory held ~560 MiB
    of DirEntry objects per invocation): with passes of 1-5 names, a listing resumed after any cursor is still
    every file after it, in name order, each once."""
    import rlcleanup.adapters.local_storage as local

    monkeypatch.setattr(local, "WALK_CHUNK", chunk)
    root = tmp_path_factory.mktemp("walk")
    files = set()
    for name in names:  # a name that is another's directory is skipped (a path cannot be both)
        path = root / name
        if any(f == name or f.startswith(name + "/") or name.startswith(f + "/") for f in files):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        files.add(name)
    everything = sorted(f"{root}/{f}" for f in files)
    after = everything[cursor] if cursor < len(everything) else None
    listed = [o.uri for o in local.LocalStorage().list_after(str(root), after)]
    assert listed == [k for k in everything if after is None or k > after]
