"""Shared by the CLI tests: one invocation of the app, and an environment where every default (records, keys,
stack state) lives under the test's own directories and no cloud backend is reachable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcleanup.cli.main import app
from rlcleanup.samples.generator import write_sample_run

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


def classify_sample(base: Path, sample: str) -> tuple[str, Path]:
    """The sample run written under base/src and classified through `run --json`: (its run id, its root)."""
    root = write_sample_run(base / "src", sample)
    code, out, err = invoke("run", str(root), "--json")
    assert code == 0, err
    return json.loads(out)["run_id"], root


def add_approver(approver_id: str, *prefixes: Path) -> None:
    """A key made by `keygen` and its approver registered, allowed to grant under each of prefixes."""
    code, out, err = invoke("keygen", "--id", approver_id)
    assert code == 0, err
    public = next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))
    allowed = [arg for prefix in prefixes for arg in ("--prefix", str(prefix))]
    code, _, err = invoke("approver", "add", approver_id, "--public-key", public, *allowed)
    assert code == 0, err


def ray_export_env(home: Path, monkeypatch: pytest.MonkeyPatch, converter: list[str], dashboard: str) -> None:
    """isolated_cli_env under home, as a module's fixture made it, with the export settings of a deployment that
    submits to Ray (the converter's argv, the dashboard's URL)."""
    isolated_cli_env(home, monkeypatch)
    monkeypatch.setenv("RLCLEANUP_EXPORT_CONVERTER", json.dumps(converter))
    monkeypatch.setenv("RLCLEANUP_EXPORT_CONTROLLER", "ray")
    monkeypatch.setenv("RLCLEANUP_RAY_DASHBOARD", dashboard)


def read_terminal(fd: int) -> bytes:
    """One read from a pseudo-terminal's parent side; b"" once the child has closed it (EOF, or Linux's EIO)."""
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: the child closed the terminal
        return b""
