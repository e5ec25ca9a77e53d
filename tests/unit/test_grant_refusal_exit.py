"""Issue 45 item 7: a refused grant exits 3 and prints its refusal word (docs/authority.md §3), for every action,
whether the refusal comes from the grant's authenticity (an unregistered key: filed under the hash of the message,
not the grant's id) or from the action's own gate. Through the CLI, on the embedded default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.samples.generator import write_sample_run

RUN = "math-rl-completed-resumed-2026.11.30"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run, awaiting authority; `alice` registered for `models/`, `mallory` a key nobody registered."""
    tmp_path = tmp_path_factory.mktemp("refusals")
    with pytest.MonkeyPatch.context() as mp:
        isolated_cli_env(tmp_path, mp)
        root = write_sample_run(tmp_path / "src", "completed-resumed")
        code, out, err = invoke("run", str(root), "--json")
        assert code == 0 and json.loads(out)["status"] == "awaiting_authority", err
        for name in ("alice", "mallory"):
            code, out, err = invoke("keygen", "--id", name)
            assert code == 0, err
            if name == "alice":
                public = next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))
                added = invoke("approver", "add", "alice", "--public-key", public, "--prefix", str(tmp_path / "models"))
                assert added[0] == 0, added
    return tmp_path


@pytest.fixture
def env(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test back in the module's environment (its home was made by the module fixture)."""
    isolated_cli_env(home, monkeypatch)
    return home


# action, key, extra options (beyond --step/--destination), the refusal word
CASES = [
    ("publish", "mallory", [], "unknown_approver"),
    ("handoff", "mallory", [], "unknown_approver"),
    ("register", "mallory", [], "unknown_approver"),
    ("reclaim", "mallory", [], "unknown_approver"),
    ("purge", "mallory", [], "unknown_approver"),
    ("cancel", "mallory", [], "unknown_approver"),
    ("publish", "alice", ["--destination-outside"], "out_of_prefix"),
    ("handoff", "alice", ["--destination-outside"], "out_of_prefix"),
    ("register", "alice", [], "not_applicable"),  # the run declares no cleanup.registration
    ("reclaim", "alice", [], "destination_unverified"),  # nothing was published there to reclaim against
    ("purge", "alice", [], "not_applicable"),  # nothing of that step is in quarantine
    ("cancel", "alice", [], "run_ended"),
]


@pytest.mark.parametrize(("action", "key", "extra", "word"), CASES)
def test_a_refused_grant_exits_3_with_its_refusal_word(
    env: Path, action: str, key: str, extra: list[str], word: str
) -> None:
    destination = env / ("elsewhere" if "--destination-outside" in extra else "models") / f"{action}-{key}"
    args = ["grant", RUN, "--action", action, "--key", key]
    if action != "cancel":
        args += ["--step", "20", "--destination", str(destination)]
    code, out, err = invoke(*args)
    assert code == 3, (out, err)
    first = out.splitlines()[0]
    assert first.startswith("grant ") and f"({word}:" in first and ": ?" not in first, out
    if key == "mallory" and action == "purge":  # the JSON face reads the same filing
        code, out, err = invoke(*args, "--json")
        assert code == 3, (out, err)
        row = json.loads(out)
        assert (row["state"], row["refusal"]) == ("refused", word), row
    assert not (destination / "_PUBLISHED.json").exists()


def test_an_unknown_signature_for_cause_exits_3(env: Path) -> None:
    code, _, err = invoke("cause", RUN, "0123456789abcdef", "--note", "a guess")
    assert code == 3 and "unknown_signature" in err, err
