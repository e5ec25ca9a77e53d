"""Publish / hand-off to `hf://<namespace>/<repo>` with the real `huggingface_hub` client (2.4.0) against
tests/servers/hub_standin.py: a STAND-IN for the Hugging Face Hub (no Hub emulator exists) that implements exactly
the endpoints this flow calls, with the JSON shapes taken from huggingface_hub 2.4.0's hf_api.py, _commit_api.py and
lfs.py (repo create/info, validate-yaml, preupload, LFS batch + upload + verify, commit, paths-info). It runs as its
own server process in its own process group on a free port, stopped by group, like the suite's other servers."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # the authority tests' world builder
from authority_support import World, make_world

from rlcleanup.adapters.hf_hub import git_blob_sha
from rlcleanup.authority.grants import Approver, Grant, new_key, public_b64, register_approver
from rlcleanup.authority.hub_publish import MARKER, model_card
from rlcleanup.stack import procs

pytestmark = pytest.mark.integration
TOKEN = "hf_standin_write_token"


@dataclass
class Standin:
    url: str

    def call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
            method="POST" if body is not None else "GET",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = self.call("/__standin/stats")
        return stats

    def files(self, repo: str) -> dict[str, dict[str, Any]]:
        info = self.call(f"/api/models/{repo}")
        paths = [s["rfilename"] for s in info["siblings"]]
        form = urllib.parse.urlencode([("paths", p) for p in paths] + [("expand", "false")]).encode()
        req = urllib.request.Request(
            f"{self.url}/api/models/{repo}/paths-info/main",
            data=form,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-www-form-urlencoded"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return {row["path"]: row for row in json.loads(resp.read())}


@pytest.fixture(scope="module")
def hub_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    state = tmp_path_factory.mktemp("hub")
    port = procs.free_port()
    script = Path(__file__).resolve().parents[1] / "servers" / "hub_standin.py"
    server = procs.start(
        "hub-standin",
        [sys.executable, str(script), "--port", str(port), "--token", TOKEN],
        state_dir=state,
        env=dict(os.environ),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        procs.wait_ready(server, lambda: procs.http_status(f"{url}/__standin/stats") == 200, 20)
        yield Standin(url)
    finally:
        procs.stop_group(server.pid, popen=server.popen, grace=2)


@pytest.fixture
def hub(hub_server: Standin, monkeypatch: pytest.MonkeyPatch) -> Standin:
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub_server.call(
        "/__standin/control", {"force_public_orgs": [], "fail_lfs_put_after": None, "corrupt_sha_suffix": None}
    )
    return hub_server


@pytest.fixture
def world(tmp_path: Path) -> tuple[World, Any]:
    w = make_world(tmp_path)
    key = new_key()
    register_approver(
        w.stack.ports.records,
        Approver(approver_id="bob", public_key=public_b64(key), allowed_prefixes=["hf://rl-team", "hf://open-org"]),
    )
    return w, key


def _grant(w: World, dest: str, **overrides: Any) -> Grant:
    return w.grant(destination=dest, granted_by="bob", action=overrides.pop("action", "handoff"), **overrides)


def _deliver(w: World, key: Any, grant: Grant) -> dict[str, Any]:
    w.deliver(w.message(grant, key=key))
    return w.action(grant.grant_id)


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {
        k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after) if after.get(k, 0) != before.get(k, 0)
    }


def test_private_handoff_with_the_marinskyrl_layout_and_verification(
    hub: Standin, world: tuple[World, Any], uid: str
) -> None:
    w, key = world
    repo = f"rl-team/math-{uid}"
    before = hub.stats()
    grant = _grant(w, f"hf://{repo}")
    action = _deliver(w, key, grant)
    assert action["state"] == "handed_off", action
    info = hub.call(f"/api/models/{repo}")
    assert info["private"] is True
    files = hub.files(repo)
    cand = w.candidate()
    export = Path(cand.uri)
    for shard in sorted(export.glob("*.safetensors")):  # weights at the root, the Hub's sha256 = the bytes' sha256
        row = files[shard.name]
        assert (
            row["lfs"]["oid"] == hashlib.sha256(shard.read_bytes()).hexdigest() and row["size"] == shard.stat().st_size
        )
    assert "config.json" in files and "README.md" in files and "provenance.json" in files
    logs = [p for p in files if p.startswith("training_logs/")]
    assert "training_logs/metrics.csv" in logs and any(p.endswith(".log") for p in logs)
    assert {"training_logs/report.md", "training_logs/timeline.png"} <= set(logs)
    card = model_card(w.record, cand, grant, repo)  # the card on the Hub is the one we generated, byte for byte
    assert files["README.md"]["oid"] == git_blob_sha(card) and w.run_id.encode() in card
    marker_commit = action["uri"].rsplit("@", 1)[1]
    assert action["uri"] == f"hf://{repo}@{marker_commit}" and info["sha"] == marker_commit  # the marker is last
    assert MARKER in files and action["verified_objects"] == len(files) - 1
    spent = _delta(before, hub.stats())
    assert spent.get("deleted_paths", 0) == 0
    assert spent["POST /api/models/{repo}/commit"] == 2  # the files, then the marker on its own
    assert spent["PUT /__lfs/{oid}"] == len([p for p, r in files.items() if r.get("lfs")])


def test_model_card_states_provenance(hub: Standin, world: tuple[World, Any], uid: str) -> None:
    w, _ = world
    cand = w.candidate()
    card = model_card(w.record, cand, _grant(w, f"hf://rl-team/c-{uid}"), f"rl-team/c-{uid}").decode()
    for fact in (w.run_id, f"| step | {cand.step} |", cand.digest or "?", "selection policy", "metric window"):
        assert fact in card, fact
    assert card.startswith("---\n") and "training_logs/" in card


def test_an_org_that_forces_public_is_refused_before_any_byte(hub: Standin, world: tuple[World, Any], uid: str) -> None:
    w, key = world
    hub.call("/__standin/control", {"force_public_orgs": ["open-org"]})
    before = hub.stats()
    action = _deliver(w, key, _grant(w, f"hf://open-org/m-{uid}"))
    assert action["state"] == "refused" and action["refusal"] == "visibility_broader"
    assert "public" in action["detail"]
    spent = _delta(before, hub.stats())
    assert set(spent) == {"POST /api/repos/create", "GET /api/models/{repo}"}, spent  # no preupload, PUT or commit


def test_a_repo_with_files_gets_ours_added_and_nothing_deleted(
    hub: Standin, world: tuple[World, Any], uid: str
) -> None:
    w, key = world
    repo = f"rl-team/existing-{uid}"
    theirs = {"notes.md": b"kept\n", "old/weights.bin": b"\x00" * 64}
    hub.call(
        "/__standin/seed",
        {"repo": repo, "private": True, "files": {k: base64.b64encode(v).decode() for k, v in theirs.items()}},
    )
    before = hub.stats()
    action = _deliver(w, key, _grant(w, f"hf://{repo}"))
    assert action["state"] == "handed_off", action
    files = hub.files(repo)
    assert set(theirs) <= set(files) and MARKER in files
    assert _delta(before, hub.stats()).get("deleted_paths", 0) == 0


def test_a_path_holding_other_content_is_never_overwritten(hub: Standin, world: tuple[World, Any], uid: str) -> None:
    w, key = world
    repo = f"rl-team/clash-{uid}"
    hub.call(
        "/__standin/seed", {"repo": repo, "private": True, "files": {"config.json": base64.b64encode(b"{}").decode()}}
    )
    action = _deliver(w, key, _grant(w, f"hf://{repo}"))
    assert action["refusal"] == "destination_conflict" and "config.json" in action["detail"]
    assert MARKER not in hub.files(repo)


def test_an_interrupted_upload_resumes_and_skips_what_is_there(
    hub: Standin, world: tuple[World, Any], uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlcleanup.adapters.hf_hub import HubDestination
    from rlcleanup.authority import hub_publish
    from rlcleanup.ports.storage import StorageError

    w, _ = world
    repo = f"rl-team/resume-{uid}"
    grant = _grant(w, f"hf://{repo}")
    monkeypatch.setattr(hub_publish, "BATCH_FILES", 3)  # several commits: the interruption lands after some
    hub.call("/__standin/control", {"fail_lfs_put_after": 2})
    with pytest.raises(StorageError, match="Error while uploading"):  # transient: the delivery is retried
        hub_publish.publish_to_hub(w.stack.ports.storage, w.record, grant, HubDestination())
    committed = hub.files(repo)
    assert committed and MARKER not in committed  # some batches landed, nothing claims completeness
    hub.call("/__standin/control", {"fail_lfs_put_after": None})
    before = hub.stats()
    outcome = hub_publish.publish_to_hub(w.stack.ports.storage, w.record, grant, HubDestination())
    assert outcome.state == "handed_off", outcome
    assert f"{len(committed)} already there" in outcome.detail
    spent = _delta(before, hub.stats())
    lfs_total = len([p for p, r in hub.files(repo).items() if r.get("lfs")])
    assert spent.get("PUT /__lfs/{oid}", 0) < lfs_total  # what was uploaded before is not sent again


def test_a_sha_mismatch_after_upload_is_refused_and_recorded(hub: Standin, world: tuple[World, Any], uid: str) -> None:
    w, key = world
    repo = f"rl-team/corrupt-{uid}"
    hub.call("/__standin/control", {"corrupt_sha_suffix": ".safetensors"})
    action = _deliver(w, key, _grant(w, f"hf://{repo}"))
    assert action["state"] == "refused" and action["refusal"] == "destination_unverified"
    assert ".safetensors: Hub reports" in action["detail"]
    assert MARKER not in hub.files(repo)


def test_a_planted_token_is_refused_before_the_repo_gets_a_byte(
    hub: Standin, world: tuple[World, Any], uid: str
) -> None:
    w, key = world
    log = next(Path(w.record.preserved_locations[0]).rglob("*.log"))
    os.chmod(log, 0o644)
    log.write_text(log.read_text() + "export HF_TOKEN=hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345\n")
    before = hub.stats()
    action = _deliver(w, key, _grant(w, f"hf://rl-team/secret-{uid}"))
    assert action["refusal"] == "secret_found"
    spent = _delta(before, hub.stats())
    assert not any(
        k.startswith(("PUT", "POST /api/models/{repo}/commit", "POST /api/models/{repo}/preupload")) for k in spent
    )


def test_the_upload_job_reverifies_the_filed_grant_and_files_the_outcome(
    hub: Standin, world: tuple[World, Any], uid: str
) -> None:
    """The Cloud Run job path (runtime/hub_job.py): the grant filed on the ledger, re-verified, uploaded with
    progress, the outcome filed as apply-grant would; a forged ledger entry is refused."""
    from rlcleanup.authority import ledger
    from rlcleanup.authority.grants import GrantState, verify
    from rlcleanup.runtime.hub_job import run_job

    w, key = world
    p = w.stack.ports
    grant = _grant(w, f"hf://rl-team/job-{uid}")
    message = w.message(grant, key=key)
    verdict = verify(p.records, message, p.clock.now(), expected_run=w.run_id)
    assert verdict.refusal is None
    assert ledger.file_grant(p.records, w.run_id, grant.grant_id, verdict, GrantState.applying, p.clock.now())
    outcome = run_job(p, w.run_id, grant.grant_id)
    assert outcome.state == "handed_off", outcome
    doc = ledger.get_grant_doc(p.records, w.run_id, grant.grant_id)
    assert doc is not None and doc["state"] == "used" and doc["outcome"]["uri"] == outcome.uri
    assert w.action(grant.grant_id)["state"] == "handed_off"  # synced onto the record
    assert MARKER in hub.files(f"rl-team/job-{uid}")
    assert run_job(p, w.run_id, grant.grant_id).detail == "already applied"  # a restarted job redoes nothing

    forged = _grant(w, f"hf://rl-team/forged-{uid}")
    other_key = new_key()
    fverdict = verify(p.records, w.message(forged, key=other_key), p.clock.now(), expected_run=w.run_id)
    assert fverdict.raw is not None and fverdict.signature  # filed as if it had passed (a tampered ledger)
    ledger.file_grant(p.records, w.run_id, forged.grant_id, fverdict, GrantState.applying, p.clock.now())
    refused = run_job(p, w.run_id, forged.grant_id)
    assert refused.refusal is not None and refused.refusal.value == "bad_signature"
    assert "rl-team/forged" not in json.dumps(hub.stats())
