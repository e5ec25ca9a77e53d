"""Issue 45 on the operations that declare no anchors: capture's copy into the preserved evidence and a publish's
pinned copy to a local destination, on the embedded default (RoutingStorage, unanchored). A link planted at any
depth of a run file's path, of its evidence path or of its destination path (to a directory outside holding the
same names with other bytes, to a file outside, dangling, or a loop) never leads them out: nothing outside is
written or deleted, no outside byte reaches the evidence or the destination, and every file whose path the link
lies on is refused with `unsafe_path` (never skipped in silence); the others are copied as they are."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_symlink_attacks import tree
from test_symlink_properties import files, targets

from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.authority.pinning import pinned_copy
from rlcleanup.ports.storage import ObjectInfo, UnsafePathError

OUTSIDE = b"outside-only bytes: "  # every outside file starts so; no run file does


# The same random trees and link targets as the opted-in operations' properties (test_symlink_properties.py).
plant = st.tuples(st.integers(0, 3), st.sampled_from(["run", "copy"]), st.integers(0, 12), targets)


@dataclass
class Place:
    base: Path
    run: Path  # the run's files (its checkpoints, logs)
    copies: Path  # where they are copied: the preserve root's evidence, or a publish's destination
    outside: Path
    rels: list[Path]


@contextmanager
def place(tree_files: list[tuple[list[str], str, bytes]]) -> Iterator[Place]:
    """A run, an empty place to copy it to, and outside both a directory with the run's names and other bytes."""
    base = Path(tempfile.mkdtemp(prefix="rlc-parents-"))
    try:
        run, copies, outside = base / "bucket" / "run", base / "copies" / "run-1", base / "outside"
        rels = []
        for dirs, name, data in tree_files:
            rel = Path(*dirs, name)
            for root, body in ((run, data), (outside, OUTSIDE + data)):
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(body)
            rels.append(rel)
        (outside / "secret").write_bytes(OUTSIDE + b"secret")
        copies.mkdir(parents=True)
        yield Place(base, run, copies, outside, rels)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def plant_link(p: Place, which: int, side: str, depth: int, target: str) -> Path:
    """A link in place of one component (below the run or the copies' root) of one file's path; the component
    there, if any, is moved aside. Returns the link."""
    root = p.run if side == "run" else p.copies
    path = root / p.rels[which % len(p.rels)]
    chain = [path, *[a for a in path.parents if root in a.parents]][::-1]
    at = chain[depth % len(chain)]
    at.parent.mkdir(parents=True, exist_ok=True)
    if at.exists() or at.is_symlink():
        at.rename(p.base / f"aside-{os.urandom(4).hex()}")
    link_to = {
        "outside_dir": p.outside / at.relative_to(root) if at != path else p.outside / "secret",
        "outside_file": p.outside / "secret",
        "dangling": p.base / "nowhere" / "x",
        "loop": at,
    }[target]
    at.symlink_to(link_to)
    return at


def _through(path: Path, link: Path) -> bool:
    return path == link or link in path.parents


def _check(p: Place, link: Path, outside_before: dict[str, tuple[str, bytes, int]], refused: set[Path]) -> None:
    assert tree(p.outside) == outside_before  # nothing outside written or deleted
    copied = tree(p.copies)
    assert not any(kind == "file" and OUTSIDE in data for kind, data, _ in copied.values())
    hit = {rel for rel in p.rels if _through(p.run / rel, link) or _through(p.copies / rel, link)}
    assert hit and hit == refused, (hit, refused)  # each file on the link refused, and only those
    for rel in set(p.rels) - hit:
        assert (p.copies / rel).read_bytes() == (p.run / rel).read_bytes()


fast = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fast
@given(files, plant)
def test_capture_copies_nothing_through_a_planted_link(tree_files, planted) -> None:  # type: ignore[no-untyped-def]
    """Capture lists the run, then copies each file into the evidence (`copy_if_absent`, write-once)."""
    storage = RoutingStorage()
    with place(tree_files) as p:
        outside = tree(p.outside)
        link = plant_link(p, *planted)
        try:
            listed = {Path(o.uri).relative_to(p.run) for o in storage.list(str(p.run))}
        except UnsafePathError:
            listed = None  # a link in the run: the listing refuses it (capture records unsafe_path)
        assert listed is None or planted[1] == "copy"
        refused: set[Path] = set()
        for rel in p.rels:
            try:
                storage.copy_if_absent(str(p.run / rel), str(p.copies / rel))
            except UnsafePathError:
                refused.add(rel)
        _check(p, link, outside, refused)


@fast
@given(files, plant)
def test_a_publish_copies_nothing_through_a_planted_link(tree_files, planted) -> None:  # type: ignore[no-untyped-def]
    """A publish pins each file when the grant is checked, then copies that version to the destination."""
    storage = RoutingStorage()
    with place(tree_files) as p:
        pins: dict[Path, ObjectInfo | None] = {rel: storage.stat(str(p.run / rel)) for rel in p.rels}
        outside = tree(p.outside)
        link = plant_link(p, *planted)
        refused: set[Path] = set()
        for rel, pin in pins.items():
            assert pin is not None
            try:
                proof = pinned_copy(storage, pin, str(p.copies / rel), grant_id="g1")
                assert proof.outcome in {"created", "identical"}, proof
            except UnsafePathError:
                refused.add(rel)
        _check(p, link, outside, refused)
