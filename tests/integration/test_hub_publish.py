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
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # the authority tests' world builder
from authority_support import World, make_world
from hub_support import TOKEN, Standin, serve_standin

from rlcleanup.adapters.local_jobs import SubprocessJobLauncher
from rlcleanup.authority import ledger
from rlcleanup.authority.grants import Approver, Grant, GrantState, new_key, public_b64, register_approver, verify
from rlcleanup.authority.hub_card import model_card
from rlcleanup.authority.hub_publish import MARKER
from rlcleanup.models.model_events import ModelEvent, ModelEventType
from rlcleanup.ports.hub import git_blob_sha
from rlcleanup.runtime.ports import HUB_JOB_MODULE
from rlcleanup.runtime.topology import load_topology

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def hub_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    yield from serve_standin(tmp_path_factory)


@pytest.fixture
def hub(hub_server: Standin, monkeypatch: pytest.MonkeyPatch) -> Standin:
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub_server.call(
        "/__standin/control",
        {"force_public_orgs": [], "fail_lfs_put_after": None, "fail_lfs_put_count": None, "corrupt_sha_suffix": None},
    )
    return hub_server


@pytest.fixture
def world(tmp_path: Path) -> tuple[World, Any]:
    return _with_bob(make_world(tmp_path))


def _with_bob(w: World) -> tuple[World, Any]:
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
    from rlcleanup.authority import artifact, hub_publish
    from rlcleanup.ports.storage import StorageError

    w, _ = world
    repo = f"rl-team/resume-{uid}"
    grant = _grant(w, f"hf://{repo}")
    monkeypatch.setattr(hub_publish, "BATCH_FILES", 3)  # several commits: the interruption lands after some
    hub.call("/__standin/control", {"fail_lfs_put_after": 2})
    storage = w.stack.ports.storage
    pinned = artifact.pin(storage, w.record, grant)
    assert isinstance(pinned, artifact.Pinned), pinned
    with pytest.raises(StorageError, match="Error while uploading"):  # transient: the delivery is retried
        hub_publish.publish_to_hub(storage, w.record, grant, HubDestination(), pinned)
    committed = hub.files(repo)
    assert committed and MARKER not in committed  # some batches landed, nothing claims completeness
    hub.call("/__standin/control", {"fail_lfs_put_after": None})
    before = hub.stats()
    outcome = hub_publish.publish_to_hub(storage, w.record, grant, HubDestination(), pinned)
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


PLANTED = "export HF_TOKEN=hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345\n"


@pytest.mark.parametrize("where", ["run", "preserved"])
def test_a_planted_token_is_refused_before_the_repo_gets_a_byte(
    hub: Standin, tmp_path: Path, uid: str, where: str
) -> None:
    """A token in the run's own log (preserved as it is) is `secret_found`; the same line added to the preserved
    copy after sealing is tampered evidence (`evidence_tampered`). Either way the repo gets nothing."""
    from rlcleanup.runtime.embedded import manual_event

    w, key = _with_bob(make_world(tmp_path, run=False))
    if where == "run":
        log = next((tmp_path / "runs").rglob("finelog.log"))
        log.write_text(log.read_text() + PLANTED)
    w.stack.emit(manual_event(w.run_uri))
    if where == "preserved":
        log = next(Path(w.record.preserved_locations[0]).rglob("*.log"))
        os.chmod(log, 0o644)
        log.write_text(log.read_text() + PLANTED)
    before = hub.stats()
    action = _deliver(w, key, _grant(w, f"hf://rl-team/secret-{where}-{uid}"))
    assert action["refusal"] == ("secret_found" if where == "run" else "evidence_tampered")
    spent = _delta(before, hub.stats())
    assert set(spent) == {"GET /api/models/{repo}"}, spent  # only the read-back: no repo is even created
    assert not list(Path(w.record.preserved_locations[0], "authority", "staging").rglob("*.*"))  # staging removed


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
    assert doc is not None and doc.state == "used" and doc.result["uri"] == outcome.uri
    assert w.action(grant.grant_id)["state"] == "handed_off"  # synced onto the record
    assert MARKER in hub.files(f"rl-team/job-{uid}")
    assert run_job(p, w.run_id, grant.grant_id).detail == "already applied"  # a restarted job redoes nothing
    # ... but announces the hand-off again under the same id (issue 49: at least once, deduped on the id)
    topic = load_topology().route("apply-grant", "announce")
    announced = [ModelEvent.model_validate_json(m.data) for m in w.stack.bus.published if m.topic == topic]
    assert [e.type for e in announced] == [ModelEventType.published] * 2 and announced[0].id == announced[1].id
    assert announced[0].data.destination == grant.destination and announced[0].data.provenance_uri == outcome.uri

    forged = _grant(w, f"hf://rl-team/forged-{uid}")
    other_key = new_key()
    fverdict = verify(p.records, w.message(forged, key=other_key), p.clock.now(), expected_run=w.run_id)
    assert fverdict.raw is not None and fverdict.signature  # filed as if it had passed (a tampered ledger)
    ledger.file_grant(p.records, w.run_id, forged.grant_id, fverdict, GrantState.applying, p.clock.now())
    refused = run_job(p, w.run_id, forged.grant_id)
    assert refused.refusal is not None and refused.refusal.value == "bad_signature"
    assert "rl-team/forged" not in json.dumps(hub.stats())
    assert len([m for m in w.stack.bus.published if m.topic == topic]) == 2, "a refused job announced a model"


