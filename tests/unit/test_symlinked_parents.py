"""Issue 45, the rest of the class: on the embedded default no local create, write or delete follows a symlinked
parent, and no read of a run's file follows one out of the run, whether or not the operation declared anchors
(adapters/local_storage.py walks an unanchored path from `/`, refusing a link at any depth). Each test plants one
link where the pipeline writes or reads and asserts the outside is untouched and the run says `unsafe_path`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from authority_support import make_world
from test_symlink_attacks import tree

from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.ports.storage import UnsafePathError
from rlcleanup.runtime.embedded import manual_event


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    (outside / "temp").mkdir(parents=True)
    (outside / "temp" / "keep.txt").write_bytes(b"not the run's\n")
    return outside


def test_preserved_evidence_is_never_written_through_a_linked_directory(tmp_path: Path) -> None:
    w = make_world(tmp_path, run=False)
    outside = _outside(tmp_path)
    (tmp_path / "preserved").mkdir()
    (tmp_path / "preserved" / w.run_id).symlink_to(outside, target_is_directory=True)
    before = tree(outside)
    w.stack.emit(manual_event(w.run_uri))
    assert tree(outside) == before  # not one evidence file landed outside the preserve root
    record = w.stack.ports.records.get(w.run_id)
    assert record is not None
    assert any(e.code == "unsafe_path" and w.run_id in e.message for e in record.errors), record.errors


def test_a_publish_never_writes_through_a_linked_directory_in_the_destination(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    outside = _outside(tmp_path)
    (w.dest_root / "model").mkdir()
    (w.dest_root / "model" / "training_logs").symlink_to(outside, target_is_directory=True)
    before = tree(outside)
    grant = w.grant("publish")
    w.deliver(w.message(grant))
    assert tree(outside) == before  # nothing of the run was published outside the destination
    action = w.action(grant.grant_id)
    assert action["state"] != "published" and "symlink" in str(action), action


def test_no_read_of_a_run_file_follows_a_linked_step_directory(tmp_path: Path) -> None:
    """What capture and validation ask of a run's files (stat, whole and ranged reads, lines, listings), below a
    step directory the run's writer replaced by a link (`checkpoints/global_step_10 -> /etc`-like): each refuses
    as unsafe_path; before, a single-file read (and a listing of the linked directory itself) followed it out."""
    outside = _outside(tmp_path)
    checkpoints = tmp_path / "runs" / "run" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "global_step_10").symlink_to(outside, target_is_directory=True)
    storage = RoutingStorage()
    file_uri = str(checkpoints / "global_step_10" / "temp" / "keep.txt")
    reads: list[Callable[[], object]] = [
        lambda: storage.stat(file_uri),
        lambda: storage.read_bytes(file_uri),
        lambda: storage.read_range(file_uri, 0, 4),
        lambda: list(storage.iter_lines(file_uri)),
        lambda: list(storage.list(str(checkpoints / "global_step_10"))),
        lambda: storage.list_children(str(checkpoints / "global_step_10" / "temp")),
    ]
    for read in reads:
        with pytest.raises(UnsafePathError, match="global_step_10"):
            read()
