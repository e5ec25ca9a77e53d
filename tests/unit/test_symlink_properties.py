"""Issue 45: for reclaim's move, restore, purge and quarantine expiry, a symlink planted at any depth of any path
they touch (to a directory or a file outside the run's bucket, dangling, or a loop) never leads them out: nothing
outside the bucket is read, written or deleted (its names, bytes and mtimes are the same afterwards, and no byte of
it appears inside), and the objects whose path the link lies on are refused with the inside as it was."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_symlink_attacks import tree

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.authority import quarantine
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.storage import UnsafePathError, anchored_to
from rlcleanup.settings import QuarantineSettings

SETTINGS = QuarantineSettings(prefix="_rlcleanup-quarantine", days=7)
GRANT = "g1"
SECRET = b"outside-only bytes: never read into the bucket"
EXPORT = Path("run/exports/global_step_1/policy")


def _file_path(entry: tuple[list[str], str, bytes]) -> str:
    return "/".join([*entry[0], entry[1]])


names = st.sampled_from(["a", "b"])
files = st.lists(
    st.tuples(st.lists(names, max_size=2), st.sampled_from(["w.bin", "x.json"]), st.binary(min_size=1, max_size=64)),
    min_size=1,
    max_size=4,
    unique_by=_file_path,
)
targets = st.sampled_from(["outside_dir", "outside_file", "dangling", "loop"])
plant = st.tuples(st.integers(0, 3), st.sampled_from(["source", "slot"]), st.integers(0, 12), targets)


@dataclass
class Place:
    base: Path
    bucket: Path
    outside: Path
    sources: list[Path]
    record: CompletionRecord
    records: SqliteRunRecords
    storage: LocalStorage

    def slot(self, source: Path) -> Path:
        return self.bucket / SETTINGS.prefix / self.record.run_id / GRANT / source.relative_to(self.bucket)


@contextmanager
def place(tree_files: list[tuple[list[str], str, bytes]]) -> Iterator[Place]:
    """A run's bucket with one export, and beside it (outside) a mirror of the export (same names, same bytes: a
    twin check through a link to it would pass) and a file of bytes found nowhere else."""
    base = Path(tempfile.mkdtemp(prefix="rlc-links-"))
    try:
        bucket, outside = base / "bucket", base / "outside"
        sources = []
        for dirs, name, data in tree_files:
            rel = Path(*dirs, name)
            for root in (bucket / EXPORT, outside):
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
            sources.append(bucket / EXPORT / rel)
        (outside / "secret").write_bytes(SECRET)
        record = CompletionRecord(run_id="run-1", run_uri=str(bucket / "run"))
        yield Place(base, bucket, outside, sources, record, SqliteRunRecords(base / "r.db"), LocalStorage())
    finally:
        shutil.rmtree(base, ignore_errors=True)


def move_all(p: Place, now: datetime) -> dict[Path, str]:
    """Reclaim's move of every source into quarantine, as reclaim runs it (anchored); source -> refusal."""
    refused: dict[Path, str] = {}
    with anchored_to(p.storage, quarantine.local_anchors(p.record)) as storage:
        for source in p.sources:
            try:
                info = storage.stat(str(source))
                assert info is not None
                quarantine.move(storage, p.records, p.record, GRANT, info, now, SETTINGS, step=1, digest="d")
            except UnsafePathError as exc:
                refused[source] = str(exc)
    return refused


def plant_link(p: Place, which: int, side: str, depth: int, target: str) -> tuple[Path, Path]:
    """A link in place of one component of a file's source or slot path (the component moved aside, inside the
    bucket); returns (the chosen file's source, the planted link)."""
    source = p.sources[which % len(p.sources)]
    path = source if side == "source" else p.slot(source)
    chain = [path, *[a for a in path.parents if a != p.bucket and p.bucket in a.parents]][::-1]
    at = chain[depth % len(chain)]
    at.parent.mkdir(parents=True, exist_ok=True)  # the writer can make real directories on the way
    if at.exists() or at.is_symlink():
        at.rename(p.bucket / f"aside-{os.urandom(4).hex()}")
    link_to = {
        "outside_dir": p.outside / at.relative_to(p.bucket / EXPORT) if p.bucket / EXPORT in at.parents else p.outside,
        "outside_file": p.outside / "secret",
        "dangling": p.base / "nowhere" / "x",
        "loop": at,
    }[target]
    at.symlink_to(link_to)
    return source, at


def _through(path: Path, link: Path) -> bool:
    return path == link or link in path.parents