def test_files_we_generate_are_scanned_as_staged_and_refused_before_the_hub_gets_anything(
    hub: Standin, world: tuple[World, Any], uid: str
) -> None:
    """The model card and provenance.json are written by us from record fields a run controls (base model):
    they go through the same staged scan as the run's own files."""
    w, key = world
    w.stack.ports.records.update(w.run_id, {"base_model": "org/m?token=hf_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBa987654"})
    before = hub.stats()
    action = _deliver(w, key, _grant(w, f"hf://rl-team/card-{uid}"))
    assert action["refusal"] == "secret_found", action
    assert "README.md" in action["detail"] or "provenance.json" in action["detail"]
    assert set(_delta(before, hub.stats())) == {"GET /api/models/{repo}"}


def _job_world(w: World, **args: Any) -> SubprocessJobLauncher:
    """apply-grant wired to start the upload job as a child process (the embedded stack's launcher), for every
    Hub export over 0 bytes."""
    launcher = SubprocessJobLauncher(
        HUB_JOB_MODULE,
        ["--sqlite", str(w.tmp / "records.db"), "--preserve-root", str(w.tmp / "preserved"), *_flags(args)],
        log_dir=w.tmp / "job-logs",
    )
    w.stack.ports.hub_upload_job = launcher
    w.stack.ports.settings = w.stack.ports.settings.model_copy(update={"hub_job_threshold_bytes": 0})
    return launcher


def _flags(args: dict[str, Any]) -> list[str]:
    return [part for k, v in args.items() for part in (f"--{k.replace('_', '-')}", str(v))]


def _wait_all(launcher: SubprocessJobLauncher) -> list[int]:
    codes = [popen.wait(timeout=240) for popen in launcher.started]
    logs = [p.read_text() for p in sorted(Path(launcher.log_dir).glob("*.log"))]
    assert codes, "no job was started"
    return codes if all(c in (0, 1, 75) for c in codes) else pytest.fail(f"job crashed: {codes}: {logs}")


def test_a_large_export_is_uploaded_by_the_job_apply_grant_starts_with_progress_on_the_run(
    hub: Standin, world: tuple[World, Any], uid: str
) -> None:
    w, key = world
    launcher = _job_world(w, batch_files=10)
    repo = f"rl-team/big-{uid}"
    grant = _grant(w, f"hf://{repo}")
    started = _deliver(w, key, grant)
    assert started["state"] in {"uploading", "handed_off"}  # handed off already if the child was that quick
    assert len(launcher.started) == 1
    assert _wait_all(launcher) == [0]
    action = w.action(grant.grant_id)
    assert action["state"] == "handed_off", action
    progress = action["progress"]
    assert progress["files_done"] == progress["files_total"] == action["verified_objects"]
    assert progress["bytes_done"] == progress["bytes_total"] > 0 and progress["skipped"] == 0
    assert MARKER in hub.files(repo) and w.grant_doc(grant.grant_id)["state"] == "used"
    w.deliver(w.message(grant, key=key))  # a redelivery neither uploads nor starts a second job
    assert len(launcher.started) == 1


def test_an_inline_hand_off_pins_the_export_once(
    hub: Standin, world: tuple[World, Any], uid: str, pin_resolutions: list[str]
) -> None:
    """With an upload job configured and the export under its threshold, apply-grant decides "inline" from the
    pinned listing and uploads exactly those versions: the export is listed and re-digested once (it was twice:
    once for the size, once more for the plan)."""
    w, key = world
    launcher = _job_world(w)
    w.stack.ports.settings = w.stack.ports.settings.model_copy(update={"hub_job_threshold_bytes": 1 << 50})
    action = _deliver(w, key, _grant(w, f"hf://rl-team/inline-{uid}"))
    assert action["state"] == "handed_off", action
    assert launcher.started == [] and pin_resolutions == ["resolve"]


