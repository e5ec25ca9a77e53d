"""`rlcleanup doctor` (issue 47): the record store, the preserve root, credentials per scheme, the stack, the
approvers with every prefix and the notification channels, on one screen and as --json; never a secret's value;
exit 3 with the fix when something a command needs is broken (a stopped stack's emulator variables)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.samples.generator import write_sample_run


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "HF_TOKEN", "STORAGE_EMULATOR_HOST", "RLCLEANUP_PRESERVE_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return isolated_cli_env(tmp_path, monkeypatch)


def test_doctor_on_a_fresh_machine_notes_what_is_missing_and_writes_nothing(_home: Path, tmp_path: Path) -> None:
    code, out, err = invoke("doctor", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] is True
    assert report["records"]["status"] == "note" and "rlcleanup run" in report["records"]["what"]
    assert report["credentials"]["file"]["status"] == "ok"
    assert report["credentials"]["hf"]["status"] == "note" and "HF_TOKEN" in report["credentials"]["hf"]["what"]
    assert report["approvers"]["approvers"] == [] and report["notifications"]["channels"] == []
    assert not (tmp_path / "state" / "rlcleanup" / "records.db").exists()  # doctor only reads


def test_doctor_shows_runs_every_approver_prefix_and_channels_without_secrets(
    _home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    assert invoke("run", str(root), "--json")[0] == 0
    code, out, _ = invoke("keygen", "--id", "alice")
    public = next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))
    models = str(tmp_path / "models")
    for prefix in (models, "hf://marin-community"):
        assert invoke("approver", "add", "alice", "--public-key", public, "--prefix", prefix)[0] == 0
    monkeypatch.setenv("RLCLEANUP_NOTIFY_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/sekrit-token")
    monkeypatch.setenv("HF_TOKEN", "hf_sekrit")
    code, out, err = invoke("doctor", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["records"]["runs"] == 1
    assert report["approvers"]["approvers"] == [
        {"id": "alice", "prefixes": [models, "hf://marin-community"], "revoked": False}
    ]
    assert report["notifications"]["channels"] == ["slack webhook at hooks.slack.com"]
    assert report["credentials"]["hf"]["status"] == "ok"
    code, text, _ = invoke("doctor")
    assert code == 0 and "sekrit" not in out + text
    assert f"alice: {models}, hf://marin-community" in text


def test_doctor_fails_with_the_fix_when_a_stopped_stacks_variables_are_left(
    _home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "rlcleanup-local")
    monkeypatch.setenv("RLCLEANUP_PRESERVE_ROOT", "gs://rlcleanup-local-preserve")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    code, out, _ = invoke("doctor")
    assert code == 3
    failed = [line for line in out.splitlines() if line.startswith("✗")]
    assert any("records" in line and "stack down" in line for line in failed), out
    assert any("preserve root" in line and "STORAGE_EMULATOR_HOST" in line for line in failed), out
    assert any("credentials gs:" in line for line in failed), out
