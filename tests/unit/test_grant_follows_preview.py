"""What is previewed is what is signed (issue 37 item 7): after `grant --dry-run`, the same `grant` command refuses
to sign when the artifact moved (a re-derived record: another digest, another selected step, new preserved
logs), and says what changed; `--digest` makes the grant carry the previewed digest itself. Also item 10 at the
CLI: a Hub repo id huggingface_hub refuses is refused before anything is signed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.cli.stores import open_store
from rlcleanup.paths import default_db
from rlcleanup.ports.records import RunRecords
from rlcleanup.samples.generator import write_sample_run

RUN = "math-rl-completed-resumed-2026.11.30"


@pytest.fixture(autouse=True)
def _xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolated_cli_env(tmp_path, monkeypatch)


_invoke = invoke


@pytest.fixture
def dest_root(tmp_path: Path, _xdg: Path) -> Path:
    root = write_sample_run(tmp_path / "src" / "completed-resumed", "completed-resumed")
    code, _, err = _invoke("run", str(root), "--json")
    assert code == 0, err
    code, out, err = _invoke("keygen", "--id", "alice")
    assert code == 0, err
    public = next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))
    models = _xdg / "models"
    prefixes = ["--prefix", str(models), "--prefix", "hf://rl-team"]
    assert _invoke("approver", "add", "alice", "--public-key", public, *prefixes)[0] == 0
    return models


def _store() -> RunRecords:
    return open_store(None, default_db(), None).store


def _rederive(fields: dict[str, Any]) -> None:
    _store().update(RUN, fields)


def _candidates_with(step: int, digest: str) -> list[dict[str, Any]]:
    record = _store().get(RUN)
    assert record is not None
    return [
        {**c.model_dump(mode="json"), "digest": digest} if c.step == step else c.model_dump(mode="json")
        for c in record.candidates
    ]


def _publish(dest: Path, *extra: str) -> list[str]:
    return ["grant", RUN, "--action", "publish", "--destination", str(dest), "--key", "alice", *extra]


def test_a_digest_re_derived_after_the_preview_is_not_signed_unless_the_previewed_one_is(dest_root: Path) -> None:
    dest = dest_root / "m"
    code, out, _ = _invoke(*_publish(dest, "--step", "20", "--dry-run", "--json"))
    assert code == 0
    previewed = json.loads(out)["digest"]
    _rederive({"candidates": _candidates_with(20, "b" * 64)})  # a new pass validated another export
    code, _, err = _invoke(*_publish(dest, "--step", "20"))
    assert code == 3 and "changed since your preview" in err and f"digest {previewed[:16]}" in err
    assert "Nothing was signed" in err
    assert not dest.exists() and _store().list_docs(f"runs/{RUN}/grants") == []
    # The grant can carry the previewed digest itself: signed, and refused at apply (the record moved on).
    code, out, _ = _invoke(*_publish(dest, "--step", "20", "--digest", previewed, "--json"))
    assert code == 3 and json.loads(out)["refusal"] == "wrong_digest"
    assert not dest.exists() or not any(dest.iterdir())


def test_a_selection_that_moved_after_the_preview_is_not_signed(dest_root: Path) -> None:
    dest = dest_root / "m"
    record = _store().get(RUN)
    assert record is not None and record.selection is not None
    valid = sorted(c.step for c in record.candidates if c.valid)
    selection = record.selection.model_dump(mode="json")
    _rederive({"selection": {**selection, "step": valid[-1], "status": "selected"}})
    code, _, err = _invoke(*_publish(dest, "--dry-run"))  # no --step: the selected one
    assert code == 0, err
    other = next(c.step for c in record.candidates if c.step != valid[-1] and c.digest)
    _rederive({"selection": {**selection, "step": other, "status": "selected"}})
    code, _, err = _invoke(*_publish(dest))
    assert code == 3 and f"step {valid[-1]} -> {other}" in err
    assert not dest.exists()


def test_logs_preserved_after_the_preview_are_not_published_unseen(dest_root: Path) -> None:
    dest = dest_root / "m"
    assert _invoke(*_publish(dest, "--step", "20", "--dry-run"))[0] == 0
    record = _store().get(RUN)
    assert record is not None and record.manifest_uri
    manifest_path = Path(record.manifest_uri.removeprefix("file://"))
    manifest = json.loads(manifest_path.read_text())
    log = next(o for o in manifest["objects"] if o["kind"] == "log")
    planted = {**log, "destination": log["destination"].rsplit("/", 1)[0] + "/new-pass.log"}
    manifest_path.chmod(0o600)
    manifest_path.write_text(json.dumps({**manifest, "objects": [*manifest["objects"], planted]}))
    code, _, err = _invoke(*_publish(dest, "--step", "20"))
    assert code == 3 and "logs added" in err and "new-pass.log" in err
    assert not dest.exists()


def test_an_unchanged_artifact_is_signed_and_a_preview_binds_only_its_own_command(dest_root: Path) -> None:
    dest = dest_root / "m"
    assert _invoke(*_publish(dest, "--step", "20", "--dry-run"))[0] == 0
    code, out, err = _invoke(*_publish(dest, "--step", "20", "--json"))
    assert code == 0, err
    assert json.loads(out)["state"] == "published" and (dest / "_PUBLISHED.json").exists()
    assert _invoke(*_publish(dest_root / "a", "--step", "20", "--dry-run"))[0] == 0
    _rederive({"candidates": _candidates_with(20, "c" * 64)})
    code, out, _ = _invoke(*_publish(dest_root / "b", "--step", "20", "--json"))  # never previewed
    assert code == 3 and json.loads(out)["refusal"] == "wrong_digest"  # signed what the record says, refused
    # item 10: a repo id huggingface_hub refuses is refused before anything is signed
    for hub_dest in ("hf://rl-team/m..x", "hf://rl-team/a--b", "hf://rl-team/x%2Fy", "hf://rl-team/-x"):
        before = len(_store().list_docs(f"runs/{RUN}/grants"))
        code, _, err = _invoke(*_publish(dest, "--step", "20")[:5], hub_dest, "--key", "alice")
        assert code == 2 and "not a valid Hub repo id" in err, hub_dest
        assert len(_store().list_docs(f"runs/{RUN}/grants")) == before
