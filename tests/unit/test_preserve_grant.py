"""Issue 49 item 1's alternative: `grant --action preserve --step N --to URI` copies a step's checkpoint to durable
storage, exactly the objects (and versions) listed when the grant was signed, verifies every copy and records it;
an export grant of that step then reads the preserved copy, whose expiry is none. Adversarial: a checkpoint changed
after signing, or while it is copied, a destination under the run's roots or on temp storage, and a destination
holding other bytes are refused with nothing of ours left behind. Embedded local storage (LocalStorage, the
real local backend: pinned copies streamed with every byte hashed) on the `deferred-export` sample, whose step 20
export is owed and whose checkpoint lies under `tmp/ttl=<N>d/`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_support import add_approver, classify_sample, invoke, isolated_cli_env, ray_export_env

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority.grants import Action, Grant, Refusal
from rlcleanup.authority.outcome import Outcome
from rlcleanup.authority.preserve import MARKER, preserve, preserve_target
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.storage import WriteOutcome
from rlcleanup.runtime.backends import open_storage

CONVERTER = ["python3", "-m", "tiny_converter"]


@pytest.fixture(scope="module")
def classified(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path, Path]]:
    """(run id, run root, step 20's checkpoint, base) of a classified deferred-export run; alice may grant under
    the run's root (to try the refusal) and under base/durable."""
    base = tmp_path_factory.mktemp("preserve-grant")
    with pytest.MonkeyPatch.context() as mp:
        isolated_cli_env(base, mp)
        run_id, root = classify_sample(base, "deferred-export")
        (base / "durable").mkdir(mode=0o700)
        add_approver("alice", base.resolve())
        [request] = (base / "src").rglob("global_step_20/hf_export_request.json")
        yield run_id, root, request.parent, base


@pytest.fixture
def run(
    classified: tuple[str, Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Path, Path, Path]]:
    run_id, root, checkpoint, base = classified
    ray_export_env(base, monkeypatch, CONVERTER, "http://127.0.0.1:9")  # never reached: previews submit nothing
    files = {f: (f.read_bytes(), f.stat().st_mtime) for f in checkpoint.rglob("*") if f.is_file()}
    yield run_id, root, checkpoint, base
    for f, (data, mtime) in files.items():
        if f.read_bytes() != data:
            f.write_bytes(data)
        os.utime(f, (mtime, mtime))


def _record(run_id: str) -> CompletionRecord:
    code, out, err = invoke("show", run_id, "--json")
    assert code == 0, err
    return CompletionRecord.model_validate(json.loads(out))


def _grant(run_id: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code, out, err = invoke("grant", run_id, "--key", "alice", "--json", *extra)
    assert out.strip(), (code, err)
    return code, json.loads(out)


def _signed(record: CompletionRecord, digest: str, dest: Path) -> Grant:
    now = datetime.now(UTC)
    return Grant(
        run_id=record.run_id, action=Action.preserve, step=20, digest=digest, destination=str(dest),
        granted_by="alice", granted_at=now, expires_at=now + timedelta(hours=1),
    )  # fmt: skip


def _signed_preserve(run_id: str) -> Callable[[Path], Outcome]:
    """A preserve of step 20 to a destination, signed over the checkpoint's manifest as it is listed now (before a
    test changes anything), carried out against the run's record and storage."""
    record, storage = _record(run_id), open_storage()
    _, digest = preserve_target(storage, record, 20, None)
    return lambda dest: preserve(storage, record, _signed(record, digest, dest))


def _files(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


def test_an_export_that_cannot_finish_in_time_runs_after_a_preserve_from_the_verified_copy(
    run: tuple[str, Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _, checkpoint, base = run
    ttl = int(str(checkpoint).split("ttl=")[1].split("d")[0])
    aged = time.time() - ttl * 86400 + 3600  # the lifecycle rule deletes the checkpoint in an hour
    for f in checkpoint.rglob("*"):
        os.utime(f, (aged, aged))
    monkeypatch.setenv("RLCLEANUP_EXPORT_THROUGHPUT_BYTES_PER_SECOND", "1")
    code, refused = _grant(run_id, "--action", "export", "--step", "20", "--dry-run")
    assert code == 3 and refused["refusal"] == "expires_too_soon", refused
    command = f"rlcleanup grant {run_id} --action preserve --step 20 --to <durable URI> --key <key id> --dry-run"
    assert command in refused["detail"], refused["detail"]

    dest = base / "durable" / "s20"
    code, preview = _grant(run_id, "--action", "preserve", "--step", "20", "--to", str(dest), "--dry-run")
    source = _files(checkpoint)
    assert code == 0 and preview["would"] == "preserve", preview
    assert sorted(o["name"] for o in preview["objects"]) == sorted(source), preview["objects"]
    assert preview["total_bytes"] == sum(len(b) for b in source.values()) > 0
    assert preview["checkpoint"] == str(checkpoint) and not dest.exists()  # a preview writes nothing
    code, text, _ = invoke("grant", run_id, "--action", "preserve", "--step", "20", "--to", str(dest),
                           "--key", "alice", "--dry-run")  # fmt: skip
    assert code == 0 and f"preserve step 20's checkpoint {checkpoint}" in text, text

    code, granted = _grant(run_id, "--action", "preserve", "--step", "20", "--to", str(dest))
    assert code == 0 and granted["state"] == "preserved", granted
    copied = _files(dest)
    assert copied.pop(MARKER) and copied == source  # byte for byte, every object, the marker written last
    [action] = [a for a in _record(run_id).authority_actions if a.action == "preserve"]
    assert action.preserved is not None and action.refusal is None and action.verified_objects == len(source)
    assert action.preserved.destination == str(dest) and action.preserved.manifest_digest == action.digest
    assert {o.name: o.size for o in action.preserved.objects} == {n: len(b) for n, b in source.items()}
    assert all(o.sha256 for o in action.preserved.objects)  # streamed on local disk: every byte hashed

    code, preview = _grant(run_id, "--action", "export", "--step", "20", "--dry-run")
    assert code == 0 and preview["would"] == "submit", preview
    assert f"++checkpoint_export.checkpoint_path={dest}" in preview["argv"]  # the job reads the durable copy
    assert preview["checkpoint"] == str(dest) and preview["checkpoint_expires_at"] is None
    assert preview["throughput"]["basis"] == "default" and preview["throughput"]["bytes_per_second"] == 1
    # The copy altered afterwards (one byte, same size: its CRC32C tells): the export refuses to read it.
    victim = next(p for p in sorted(dest.rglob("*")) if p.is_file() and p.stat().st_size and p.suffix != ".json")
    data = victim.read_bytes()
    victim.write_bytes(bytes([data[0] ^ 1]) + data[1:])
    code, refused = _grant(run_id, "--action", "export", "--step", "20", "--dry-run")
    assert code == 3 and refused["refusal"] == "destination_altered", refused


def test_a_checkpoint_changed_after_signing_is_refused_with_nothing_copied(run: tuple[str, Path, Path, Path]) -> None:
    run_id, _, checkpoint, base = run
    preserve_to = _signed_preserve(run_id)
    shard = next(f for f in sorted(checkpoint.rglob("*")) if f.is_file() and f.stat().st_size > 0)
    data, stat = shard.read_bytes(), shard.stat()
    shard.write_bytes(bytes([data[0] ^ 1]) + data[1:])  # one bit, same size, mtime put back
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    dest = base / "durable" / "s20-tampered"
    refused = preserve_to(dest)
    assert refused.refusal is Refusal.wrong_digest, refused
    assert not dest.exists()


def test_a_checkpoint_changed_while_it_is_copied_leaves_nothing_at_the_destination(
    run: tuple[str, Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _, checkpoint, base = run
    preserve_to = _signed_preserve(run_id)
    victim = sorted(f for f in checkpoint.rglob("*") if f.is_file())[-1]  # copied last: earlier copies are made
    uploads: list[str] = []
    upload = LocalStorage.upload_file_if_absent

    def owner_rewrites_while_copying(self: LocalStorage, path: Path, dst_uri: str) -> WriteOutcome:
        uploads.append(dst_uri)  # the run's owner rewrites a checkpoint file after the grant's listing
        if len(uploads) == 1:
            victim.write_bytes(victim.read_bytes() + b"late")
        return upload(self, path, dst_uri)

    monkeypatch.setattr(LocalStorage, "upload_file_if_absent", owner_rewrites_while_copying)
    dest = base / "durable" / "s20-racing"
    refused = preserve_to(dest)
    assert refused.refusal is Refusal.source_changed, refused
    assert len(uploads) >= 2  # copies were made before the change was seen ...
    assert not dest.exists() or not any(p.is_file() for p in dest.rglob("*"))  # ... and none is left


def test_a_destination_the_run_owns_or_that_expires_is_refused_before_a_byte_moves(
    run: tuple[str, Path, Path, Path],
) -> None:
    run_id, root, checkpoint, base = run
    preserve_to = _signed_preserve(run_id)
    cases = {
        root.resolve() / "preserved-inside": Refusal.not_allowed,  # the run writes there, a reclaim deletes there
        checkpoint.resolve() / "copy": Refusal.not_allowed,
        base.resolve() / "src": Refusal.not_allowed,  # holds the run
        base.resolve() / "durable" / "tmp" / "ttl=7d" / "s20": Refusal.destination_expires,  # deleted in 7 days
    }
    before = {name: _files(base / name) for name in ("src", "durable")}
    for dest, refusal in cases.items():
        refused = preserve_to(dest)
        assert refused.refusal is refusal, (dest, refused)
    # The preview and the grant give the same refusal through the command line.
    dest = str(base.resolve() / "durable" / "tmp" / "ttl=7d" / "s20")
    code_preview, preview = _grant(run_id, "--action", "preserve", "--step", "20", "--to", dest, "--dry-run")
    code_grant, granted = _grant(run_id, "--action", "preserve", "--step", "20", "--to", dest)
    assert code_preview == code_grant == 3, (preview, granted)
    assert preview["refusal"] == granted["refusal"] == "destination_expires", (preview, granted)
    assert "tmp/ttl=7d/" in preview["detail"]
    assert {name: _files(base / name) for name in ("src", "durable")} == before  # nothing written anywhere


def test_a_destination_holding_other_bytes_is_never_overwritten_and_ours_are_removed(
    run: tuple[str, Path, Path, Path],
) -> None:
    run_id, _, checkpoint, base = run
    preserve_to = _signed_preserve(run_id)
    dest = base / "durable" / "s20-occupied"
    dest.mkdir(mode=0o700)
    names = sorted(str(f.relative_to(checkpoint)) for f in checkpoint.rglob("*") if f.is_file())
    foreign = dest / names[-1]
    foreign.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    foreign.write_bytes(b"someone else's file")
    refused = preserve_to(dest)
    assert refused.refusal is Refusal.destination_conflict, refused
    assert _files(dest) == {names[-1]: b"someone else's file"}  # theirs untouched, none of ours left
    foreign.unlink()
    (dest / MARKER).write_bytes(b"\xff not a marker")  # another's marker, not even JSON: a conflict, not a defect
    refused = preserve_to(dest)
    assert refused.refusal is Refusal.destination_conflict, refused
    assert _files(dest) == {MARKER: b"\xff not a marker"}
    code, preview = _grant(run_id, "--action", "preserve", "--step", "20", "--to", str(dest), "--dry-run")
    assert code == 3 and preview["refusal"] == "destination_conflict", preview  # the preview refuses it too
    code, _, err = invoke("grant", run_id, "--action", "preserve", "--step", "20", "--key", "alice",
                          "--to", str(dest), "--digest", "0" * 64, "--dry-run")  # fmt: skip
    assert code == 3 and "not --digest" in err, err  # the checkpoint is not what the approver pinned: unsigned
    code, _, err = invoke("grant", run_id, "--action", "preserve", "--step", "20", "--key", "alice", "--dry-run")
    assert code == 2 and "--to" in err, err  # no destination: nothing signed
