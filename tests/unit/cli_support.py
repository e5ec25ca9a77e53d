"""Shared by the CLI tests: one invocation of the app, and an environment where every default (records, keys,
stack state) lives under the test's own directories and no cloud backend is reachable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcleanup.cli.main import app

runner = CliRunner()
# Variables of the developer's own shell that would change what a probe of the environment (doctor) finds.
AMBIENT = (
    "STORAGE_EMULATOR_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "HF_TOKEN",
    "RLCLEANUP_PRESERVE_ROOT",
    "RLCLEANUP_NOTIFY_WEBHOOK_URL",
    "RLCLEANUP_NOTIFY_CHANNELS",
    "RLCLEANUP_NOTIFY_SMTP_HOST",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_S3_ADDRESSING_STYLE",
    "RLCLEANUP_S3_ADDRESSING_STYLE",
)


def isolated_cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """XDG dirs and HOME under tmp_path, no emulator or project variables; returns HOME."""
    for var in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "RLCLEANUP_DB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("RLCLEANUP_STACK_DIR", raising=False)
    for var, name in (("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(var, str(tmp_path / name))
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)  # a module's tests return to the environment its fixture made
    monkeypatch.setenv("HOME", str(home))
    return home


def without_ambient_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the developer's own credentials, endpoints or channels (AMBIENT), no gcloud configuration of theirs,
    and google.auth never pings a metadata server off GCP."""
    for var in AMBIENT:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def read_terminal(fd: int) -> bytes:
    """One read from a pseudo-terminal's parent side; b"" once the child has closed it (EOF, or Linux's EIO)."""
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: the child closed the terminal
        return b""