def test_an_interrupted_job_attempt_is_resumed_by_the_retry_and_skips_what_is_there(
    hub: Standin, world: tuple[World, Any], uid: str
) -> None:
    """As Cloud Run drives the job: attempt 0 fails (exit 75, the failure and its progress noted on the grant),
    the task's retry (CLOUD_RUN_TASK_ATTEMPT=1) resumes and uploads only what is missing."""
    w, key = world
    _job_world(w)
    w.stack.ports.hub_upload_job = None  # file the grant as apply-grant would, then run the job by hand
    repo = f"rl-team/resumed-{uid}"
    grant = _grant(w, f"hf://{repo}")
    p = w.stack.ports
    verdict = verify(p.records, w.message(grant, key=key), p.clock.now(), expected_run=w.run_id)
    assert ledger.file_grant(p.records, w.run_id, grant.grant_id, verdict, GrantState.applying, p.clock.now())
    hub.call("/__standin/control", {"fail_lfs_put_after": 1, "fail_lfs_put_count": 1})
    argv = [sys.executable, "-m", HUB_JOB_MODULE, "--sqlite", str(w.tmp / "records.db"), "--max-retries", "1"]
    argv += ["--batch-files", "3"]
    env = {**os.environ, "RLCLEANUP_HUB_RUN_ID": w.run_id, "RLCLEANUP_HUB_GRANT_ID": grant.grant_id}
    first = subprocess.run(argv, env={**env, "CLOUD_RUN_TASK_ATTEMPT": "0"}, capture_output=True, timeout=240)
    assert first.returncode == 75, first.stderr.decode()[-2000:]
    doc = w.grant_doc(grant.grant_id)
    assert doc["state"] == "applying" and len(doc["attempts"]) == 1
    partial = w.action(grant.grant_id)["progress"]
    assert 0 < partial["files_done"] < partial["files_total"]  # visible on the run while it is not done
    from typer.testing import CliRunner

    from rlcleanup.cli.main import app

    # --backend sqlite: the session stack exports FIRESTORE_EMULATOR_HOST, which makes Firestore the default store
    shown = CliRunner().invoke(app, ["grants", w.run_id, "--backend", "sqlite", "--db", str(w.tmp / "records.db")])
    assert f"({partial['files_done']}/{partial['files_total']} files, " in shown.stdout, shown.stdout
    before = hub.stats()
    second = subprocess.run(argv, env={**env, "CLOUD_RUN_TASK_ATTEMPT": "1"}, capture_output=True, timeout=240)
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    action = w.action(grant.grant_id)
    assert action["state"] == "handed_off", action
    assert action["progress"]["skipped"] == partial["files_done"] and f"{partial['files_done']} already there" in (
        action["detail"] or ""
    )
    lfs_total = len([f for f, r in hub.files(repo).items() if r.get("lfs")])
    assert _delta(before, hub.stats()).get("PUT /__lfs/{oid}", 0) < lfs_total  # uploaded before: not sent again


def test_a_sha_mismatch_seen_by_the_job_is_refused_and_recorded(
    hub: Standin, world: tuple[World, Any], uid: str
) -> None:
    w, key = world
    launcher = _job_world(w)
    repo = f"rl-team/jobcorrupt-{uid}"
    hub.call("/__standin/control", {"corrupt_sha_suffix": ".safetensors"})
    grant = _grant(w, f"hf://{repo}")
    _deliver(w, key, grant)
    assert _wait_all(launcher) == [1]
    action = w.action(grant.grant_id)
    assert action["state"] == "refused" and action["refusal"] == "destination_unverified", action
    assert ".safetensors: Hub reports" in (action["detail"] or "")
    assert MARKER not in hub.files(repo)


def test_dry_run_for_a_hub_destination_shows_what_the_hand_off_would_upload(
    hub: Standin, world: tuple[World, Any], uid: str
) -> None:
    """`grant --dry-run` to hf:// runs hub_publish.plan_hub, the planning the hand-off itself runs: the same
    files, sizes and total; the repo's visibility read back; nothing created or uploaded."""
    from rlcleanup.adapters.hf_hub import HubDestination
    from rlcleanup.authority.artifact import Pinned, pin
    from rlcleanup.authority.hub_publish import plan_hub
    from rlcleanup.authority.preview import preview_grant
    from rlcleanup.cli.preview_text import render_preview

    w, _ = world
    p = w.stack.ports
    repo = f"rl-team/preview-{uid}"
    grant = _grant(w, f"hf://{repo}")
    before = hub.stats()
    preview = preview_grant(p.storage, w.record, grant, p.clock.now(), p.records, HubDestination)
    assert preview["would"] == "handoff" and preview["creates"] == [f"hf://{repo} (private repo)"]
    assert set(_delta(before, hub.stats())) == {"GET /api/models/{repo}"}  # read, nothing created
    pinned = pin(p.storage, w.record, grant)
    assert isinstance(pinned, Pinned), pinned
    applied, refused = plan_hub(p.storage, w.record, grant, HubDestination(), pinned, apply=True)
    assert refused is None and applied is not None
    assert [o["name"] for o in preview["objects"]] == [i.name for i in applied.items]
    assert preview["total_bytes"] == applied.total_bytes == sum(o["size"] for o in preview["objects"])
    names = {o["name"] for o in preview["objects"]}
    assert {"README.md", "provenance.json", "training_logs/metrics.csv"} <= names
    assert any(n.endswith(".safetensors") for n in names)
    text = render_preview(preview)
    assert f"→ hf://{repo}" in text and f"creates hf://{repo} (private repo)" in text

    public = f"open-org/preview-{uid}"
    hub.call("/__standin/seed", {"repo": public, "private": False, "files": {}})
    refused_preview = preview_grant(
        p.storage, w.record, _grant(w, f"hf://{public}"), p.clock.now(), p.records, HubDestination
    )
    assert refused_preview["would"] == "refuse" and refused_preview["refusal"] == "visibility_broader"
