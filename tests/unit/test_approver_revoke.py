"""Issue 38 item 9: `approver list` and `approver revoke` (P37 in docs/authority.md §8), through the CLI with --json.

A revoked approver's grants that were not used are refused as `approver_revoked` (a new one on arrival, a pending
one when record-ready retries it); its used grants stay on the record; the revocation is recorded (who, when, why)
and shown by `approver list` and `grants`; the revoked key is never registered again, under any id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.models.record import CompletionRecord
from rlcleanup.paths import default_db, default_preserve_root
from rlcleanup.runtime.embedded import EmbeddedStack
from rlcleanup.samples.generator import write_sample_run

RUN = "math-rl-completed-resumed-2026.11.30"


@pytest.fixture(autouse=True)
def _xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolated_cli_env(tmp_path, monkeypatch)


def _json(*args: str, code: int = 0) -> Any:
    got, out, err = invoke(*args, "--json")
    assert got == code, (got, out, err)
    return json.loads(out)


def _key(name: str) -> str:
    code, out, err = invoke("keygen", "--id", name)
    assert code == 0, err
    return next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))


def test_a_revoked_approvers_unused_grants_are_refused_and_its_used_ones_stay(tmp_path: Path, _xdg: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    assert _json("run", str(root))["status"] == "awaiting_authority"
    models = _xdg / "models"
    public = _key("alice")
    assert invoke("approver", "add", "alice", "--public-key", public, "--prefix", str(models))[0] == 0
    base = ["grant", RUN, "--step", "20", "--destination", str(models / "m20"), "--key", "alice"]
    assert _json(*base, "--action", "publish")["state"] == "published"

    # A reclaim grant signed now waits for its record (made not ready here), then its approver is revoked.
    stack = EmbeddedStack.create(default_db(), str(default_preserve_root()))
    stack.ports.records.update(RUN, {"status": "in_progress"})
    waiting = _json(*base, "--action", "reclaim")
    assert waiting["state"] == "pending", waiting
    revoked = _json("approver", "revoke", "alice", "--by", "security-team", "--reason", "laptop lost")
    assert (revoked["revoked_by"], revoked["revoked_reason"]) == ("security-team", "laptop lost")
    assert revoked["revoked_at"]

    listed = _json("approver", "list")
    assert [(a["approver_id"], a["revoked_by"]) for a in listed] == [("alice", "security-team")]
    rows = {r["action"]: r for r in _json("grants", RUN)}
    assert rows["reclaim"]["state"] == "pending" and "security-team" in rows["reclaim"]["approver_revoked"]
    code, out, _ = invoke("grants", RUN)
    assert code == 0 and "will be refused" in out and "approver revoked since" in out

    # The record is ready again: record-ready retries the pending grant, re-verified, and refuses it.
    stack.ports.records.update(RUN, {"status": "awaiting_authority"})
    stack.bus.publish("record-ready", json.dumps({"run_id": RUN}).encode(), {"run_id": RUN})
    stack.bus.drain()
    rows = {r["action"]: r for r in _json("grants", RUN)}
    assert (rows["reclaim"]["state"], rows["reclaim"]["refusal"]) == ("refused", "approver_revoked")
    assert (rows["publish"]["state"], rows["publish"]["result"]) == ("used", "published")  # stays on the record
    record = CompletionRecord.model_validate(_json("show", RUN))
    assert [(a.action, a.state) for a in record.authority_actions] == [
        ("publish", "published"),
        ("reclaim", "refused"),
    ]
    assert (models / "m20" / "_PUBLISHED.json").exists()

    # A grant signed anew with the revoked key is refused on arrival with the specific code.
    fresh = _json(*base, "--action", "reclaim", code=3)
    assert (fresh["state"], fresh["refusal"]) == ("refused", "approver_revoked")

    # The revoked key cannot come back: not under its id, not under another one.
    for name in ("alice", "alice2"):
        code, _, err = invoke("approver", "add", name, "--public-key", public, "--prefix", str(models))
        assert code == 2 and "revoked" in err, err
    assert _json("approver", "list")[0]["revoked_by"] == "security-team"  # the first revocation stays


def test_revoking_an_unknown_approver_exits_1_and_list_shows_active_ones(_xdg: Path) -> None:
    public = _key("bob")
    assert invoke("approver", "add", "bob", "--public-key", public, "--prefix", str(_xdg / "models"))[0] == 0
    code, _, err = invoke("approver", "revoke", "nobody")
    assert code == 1 and "no approver 'nobody'" in err
    listed = _json("approver", "list")
    assert [(a["approver_id"], a["public_key"], a["revoked_at"]) for a in listed] == [("bob", public, None)]
    code, out, _ = invoke("approver", "list")
    assert code == 0 and out.startswith("bob  active")
