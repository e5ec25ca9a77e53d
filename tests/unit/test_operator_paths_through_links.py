"""The local backend follows no link below a root (docs/authority.md P3), but the roots an operator names are theirs:
a run root, a preserve root, a state home or a grant destination reached through a symlinked mount (`/data ->
/mnt/disk`, macOS's `/tmp -> /private/tmp`) is resolved once where the operator names it, so the run is processed,
not refused as `unsafe_path`. A link planted inside the run is still refused (test_symlinked_parents.py), and so is a
path the run's own config names through a link: the run's writer controls every name under the run's storage root,
so no link there is trusted (docs/authority.md P3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.cli.destinations import absolute_if_local
from rlcleanup.paths import default_preserve_root


def _mount(tmp_path: Path) -> Path:
    """A directory reached through a symlinked 'mount': <tmp>/mnt -> <tmp>/disk."""
    (tmp_path / "disk").mkdir()
    mount = tmp_path / "mnt"
    mount.symlink_to(tmp_path / "disk", target_is_directory=True)
    return mount


def test_a_run_and_its_preserve_root_under_a_symlinked_mount_are_processed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolated_cli_env(tmp_path, monkeypatch)
    mount = _mount(tmp_path)
    # The trainer wrote the run (and its config's paths) on the disk; the operator names it through the mount.
    code, out, err = invoke("sample-run", str(tmp_path / "disk" / "runs"), "--scenario", "completed-resumed")
    assert code == 0, err
    run_root = str(mount / Path(out.strip()).relative_to(tmp_path / "disk"))
    code, out, err = invoke("run", run_root, "--preserve-to", str(mount / "preserved"), "--json", "--quiet")
    assert code == 0, out + err
    record = json.loads(out)
    assert record["status"] in ("complete", "awaiting_authority"), record["errors"]
    assert not [e for e in record["errors"] if "unsafe_path" in json.dumps(e)]
    assert record["run_uri"].startswith(str(tmp_path / "disk"))  # the real path, resolved once
    assert any((tmp_path / "disk" / "preserved").rglob("manifest.json"))


def test_the_default_preserve_root_and_a_grant_destination_are_their_real_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount = _mount(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(mount / "state"))
    assert default_preserve_root() == tmp_path / "disk" / "state" / "rlcleanup" / "preserved"
    assert absolute_if_local(str(mount / "models" / "m")) == str(tmp_path / "disk" / "models" / "m")
    assert absolute_if_local("gs://bucket/models/m") == "gs://bucket/models/m"
