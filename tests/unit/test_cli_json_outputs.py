"""Issue 47: `--json` on keygen, approver add, cause, stack up/down and sample-run: one JSON object on stdout and
nothing else there (as `show --json` and `doctor --json`), the words a person reads on stderr or not at all."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from authority_support import cancel_grant, make_world, pre_cancel_event
from cli_support import invoke, isolated_cli_env

from rlcleanup.stack import StackState, s3_server
from rlcleanup.stack.state import client_env

TRACEBACK = """Traceback (most recent call last):
  File "/app/skyrl-train/skyrl_train/trainer.py", line 412, in train
    rewards = self.reward_fn(batch)
ValueError: reward function returned NaN for row {row}
"""


@pytest.fixture(autouse=True)
def _xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolated_cli_env(tmp_path, monkeypatch)


def _one_object(out: str) -> dict[str, Any]:
    """stdout is exactly one JSON object (json.loads refuses anything before or after it)."""
    parsed = json.loads(out)
    assert isinstance(parsed, dict), out
    return parsed


def test_keygen_json_names_the_key_file_the_public_key_and_how_to_use_them() -> None:
    code, out, _ = invoke("keygen", "--id", "alice", "--json")
    assert code == 0
    shown = _one_object(out)
    key_file = Path(shown["private_key_path"])
    assert key_file.is_file() and key_file.stat().st_mode & 0o777 == 0o600 and key_file.name == "alice.pem"
    assert shown["approver_id"] == "alice" and shown["sign_with"] == "--key alice"
    assert f"--public-key {shown['public_key']}" in shown["register_with"]
    # The key it printed registers: approver add --json answers with what it now holds.
    code, out, _ = invoke(
        "approver", "add", "alice", "--public-key", shown["public_key"], "--prefix", "/srv/m", "--json"
    )
    assert code == 0 and _one_object(out)["allowed_prefixes"] == ["/srv/m"]


def test_sample_run_json_and_the_scenario_list_as_json(tmp_path: Path) -> None:
    code, out, _ = invoke("sample-run", str(tmp_path / "s"), "--scenario", "completed-resumed", "--json")
    assert code == 0
    shown = _one_object(out)
    assert shown["scenario"] == "completed-resumed" and shown["uploaded_run_uri"] is None
    assert (Path(shown["run_root"]) / ".executor_status").is_file()
    code, out, _ = invoke("sample-run", "--scenario", "list", "--json")
    assert code == 0 and "completed-resumed" in _one_object(out)["scenarios"]
    code, out, err = invoke("sample-run", str(tmp_path / "t"), "--scenario", "no-such", "--json")
    assert code == 2 and out == "" and "unknown scenario" in err  # the list a person reads goes to stderr


def test_sample_run_upload_to_refuses_what_is_not_a_bucket_uri(tmp_path: Path) -> None:
    code, out, err = invoke("sample-run", str(tmp_path / "s"), "--upload-to", str(tmp_path / "b"), "--json")
    assert code == 2 and out == "" and "not a bucket URI" in err
    code, out, err = invoke("sample-run", str(tmp_path / "s"), "--upload-to", "ftp://b/x")
    assert code == 2 and out == "" and "ftp" in err


def test_cause_json_says_what_was_recorded_and_what_the_waiting_grants_did(tmp_path: Path) -> None:
    w = make_world(tmp_path, "completed-resumed", run=False)
    logs = sorted((w.tmp / "runs").rglob("attempts/*/logs/finelog.log"))
    for row, log in enumerate(logs[:2]):
        log.write_text(log.read_text() + TRACEBACK.format(row=1000 + row))
    w.stack.emit(pre_cancel_event(w.run_uri))
    pre = w.record.pre_cancel
    assert pre is not None
    grant = cancel_grant(w)
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "withheld"
    sig = json.loads(Path(pre.capture_uri).read_text())["reproducing"][0]["signature_id"]
    db = str(tmp_path / "records.db")
    code, out, err = invoke("cause", w.run_id, sig, "--note", "bad rows", "--by", "alice", "--db", db, "--json")
    assert code == 0, err
    shown = _one_object(out)
    assert (shown["run_id"], shown["signature_id"], shown["note"], shown["recorded_by"]) == (
        w.run_id,
        sig,
        "bad rows",
        "alice",
    )
    assert grant.grant_id in shown["waiting_grants"] and datetime.fromisoformat(shown["at"]).tzinfo is not None
    code, out, err = invoke("cause", w.run_id, "0123456789abcdef", "--note", "guess", "--db", db, "--json")
    assert code == 3 and out == "" and "unknown_signature" in err


def _recorded_stack(where: Path) -> StackState:
    ports = {"pubsub": 8085, "firestore": 8080, "gcs": 4443, "s3": 8333}
    buckets = {"preserve": "p-preserve", "watched-runs": "p-watched-runs", "runs": "p-runs", "s3-runs": "p-s3-runs"}
    s3 = s3_server.stack_endpoint_env("http://127.0.0.1:8333", ["p-s3-runs"])
    env = client_env("p", ports, buckets, s3)
    return StackState(state_dir=str(where), project="p", stack_id="s", ports=ports, buckets=buckets, env=env)


def test_stack_down_json_lists_what_it_unset_and_stopped(tmp_path: Path) -> None:
    where = tmp_path / "stack"
    where.mkdir()
    state = _recorded_stack(where)
    state.save()  # recorded, no live server in it: nothing to stop
    code, out, err = invoke("stack", "down", "--state-dir", str(where), "--json")
    assert code == 0, err
    shown = _one_object(out)
    assert shown["unset"] == sorted(state.env) and shown["stopped"] == [] and shown["state_dir"] == str(where)


def test_stack_up_json_is_the_stack_as_one_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the face: the stack's start itself is the e2e suite's (tests/conftest.py, test_readme_blocks.py)."""
    import rlcleanup.stack as stack_module

    where = tmp_path / "stack"
    where.mkdir()
    started = _recorded_stack(where.resolve())
    monkeypatch.setattr(stack_module, "up", lambda *args, **kwargs: started)
    code, out, err = invoke("stack", "up", "--state-dir", str(where), "--json", "--quiet")
    assert code == 0, err
    shown = _one_object(out)
    assert shown["env"] == started.env and shown["buckets"]["s3-runs"] == "p-s3-runs"
    assert shown["s3_endpoint"] == "http://127.0.0.1:8333" and "stack down" in shown["stop_with"]
    assert not [name for name in shown["env"] if name.startswith("AWS_")]
