"""Publish / hand-off / register on the embedded stack: the gates, the happy path, resume and ordering."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from authority_support import files_under, make_world

from rlcleanup.authority.artifact import listing
from rlcleanup.authority.grants import Approver, Grant, public_b64, register_approver
from rlcleanup.formats.checkpoints.base import export_digest
from rlcleanup.ports.storage import StorageError
from rlcleanup.steps.layout import discover

TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"


def test_publish_verified_with_provenance(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    w.deliver(w.message(grant))
    dest = Path(grant.destination or "")
    action = w.action(grant.grant_id)
    assert action["state"] == "published" and action["refusal"] is None
    prov = json.loads((dest / "provenance.json").read_text())
    assert prov["run_id"] == w.run_id and prov["grant_id"] == grant.grant_id and prov["step"] == grant.step
    assert prov["resolved_config_sha256"] == w.record.resolved_config.sha256  # type: ignore[union-attr]
    assert prov["source_revision"]["trainer_commit"] and prov["chain_coverage"]["last_step"] == 40
    names = {row["name"] for row in prov["manifest"]}
    assert "model-00001-of-00003.safetensors" in names and any(n.startswith("training_logs/") for n in names)
    for row in prov["manifest"]:  # every object at the destination is exactly what the manifest says
        assert (dest / row["name"]).stat().st_size == row["size"]
    assert action["verified_objects"] == len(prov["manifest"])
    marker = json.loads((dest / "_PUBLISHED.json").read_text())
    assert marker["digest"] == grant.digest and marker["object_count"] == len(prov["manifest"])


def test_planted_secret_in_a_log_refuses_and_names_file_and_line(tmp_path: Path) -> None:
    w = make_world(tmp_path, run=False)
    log = next((tmp_path / "runs").rglob("finelog.log"))
    lines = log.read_text().splitlines()
    lines.insert(10, f"export HF_TOKEN={TOKEN}")
    log.write_text("\n".join(lines) + "\n")
    from rlcleanup.runtime.embedded import manual_event

    w.stack.emit(manual_event(w.run_uri))
    grant = w.grant()
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "secret_found"
    assert "finelog.log:11: Hugging Face token" in action["detail"]
    assert TOKEN not in json.dumps(w.record.model_dump(mode="json"))
    assert TOKEN not in json.dumps(w.grant_doc(grant.grant_id))
    assert files_under(w.dest_root) == []


def test_public_destination_under_private_grant_is_refused(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    # pytest's tmp dirs are 0700 (their ancestors cap visibility): use a world-readable dir under /tmp.
    public = Path(tempfile.mkdtemp(prefix="rlcleanup-public-"))
    os.chmod(public, 0o755)
    try:
        register_approver(
            w.stack.ports.records,
            Approver(approver_id="alice", public_key=public_b64(w.key), allowed_prefixes=[str(public)]),
        )
        grant = w.grant(visibility="private", destination=str(public))
        w.deliver(w.message(grant))
        action = w.action(grant.grant_id)
        assert action["refusal"] == "visibility_broader" and "world-readable" in action["detail"]
        assert "fix: make the destination private (`chmod go-rwx DIR`" in action["detail"]  # the fix, not only docs
        assert files_under(public) == []
    finally:
        shutil.rmtree(public)


def test_a_missing_local_destination_is_created_0700_and_said_so(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    # Under a world-readable parent (like /tmp): the new directories are private whatever the parent and umask.
    public = Path(tempfile.mkdtemp(prefix="rlcleanup-public-"))
    os.chmod(public, 0o755)
    try:
        register_approver(
            w.stack.ports.records,
            Approver(approver_id="alice", public_key=public_b64(w.key), allowed_prefixes=[str(public)]),
        )
        dest = public / "team" / "model"
        grant = w.grant(visibility="private", destination=str(dest))
        w.deliver(w.message(grant))
        action = w.action(grant.grant_id)
        assert action["state"] == "published", action
        assert action["detail"].startswith(f"created {public / 'team'}, {dest} (mode 0700); visibility private")
        assert stat.S_IMODE(os.stat(public / "team").st_mode) == 0o700
        assert stat.S_IMODE(os.stat(dest).st_mode) == 0o700
        assert (dest / "_PUBLISHED.json").is_file()
    finally:
        shutil.rmtree(public)


def test_grant_before_record_is_ready_is_applied_once_it_is(tmp_path: Path) -> None:
    w = make_world(tmp_path, run=False)
    layout = discover(w.stack.ports.storage, w.run_uri)
    digest = export_digest(listing(w.stack.ports.storage, layout.export_uri(40)).items())  # no record yet
    now = datetime.now(UTC)
    early = Grant(
        run_id=w.run_id, action="publish", step=40, digest=digest, destination=str(w.dest_root / "model"),
        granted_by="alice", granted_at=now, expires_at=now + timedelta(hours=1),
    )  # fmt: skip
    w.deliver(w.message(early))
    doc = w.stack.ports.records.get_doc(f"runs/{w.run_id}/grants", early.grant_id)
    assert doc is not None and doc["state"] == "pending"
    assert files_under(w.dest_root) == []
    from rlcleanup.runtime.embedded import manual_event

    w.stack.emit(manual_event(w.run_uri))  # the pipeline finishes; record-ready retries the waiting grant
    assert w.grant_doc(early.grant_id)["state"] == "used"
    assert (w.dest_root / "model" / "_PUBLISHED.json").exists()


def test_duplicate_delivery_publishes_once(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    storage = w.stack.ports.storage
    copies: list[str] = []
    real = storage.upload_file_if_absent  # pinned copies of local files stream through it

    def counting(src: Path, dst: str):  # type: ignore[no-untyped-def]
        if dst.startswith(str(w.dest_root)):
            copies.append(dst)
        return real(src, dst)

    storage.upload_file_if_absent = counting  # type: ignore[method-assign]
    grant = w.grant()
    data = w.message(grant)
    w.deliver(data)
    first = len(copies)
    w.deliver(data)  # Pub/Sub redelivery of the same message
    w.deliver(data)
    assert first > 0 and len(copies) == first
    assert [a.state for a in w.record.authority_actions].count("published") == 1


def test_interrupted_copy_leaves_no_completion_marker_and_resumes(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    storage = w.stack.ports.storage
    real = storage.upload_file_if_absent

    def flaky(src: Path, dst: str):  # type: ignore[no-untyped-def]
        if dst.startswith(str(w.dest_root)) and dst.endswith("model-00002-of-00003.safetensors"):
            raise StorageError("connection reset")
        return real(src, dst)

    storage.upload_file_if_absent = flaky  # type: ignore[method-assign]
    grant = w.grant()
    w.deliver(w.message(grant))  # every redelivery fails on the same object
    dest = w.dest_root / "model"
    assert (dest / "model-00001-of-00003.safetensors").exists()
    assert not (dest / "_PUBLISHED.json").exists()
    assert w.grant_doc(grant.grant_id)["state"] == "applying"
    storage.upload_file_if_absent = real  # type: ignore[method-assign]
    w.deliver(w.message(grant))  # the next delivery resumes the same grant
    assert (dest / "_PUBLISHED.json").exists()
    assert w.grant_doc(grant.grant_id)["state"] == "used"


def test_registration_row_only_when_declared(tmp_path: Path) -> None:
    declared = make_world(tmp_path / "declared")  # selection-policy declares cleanup.registration
    declared.deliver(declared.message(declared.grant("publish")))
    reg = declared.grant("register")
    declared.deliver(declared.message(reg))
    rows = declared.stack.ports.records.list_docs("model_registry")
    assert len(rows) == 1 and rows[0][1]["training_type"] == "RL" and rows[0][1]["digest"] == reg.digest
    assert (declared.record.registration or "").startswith("registered: model_registry/")

    plain = make_world(tmp_path / "plain", scenario="completed-resumed")  # declares nothing
    plain.deliver(plain.message(plain.grant("publish")))
    reg = plain.grant("register")
    plain.deliver(plain.message(reg))
    assert plain.stack.ports.records.list_docs("model_registry") == []
    assert plain.action(reg.grant_id)["state"] == "not_applicable"
    assert "registration does not apply" in (plain.record.registration or "")


def test_registration_honours_the_classified_configuration_not_a_later_edit(tmp_path: Path) -> None:
    """Register reads the layout classification stored, not the run's files again: a config edited after the run
    (the run's owners can write it) neither withdraws a declared registration nor invents one."""
    w = make_world(tmp_path / "declared")
    w.deliver(w.message(w.grant("publish")))
    config = next(Path(w.run_uri).rglob("resolved-skyrl.json"))
    edited = json.loads(config.read_text())
    assert edited.pop("cleanup", None) is not None  # the declaration, removed after classification
    config.write_text(json.dumps(edited))
    reg = w.grant("register")
    w.deliver(w.message(reg))
    assert w.action(reg.grant_id)["state"] == "registered", w.action(reg.grant_id)
    assert len(w.stack.ports.records.list_docs("model_registry")) == 1


def test_applying_a_publish_pins_the_artifact_once(tmp_path: Path, pin_resolutions: list[str]) -> None:
    """One listing and re-digest of the export per application: the plan, the copies and the provenance use
    the versions it pinned."""
    w = make_world(tmp_path)
    grant = w.grant()
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "published"
    assert pin_resolutions == ["resolve"]


@pytest.mark.parametrize("action", ["handoff"])
def test_handoff_is_recorded_as_handed_off(tmp_path: Path, action: str) -> None:
    w = make_world(tmp_path)
    grant = w.grant(action)
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "handed_off"
    assert json.loads((w.dest_root / "model" / "provenance.json").read_text())["action"] == "handoff"
