"""Issue 47 item 3: preview == grant. `grant --dry-run` runs every check the real grant runs, in the same code,
before it says "would": for every refusal a person can reach from the command line, the preview and the grant
give the same refusal (table-driven). Also the destinations refused before anything is signed: a typo'd
`hf:/org/repo` is not a local folder, and a `gs://` preview without Google credentials is one line naming the fix.
And item 4: `approver add` keeps the prefixes an approver had (a new key needs --replace)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.samples.generator import write_sample_run

RUN = "math-rl-completed-resumed-2026.11.30"


@dataclass(frozen=True)
class Case:
    refusal: str
    args: Callable[[Path], list[str]]  # the grant's options, given the approver's allowed directory
    before: Callable[[], None] = lambda: None


def _public_key(approver: str) -> str:
    code, out, err = invoke("keygen", "--id", approver)
    assert code == 0, err
    return next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))


def _publish(dest: str, *extra: str) -> list[str]:
    return ["--action", "publish", "--destination", dest, "--step", "20", *extra]


CASES = [
    Case("out_of_prefix", lambda models: _publish(str(models.parent / "elsewhere"), "--key", "alice")),
    Case("unknown_approver", lambda models: _publish(str(models / "m"), "--key", "bob")),
    Case("bad_signature", lambda models: _publish(str(models / "m"), "--key", "bob", "--approver", "alice")),
    Case("lifetime_too_long", lambda models: _publish(str(models / "m"), "--key", "alice", "--expires", "30d")),
    Case("wrong_digest", lambda models: _publish(str(models / "m"), "--key", "alice", "--digest", "c" * 64)),
    Case("run_ended", lambda models: ["--action", "cancel", "--key", "alice"]),
    Case(
        "approver_revoked",
        lambda models: _publish(str(models / "m"), "--key", "alice"),
        before=lambda: invoke("approver", "revoke", "alice", "--reason", "left the team"),
    ),
]


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = isolated_cli_env(tmp_path, monkeypatch)
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    code, _, err = invoke("run", str(root), "--json")
    assert code == 0, err
    allowed = home / "models"
    public = _public_key("alice")
    _public_key("bob")  # a key whose approver was never registered
    assert invoke("approver", "add", "alice", "--public-key", public, "--prefix", str(allowed))[0] == 0
    return allowed


def test_preview_and_grant_give_the_same_refusal_for_every_refusal_code(models: Path) -> None:
    for case in CASES:  # in order: the revocation is last, it cannot be undone
        case.before()
        args = ["grant", RUN, *case.args(models), "--json"]
        code, text, _ = invoke(*args[:-1], "--dry-run")
        assert code == 3 and f"would be REFUSED ({case.refusal})" in text, (case.refusal, text)
        code, out, err = invoke(*args, "--dry-run")
        assert code == 3, (case.refusal, out, err)
        preview = json.loads(out)
        assert (preview["would"], preview["refusal"]) == ("refuse", case.refusal), (case.refusal, preview)
        code, out, err = invoke(*args)
        assert code == 3, (case.refusal, out, err)
        assert json.loads(out)["refusal"] == case.refusal, (case.refusal, out)
    assert not (models.parent / "elsewhere").exists() and not (models / "m").exists()


def test_a_scheme_typo_is_refused_not_made_a_local_folder(models: Path, tmp_path: Path) -> None:
    for typo in ("hf:/org/repo", "gs:bucket/x"):
        for dry in (("--dry-run",), ()):
            code, _, err = invoke("grant", RUN, *_publish(typo, "--key", "alice"), *dry)
            assert code == 2, err
            assert "is not a URI" in err and f"did you mean {typo.split(':')[0]}://" in err, err
    assert not any(p.name in ("hf:", "gs:bucket") for p in Path.cwd().iterdir())


def test_a_gcs_preview_without_credentials_is_one_line_naming_the_fix(
    models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))  # no application-default credentials
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # no metadata server to ask either
    code, out, err = invoke("grant", RUN, *_publish("gs://team-bucket/models/m", "--key", "alice"), "--dry-run")
    assert code == 3, (out, err)
    assert len(err.strip().splitlines()) == 1 and "GOOGLE_APPLICATION_CREDENTIALS" in err, err
    assert "Traceback" not in out + err


def test_approver_add_keeps_its_prefixes_and_a_new_key_needs_replace(models: Path, tmp_path: Path) -> None:
    public = _public_key("carol")
    first, second = str(tmp_path / "team-a"), "hf://marin-community"
    assert invoke("approver", "add", "carol", "--public-key", public, "--prefix", first)[0] == 0
    code, out, _ = invoke("approver", "add", "carol", "--public-key", public, "--prefix", second, "--json")
    assert code == 0 and json.loads(out)["allowed_prefixes"] == [first, second]
    code, out, _ = invoke("approver", "list")
    [line] = [line for line in out.splitlines() if line.startswith("carol ")]
    assert first in line and second in line
    other = _public_key("carol2")
    code, _, err = invoke("approver", "add", "carol", "--public-key", other, "--prefix", first)
    assert code == 2 and "--replace" in err, err
    code, out, _ = invoke("approver", "add", "carol", "--public-key", other, "--prefix", first, "--replace", "--json")
    assert code == 0 and json.loads(out)["allowed_prefixes"] == [first]
