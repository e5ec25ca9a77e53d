"""Issue 47, "Habits of the tools our users know": `rlcleanup doctor [--json]` and `rlcleanup --version`.

Doctor shows, in one screen, what this rlcleanup would use (record store, preserve root, credentials per scheme,
the local stack, approvers, notification channels, version and commit), probes each thing now under a deadline,
never prints a secret, and exits 1 naming what is missing.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import invoke, isolated_cli_env, runner, without_ambient_credentials

from rlcleanup.cli.doctor import ProbeTimeout, _bounded
from rlcleanup.cli.main import app
from rlcleanup.paths import stack_dir
from rlcleanup.stack import StackState

REPO = Path(__file__).resolve().parents[2]
STACK_FIX = 'eval "$(rlcleanup stack down)"'


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = isolated_cli_env(tmp_path, monkeypatch)
    without_ambient_credentials(tmp_path, monkeypatch)
    return home


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _doctor(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["doctor", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def _findings(out: str) -> dict[str, dict[str, Any]]:
    return {f["check"]: f for f in json.loads(out)["findings"]}


def test_the_embedded_default_is_usable_and_every_part_is_named(tmp_path: Path) -> None:
    code, out, _ = _doctor()
    assert code == 0, out
    for part in (
        "record store",
        "preserve root",
        "gs://",
        "s3://",
        "hf://",
        "local stack",
        "approvers",
        "notifications",
    ):
        assert re.search(rf"^(ok|--|FAIL)\s+{re.escape(part)}\s", out, re.M), (part, out)
    assert f"SQLite {tmp_path / 'state' / 'rlcleanup' / 'records.db'}" in out
    assert f"{tmp_path / 'state' / 'rlcleanup' / 'preserved'} (writable" in out
    assert "none recorded in" in out and "FAIL" not in out
    assert out.rstrip().endswith("(-- lines are needed only by some runs)")

    code, out, _ = _doctor("--json")
    assert code == 0
    diagnosis = json.loads(out)
    assert diagnosis["usable"] is True and diagnosis["missing"] == []
    found = _findings(out)
    assert found["record store"]["facts"] == {
        "backend": "sqlite",
        "path": str(tmp_path / "state" / "rlcleanup" / "records.db"),
        "exists": False,
    }
    assert found["gs://"]["state"] == "info" and found["gs://"]["fix"]
    assert found["hf://"]["facts"]["token"] is False
    assert found["notifications"]["facts"]["channels"] == []


def test_approvers_and_their_prefixes_come_from_the_record_store(tmp_path: Path) -> None:
    code, out, err = invoke("keygen", "--id", "alice")
    assert code == 0, err
    public = next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))
    models, more = tmp_path / "models", tmp_path / "more"
    for prefix in (models, more):
        assert invoke("approver", "add", "alice", "--public-key", public, "--prefix", str(prefix))[0] == 0
    code, out, _ = _doctor()
    assert code == 0, out
    assert f"alice: {models}, {more}" in out
    approvers = _findings(_doctor("--json")[1])["approvers"]["facts"]["approvers"]
    assert approvers == [{"approver_id": "alice", "prefixes": [str(models), str(more)], "active": True}]


def test_a_stopped_stacks_variables_are_reported_unreachable_at_once_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dead = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{dead}")
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", dead)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "rlcleanup-local")
    # The stack's state says it ran: its server's process group and port are gone.
    where = stack_dir()
    where.mkdir(parents=True)
    StackState(str(where), "rlcleanup-local", "stack-x", ports={"gcs": _closed_port()}, pgids={"gcs": 2**22 - 3}).save()

    started = time.monotonic()
    code, out, _ = _doctor()
    took = time.monotonic() - started
    assert code == 1, out
    assert took < 2.5, f"doctor took {took:.1f}s"
    gs_line = rf"^FAIL\s+gs://\s+emulator at http://{dead} \(STORAGE_EMULATOR_HOST\) is not reachable$"
    assert re.search(gs_line, out, re.M), out
    assert STACK_FIX in out
    assert re.search(r"^FAIL\s+record store\s+the Firestore emulator at .* is not reachable", out, re.M), out
    assert "0 of 1 server(s) running" in out and "gcs stopped" in out
    assert out.rstrip().splitlines()[-1].startswith("not usable: FIRESTORE_EMULATOR_HOST, record store, gs://")

    diagnosis = json.loads(_doctor("--json")[1])
    assert diagnosis["usable"] is False
    assert _findings(json.dumps(diagnosis))["record store"]["fix"] is None  # its line already names the fix
    assert diagnosis["missing"] == ["FIRESTORE_EMULATOR_HOST", "record store", "gs://"]
    gs = _findings(json.dumps(diagnosis))["gs://"]
    assert gs["fix"].startswith("start the stack") and gs["facts"]["reachable"] is False


def test_no_secret_value_is_ever_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "hf": "hf_PLANTEDhubTOKEN1234567890",
        "s3": "PLANTEDs3SecretKey/abcdef1234567890",
        "s3_named": "PLANTEDnamedEndpointSecret99",
        "url_password": "PLANTEDurlPassword",
        "url_token": "PLANTEDqueryToken",
        "webhook": "PLANTEDwebhookTOKENxyz",
        "adc": "PLANTEDclientSecretOfADC",
        "refresh": "PLANTEDrefreshTokenOfADC",
    }
    monkeypatch.setenv("HF_TOKEN", secrets["hf"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPLANTEDKEYID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secrets["s3"])
    monkeypatch.setenv(
        "RLCLEANUP_S3_ENDPOINT_CW",
        json.dumps(
            {
                "endpoint_url": f"https://user:{secrets['url_password']}@cwobject.com/?token={secrets['url_token']}",
                "buckets": ["cw-runs"],
                "access_key_id": "CWKEYID",
                "secret_access_key": secrets["s3_named"],
            }
        ),
    )
    monkeypatch.setenv("RLCLEANUP_NOTIFY_WEBHOOK_URL", f"https://hooks.slack.com/services/T0/B0/{secrets['webhook']}")
    adc = tmp_path / "adc.json"
    adc.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "planted.apps.googleusercontent.com",
                "client_secret": secrets["adc"],
                "refresh_token": secrets["refresh"],
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))

    for args in ((), ("--json",)):
        code, out, err = _doctor(*args)
        assert code == 0, out
        for name, value in secrets.items():
            assert value not in out + err, (name, args)
        assert "AKIAPLANTEDKEYID" not in out and "CWKEYID" not in out
    found = _findings(_doctor("--json")[1])
    # What is present is said to be present, by kind and name.
    assert found["hf://"]["facts"]["token"] is True
    assert found["gs://"]["state"] == "ok" and found["gs://"]["facts"]["credentials"] == "Credentials"
    endpoints = {e["name"]: e for e in found["s3://"]["facts"]["endpoints"]}
    assert endpoints["default"]["credentials"] == "access keys"
    assert endpoints["cw"] == {
        "name": "cw",
        "endpoint": "https://cwobject.com/",
        "region": "us-east-1",
        "credentials": "access keys",
        "buckets": ["cw-runs"],
    }
    assert found["notifications"]["facts"]["channels"] == ["webhook"]


def test_an_emulator_that_answers_is_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        live = f"127.0.0.1:{listening.getsockname()[1]}"
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{live}")
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", live)
        code, out, _ = _doctor()
    assert code == 0, out
    assert re.search(rf"^ok\s+gs://\s+emulator at http://{live} \(STORAGE_EMULATOR_HOST\) answers$", out, re.M), out
    assert re.search(rf"^ok\s+PUBSUB_EMULATOR_HOST\s+emulator at {live} \(PUBSUB_EMULATOR_HOST\) answers$", out, re.M)


def test_an_unknown_notification_channel_is_a_failure_naming_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCLEANUP_NOTIFY_CHANNELS", "pager")
    code, out, _ = _doctor()
    assert code == 1
    assert re.search(r"^FAIL\s+notifications\s+.*no notification channel 'pager' \(known: email, webhook\)", out, re.M)


def test_a_probe_that_never_answers_is_abandoned_at_its_deadline() -> None:
    never = threading.Event()
    started = time.monotonic()
    with pytest.raises(ProbeTimeout, match=r"no answer within 0\.2 s"):
        _bounded(0.2, never.wait)
    assert time.monotonic() - started < 1
    with pytest.raises(KeyError):  # a probe's own error reaches the caller, which reports it as a line
        _bounded(1, lambda: {}["x"])


def test_version_names_the_commit_it_runs_from() -> None:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    code, out, _ = invoke("--version")
    assert code == 0
    assert re.fullmatch(r"rlcleanup \d+\.\d+\.\d+\S* \(commit [0-9a-f]{7,}\)\n", out), out
    assert head.returncode == 0 and f"(commit {head.stdout.strip()})" in out


def test_version_says_commit_unknown_without_git(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")  # no git to ask
    code, out, _ = invoke("--version")
    assert code == 0
    assert re.fullmatch(r"rlcleanup \d+\.\d+\.\d+\S* \(commit unknown\)\n", out), out