def _outside_untouched(p: Place, before: dict[str, tuple[str, bytes, int]]) -> None:
    assert tree(p.outside) == before
    inside = tree(p.bucket)
    assert not any(kind == "file" and SECRET in data for kind, data, _ in inside.values())


def _as_they_were(p: Place, refused: list[Path], before: dict[str, tuple[str, bytes, int]]) -> None:
    """Every refused object's source and its quarantine slot are as they were before the operation."""
    after = tree(p.bucket)
    for s in refused:
        for path in (s, p.slot(s)):
            key = str(path.relative_to(p.bucket))
            assert after.get(key) == before.get(key)


@dataclass
class Planted:
    """A place with a link planted in it, and what its outside and its bucket held just before the link."""

    p: Place
    now: datetime
    source: Path
    link: Path
    outside: dict[str, tuple[str, bytes, int]]
    inside: dict[str, tuple[str, bytes, int]]


@contextmanager
def planted_in(
    tree_files: list[tuple[list[str], str, bytes]], planted: tuple[int, str, int, str], *, moved: bool
) -> Iterator[Planted]:
    """A place whose sources are already in quarantine when `moved` (restore, purge and expiry start there), then one
    planted link; the outside is read before the link, the bucket after it (the link's own rename is not the
    operation's doing)."""
    with place(tree_files) as p:
        now = datetime.now(UTC)
        if moved:
            assert not move_all(p, now)
        outside = tree(p.outside)
        source, link = plant_link(p, *planted)
        yield Planted(p, now, source, link, outside, tree(p.bucket))


def _hit(p: Place, link: Path) -> list[Path]:
    """The sources whose path or quarantine slot the link lies on."""
    return [s for s in p.sources if _through(s, link) or _through(p.slot(s), link)]


fast = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fast
@given(files, plant)
def test_reclaim_moves_nothing_through_a_planted_link(tree_files, planted) -> None:  # type: ignore[no-untyped-def]
    with planted_in(tree_files, planted, moved=False) as t:
        refused = move_all(t.p, t.now)
        _outside_untouched(t.p, t.outside)
        hit = _hit(t.p, t.link)
        assert t.source in hit and set(hit) <= set(refused), (hit, refused)
        _as_they_were(t.p, hit, t.inside)


@fast
@given(files, plant)
def test_restore_reads_writes_and_deletes_nothing_through_a_planted_link(tree_files, planted) -> None:  # type: ignore[no-untyped-def]
    with planted_in(tree_files, planted, moved=True) as t:
        result = quarantine.restore(t.p.storage, t.p.records, t.p.record, t.now, SETTINGS)
        _outside_untouched(t.p, t.outside)
        hit = _hit(t.p, t.link)
        assert t.source in hit and not set(map(str, hit)) & set(result.restored), result
        for s in hit:
            assert any(r.startswith(str(s)) for r in result.refused), result
        _as_they_were(t.p, hit, t.inside)


@fast
@given(files, plant)
def test_purge_deletes_only_inside_the_real_quarantine(tree_files, planted) -> None:  # type: ignore[no-untyped-def]
    with planted_in(tree_files, planted, moved=True) as t:
        p = t.p
        purged, refused = quarantine.purge(p.storage, p.records, p.record, t.now, SETTINGS, step=1, digest="d")
        _outside_untouched(p, t.outside)
        hit = [s for s in p.sources if _through(p.slot(s), t.link)]
        assert not {str(p.slot(s)) for s in hit} & set(purged) and len(refused) == len(hit), (purged, refused)
        after = tree(p.bucket)
        for s in hit:
            key = str(p.slot(s).relative_to(p.bucket))
            assert after.get(key) == t.inside.get(key)


@fast
@given(files, plant)
def test_quarantine_expiry_deletes_only_inside_the_real_quarantine(tree_files, planted) -> None:  # type: ignore[no-untyped-def]
    with planted_in(tree_files, planted, moved=True) as t:
        p = t.p
        later = t.now + timedelta(days=SETTINGS.days + 1)
        try:
            gone = quarantine.expire(p.storage, str(p.bucket), SETTINGS, later)
        except UnsafePathError:
            gone = None
        _outside_untouched(p, t.outside)
        if any(_through(p.slot(s), t.link) for s in p.sources):
            assert gone is None and tree(p.bucket) == t.inside  # refused before anything was deleted
        else:  # the link lies on a source path only: the quarantine expires as usual
            assert gone is not None and sorted(gone) == sorted(str(p.slot(s)) for s in p.sources)
