"""A grant checks the export's weight shards against its model manifest (issue 34 item 7; run-layout-v3.md §3):
validation checks sizes and the small files' sha256; the pinned copy of a publish or hand-off hashes every byte it
streams, so each file the manifest lists is held to its sha256 there. A mismatch refuses the grant
(`manifest_mismatch`) and leaves nothing behind; a clean publish says the manifest's sha256 were verified; a copy
that sees no byte (a GCS server-side rewrite) says which sha256 were not checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from authority_support import World, files_under, make_world
from hub_fake import FakeHub

from rlcleanup.authority.artifact import Pinned, pin
from rlcleanup.authority.grants import Approver, new_key, public_b64, register_approver
from rlcleanup.authority.hub_publish import publish_to_hub
from rlcleanup.authority.manifest_check import verify_staged_manifest
from rlcleanup.authority.pinning import CopyProof
from rlcleanup.authority.staging import STAGING
from rlcleanup.formats.model_manifest import MANIFEST_NAME
from rlcleanup.runtime.embedded import manual_event

STEP = 20  # the model-manifest sample's last export, valid and manifested


def _export(w: World) -> Path:
    return next(Path(w.run_uri).glob(f"exports/global_step_{STEP}/policy"))


def _flip_last_shard_byte(export: Path) -> str:
    """Same size, other bytes, in the tensor data (not the header): validation's listing cannot tell."""
    shard = sorted(export.glob("*.safetensors"))[-1]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01
    shard.write_bytes(bytes(data))
    return shard.name


def _manifested_world(tmp_path: Path, *, corrupt: bool) -> tuple[World, str | None]:
    w = make_world(tmp_path, "model-manifest", run=False)
    flipped = _flip_last_shard_byte(_export(w)) if corrupt else None
    w.stack.emit(manual_event(w.run_uri))
    cand = w.candidate(STEP)
    assert cand.valid and cand.model_identity is not None, cand.problems  # sizes match: validation passes
    return w, flipped


def _staging_empty(w: World) -> bool:
    return files_under(Path(w.record.preserved_locations[0]) / STAGING) == []


def test_a_shard_whose_bytes_differ_from_the_manifest_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    w, flipped = _manifested_world(tmp_path, corrupt=True)
    grant = w.grant(step=STEP, destination=str(w.dest_root / "new" / "model"))
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["state"] == "refused" and action["refusal"] == "manifest_mismatch", action
    assert f"{flipped} hashes to" in action["detail"] and MANIFEST_NAME in action["detail"]
    assert files_under(w.dest_root) == [] and not (w.dest_root / "new").exists() and _staging_empty(w)


def test_a_clean_manifested_export_publishes_and_says_its_sha256_were_verified(tmp_path: Path) -> None:
    w, _ = _manifested_world(tmp_path, corrupt=False)
    grant = w.grant(step=STEP)
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["state"] == "published", action
    manifest = json.loads((_export(w) / MANIFEST_NAME).read_text())
    listed = [f["path"] for f in manifest["files"]]
    statement = f"model manifest {manifest['identity']}: {len(listed)} file(s) sha256 verified"
    assert action["detail"].endswith(statement), action["detail"]
    outcome = w.grant_doc(grant.grant_id)["outcome"]
    assert outcome["model_manifest"]["sha256_verified"] == listed
    assert outcome["model_manifest"]["sha256_not_checked"] == []
    assert any(name.endswith(".safetensors") for name in listed)  # the shards, not only the small files
    assert (w.dest_root / "model" / "_PUBLISHED.json").exists()


def test_an_export_without_a_manifest_publishes_as_before(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["state"] == "published" and "model manifest" not in action["detail"]
    assert "model_manifest" not in w.grant_doc(grant.grant_id)["outcome"]


def _hub(w: World) -> FakeHub:
    key = new_key()
    register_approver(
        w.stack.ports.records, Approver(approver_id="bob", public_key=public_b64(key), allowed_prefixes=["hf://rl"])
    )
    hub = FakeHub()
    w.stack.ports.model_hub = lambda: hub
    return hub


@pytest.mark.parametrize("corrupt", [True, False])
def test_a_hub_hand_off_checks_the_manifest_before_the_repo_exists(tmp_path: Path, corrupt: bool) -> None:
    w, flipped = _manifested_world(tmp_path, corrupt=corrupt)
    hub = _hub(w)
    grant = w.grant(action="handoff", step=STEP, destination="hf://rl/m", granted_by="bob")
    pinned = pin(w.stack.ports.storage, w.record, grant)
    assert isinstance(pinned, Pinned)
    out = publish_to_hub(w.stack.ports.storage, w.record, grant, hub, pinned)
    assert _staging_empty(w)
    if corrupt:
        assert (
            out.refusal is not None and out.refusal.value == "manifest_mismatch" and f"{flipped} hashes" in out.detail
        )
        assert hub.repos == {} and hub.commits == []
    else:
        assert out.refusal is None, out.detail
        assert (
            "sha256 verified" in out.detail
            and out.model_manifest is not None
            and out.model_manifest["sha256_not_checked"] == []
        )


def _proof(tmp_path: Path, name: str, data: bytes, sha256: str | None) -> CopyProof:
    path = tmp_path / "staging" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return CopyProof(
        source=f"src/{name}", source_fingerprint="v1", destination=str(path), size=len(data), sha256=sha256,
        outcome="created",
    )  # fmt: skip


def test_a_copy_that_saw_no_byte_says_which_sha256_were_not_checked(tmp_path: Path) -> None:
    """The GCS server-side rewrite's proof carries no sha256: unless asked to stream, the verdict names the files
    it could not hash, and says their sizes and CRC32C matched; asked to stream (the Hub), it hashes them."""
    import hashlib

    from rlcleanup.adapters.local_storage import LocalStorage
    from rlcleanup.samples.v3 import write_model_manifest

    export = tmp_path / "export"
    export.mkdir()
    files = {"model.safetensors.index.json": b"{}", "model-00001-of-00001.safetensors": b"\x00" * 64}
    for name, data in files.items():
        (export / name).write_bytes(data)
    identity = write_model_manifest(export, model_id="org/m", revision="r")
    staging = str(tmp_path / "staging")
    proofs = {
        name: _proof(tmp_path, name, data, hashlib.sha256(data).hexdigest() if name.endswith(".json") else None)
        for name, data in [*files.items(), (MANIFEST_NAME, (export / MANIFEST_NAME).read_bytes())]
    }
    storage = LocalStorage(checksums=False)
    said = verify_staged_manifest(storage, staging, proofs, identity, stream_unhashed=False)
    assert said is not None and said.mismatch is None
    assert (said.verified, said.not_checked) == (["model.safetensors.index.json"], ["model-00001-of-00001.safetensors"])
    assert "sha256 not checked for 1 file(s) ['model-00001-of-00001.safetensors']" in said.statement()
    assert "sizes matched the manifest and the server copied exactly the pinned source version" in said.statement()
    streamed = verify_staged_manifest(storage, staging, proofs, identity, stream_unhashed=True)
    assert streamed is not None and streamed.not_checked == [] and len(streamed.verified) == 2
    stale = verify_staged_manifest(storage, staging, proofs, "sha256:" + "0" * 64, stream_unhashed=False)
    assert stale is not None and stale.mismatch is not None and "validated sha256:000" in stale.mismatch
