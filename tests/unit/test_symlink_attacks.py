"""Issue 45 items 1-5: the run's writer controls every name in the run's bucket, symlinks included
(docs/authority.md §8). After a publish and a reclaim on the embedded default, a symlink planted in the quarantine
or the run never leads `restore`, a `purge`, a reclaim or `quarantine-expire` out of its place: each is refused
(`unsafe_path`) and nothing outside is read, written or deleted (P30-P33)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from authority_support import World, make_world
from typer.testing import CliRunner

from rlcleanup.cli.main import app

QUARANTINE = "_rlcleanup-quarantine"
runner = CliRunner()


def tree(root: Path) -> dict[str, tuple[str, bytes, int]]:
    """Every name under root (links not followed) with its kind, bytes (or link target) and mtime."""
    out: dict[str, tuple[str, bytes, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                out[str(path.relative_to(root))] = ("link", os.readlink(path).encode(), st.st_mtime_ns)
            elif path.is_dir():
                out[str(path.relative_to(root))] = ("dir", b"", 0)
            else:
                out[str(path.relative_to(root))] = ("file", path.read_bytes(), st.st_mtime_ns)
    return out


def _cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    for var in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "RLCLEANUP_DB"):
        monkeypatch.delenv(var, raising=False)
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout + result.stderr


def _bucket(w: World) -> Path:
    return Path(w.run_uri).parent


def _reclaimed(tmp_path: Path) -> tuple[World, Path, Path]:
    """(world, the export directory the reclaim emptied, its slot in the quarantine)."""
    w = make_world(tmp_path)
    w.deliver(w.message(w.grant("publish")))
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "reclaimed", w.action(grant.grant_id)
    export = Path(w.candidate(40).uri)
    key = export.relative_to(_bucket(w))
    slot = _bucket(w) / QUARANTINE / w.run_id / grant.grant_id / key
    assert any(slot.iterdir()) and not any(p.is_file() for p in export.rglob("*"))
    return w, export, slot


def _slot_replaced_by_link(slot: Path, target: Path) -> None:
    """The writer moves the real slot aside (inside the bucket) and puts a link to `target` in its place."""
    slot.rename(slot.with_name("moved-aside"))
    slot.symlink_to(target, target_is_directory=True)


def test_1_restore_never_deletes_the_published_copy_through_a_linked_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, export, slot = _reclaimed(tmp_path)
    published = w.dest_root / "model"
    _slot_replaced_by_link(slot, published)  # same names, same bytes: the twin check alone would pass
    before = tree(published)
    code, out = _cli(monkeypatch, "restore", w.run_id, "--db", str(tmp_path / "records.db"))
    assert code == 3, out
    assert "refusing symlink" in out, out
    assert tree(published) == before  # every model file of the destination is still there, untouched
    assert not any(p.is_file() for p in export.rglob("*"))  # nothing was restored through the link either


def test_2_purge_never_deletes_outside_the_quarantine(tmp_path: Path) -> None:
    w, _export, slot = _reclaimed(tmp_path)
    published = w.dest_root / "model"
    _slot_replaced_by_link(slot, published)
    held_aside = tree(slot.with_name("moved-aside"))
    before = tree(published)
    purge = w.grant("purge")
    w.deliver(w.message(purge))
    action = w.action(purge.grant_id)
    assert action["state"] == "refused" and "refusing symlink" in str(action), action
    assert tree(published) == before
    assert tree(slot.with_name("moved-aside")) == held_aside  # the writer's own files: not ours to delete either


def test_3_restore_never_writes_the_weights_outside_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w, export, slot = _reclaimed(tmp_path)
    public = tmp_path / "world-readable"
    public.mkdir(mode=0o755)
    shutil.rmtree(export)
    export.symlink_to(public, target_is_directory=True)
    held = tree(slot)
    code, out = _cli(monkeypatch, "restore", w.run_id, "--db", str(tmp_path / "records.db"), "--json")
    assert code == 3, out
    assert "refusing symlink" in out, out
    assert not any(public.iterdir())  # not one file of the run's weights left the run
    assert tree(slot) == held  # and the quarantine still holds every object for a later restore


def test_4_a_planted_quarantine_link_beside_the_run_root_refuses_the_reclaim(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    w.deliver(w.message(w.grant("publish")))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (_bucket(w) / QUARANTINE).symlink_to(elsewhere, target_is_directory=True)
    export = Path(w.candidate(40).uri)
    before = tree(export)
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["state"] == "refused" and "refusing symlink" in str(action), action
    assert not any(elsewhere.iterdir())  # received nothing
    assert tree(export) == before  # and the run kept every object


def test_5_quarantine_expire_never_deletes_through_a_linked_quarantine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "bucket"
    root.mkdir()
    old_files = tmp_path / "old-files"
    for name in ("a/w.bin", "b.txt"):
        path = old_files / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode())
        long_ago = time.time() - 90 * 86400
        os.utime(path, (long_ago, long_ago))
    (root / QUARANTINE).symlink_to(old_files, target_is_directory=True)
    before = tree(old_files)
    code, out = _cli(monkeypatch, "quarantine-expire", str(root), "--json")
    assert code == 3, out
    assert "refusing symlink" in out, out
    assert tree(old_files) == before
    # a real quarantine beside it still expires as before
    (root / QUARANTINE).unlink()
    real = root / QUARANTINE / "run" / "g" / "w.bin"
    real.parent.mkdir(parents=True)
    real.write_bytes(b"old")
    os.utime(real, (time.time() - 90 * 86400,) * 2)
    code, out = _cli(monkeypatch, "quarantine-expire", str(root), "--json")
    assert code == 0 and json.loads(out)["deleted"] == [str(real)], out
