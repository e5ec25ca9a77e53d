"""Shared by the CLI tests: one invocation of the app, and an environment where every default (records, keys,
stack state) lives under the test's own directories and no cloud backend is reachable."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcleanup.cli.main import app

runner = CliRunner()


def isolated_cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """XDG dirs and HOME under tmp_path, no emulator or project variables; returns HOME."""
    for var in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "RLCLEANUP_DB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("RLCLEANUP_STACK_DIR", raising=False)
    for var, name in (("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(var, str(tmp_path / name))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr
