"""Issue 40: reclaim moves into a quarantine it can undo (restore byte-exact, purge only under its own grant, expiry
that removes only quarantined objects), and the red-team properties of reclaim hold for moves and restores."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import google_crc32c
from authority_support import World, files_under, make_world

from rlcleanup.authority import ledger, quarantine
from rlcleanup.authority.grants import new_key
from rlcleanup.runtime.embedded import manual_event
from rlcleanup.settings import QuarantineSettings

PREFIX = "/_rlcleanup-quarantine/"


def _sums(path: Path) -> tuple[bytes, str, str]:
    data = path.read_bytes()
    crc = base64.b64encode(google_crc32c.Checksum(data).digest()).decode()
    return data, crc, base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


def _reclaimed(tmp_path: Path) -> tuple[World, dict[str, tuple[bytes, str, str]], str]:
    w = make_world(tmp_path)
    w.deliver(w.message(w.grant("publish")))
    export = {str(p): _sums(p) for p in files_under(Path(w.candidate(40).uri))}
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "reclaimed", w.action(grant.grant_id)
    return w, export, grant.grant_id


def _held(tmp_path: Path) -> list[Path]:
    return [p for p in files_under(tmp_path / "runs") if PREFIX in str(p)]


def test_restore_after_reclaim_gives_back_every_object_byte_exact_and_never_over_other_bytes(tmp_path: Path) -> None:
    w, export, gid = _reclaimed(tmp_path)
    assert not any(Path(u).exists() for u in export)  # moved out of the run
    held = _held(tmp_path)
    assert len(held) == len(export) and all(f"/{w.run_id}/{gid}/" in str(p) for p in held)
    ledger = w.record.storage_ledger
    assert ledger is not None and ledger.label == f"after reclaim {gid}"
    assert [h.label for h in w.record.storage_ledger_history][-1] == f"before reclaim {gid}"
    moved = sum(len(v[0]) for v in export.values())
    assert next(c.bytes for c in ledger.classes if c.name == "quarantine") == moved
    assert w.record.storage_ledger_history[-1].bytes == ledger.bytes  # moved, not gone: the run still pays for it

    occupied = sorted(export)[0]  # the run wrote other bytes at one path since: never overwritten
    Path(occupied).parent.mkdir(parents=True, exist_ok=True)
    Path(occupied).write_bytes(b"written after the reclaim")
    result = quarantine.restore(
        w.stack.ports.storage, w.stack.ports.records, w.record, datetime.now(UTC), QuarantineSettings()
    )
    assert result.refused and occupied in result.refused[0] and "never overwritten" in result.refused[0]
    assert Path(occupied).read_bytes() == b"written after the reclaim"
    assert set(result.restored) == set(export) - {occupied}
    for uri in result.restored:
        assert _sums(Path(uri)) == export[uri]  # same bytes, CRC32C and MD5
    assert len(_held(tmp_path)) == 1  # only the refused one is still held, for a later restore

    Path(occupied).unlink()
    again = quarantine.restore(
        w.stack.ports.storage, w.stack.ports.records, w.record, datetime.now(UTC), QuarantineSettings()
    )
    assert again.restored == [occupied] and not again.refused and _sums(Path(occupied)) == export[occupied]
    assert not _held(tmp_path)


def test_restore_refuses_another_runs_objects_and_a_location_outside_the_deployments_prefix(tmp_path: Path) -> None:
    w, export, _ = _reclaimed(tmp_path)
    records = w.stack.ports.records
    coll = quarantine.collection(w.run_id)
    docs = records.list_docs(coll)
    _, first = docs[0]
    other_run = tmp_path / "runs" / "durable" / "someone-else" / "weights.bin"
    forged = {  # a store document naming another run's path, and one moved to a prefix a run file could name
        "forged-other-run": {**first, "source": str(other_run)},
        "forged-run-id": {**first, "run_id": "another-run"},
        "forged-prefix": {
            **first,
            "quarantine": first["quarantine"].replace("_rlcleanup-quarantine", "injected"),
            "proof": {
                **first["proof"],
                "destination": first["quarantine"].replace("_rlcleanup-quarantine", "injected"),
            },
        },
    }
    for doc_id, doc in forged.items():
        records.put_doc(coll, doc_id, doc)
    result = quarantine.restore(w.stack.ports.storage, records, w.record, datetime.now(UTC), QuarantineSettings())
    assert not other_run.exists()
    assert any("outside this run's roots" in r for r in result.refused)
    assert any("recorded for run another-run" in r for r in result.refused)
    assert any("not this deployment's" in r for r in result.refused)
    assert set(result.restored) == set(export)  # the genuine records still restore


def test_a_quarantine_prefix_named_by_a_run_file_is_never_used(tmp_path: Path) -> None:
    w = make_world(tmp_path, run=False)
    config = Path(w.run_uri) / "resolved-skyrl.json"
    injected = tmp_path / "dest" / "stolen"
    doc = json.loads(config.read_text())
    doc["cleanup"] = {**(doc.get("cleanup") or {}), "quarantine_prefix": str(injected)}
    doc["trainer"]["quarantine_prefix"] = "../../../dest/stolen"
    config.write_text(json.dumps(doc))
    w.stack.emit(manual_event(w.run_uri))
    w.deliver(w.message(w.grant("publish")))
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "reclaimed"
    parent = Path(w.run_uri).parent
    assert _held(tmp_path) and all(
        str(p).startswith(f"{parent}/_rlcleanup-quarantine/{w.run_id}/{grant.grant_id}/") for p in _held(tmp_path)
    )
    assert not injected.exists() and not (tmp_path / "dest" / "stolen").exists()


def test_bytes_swapped_after_the_preview_or_between_copy_and_delete_stay_in_the_run(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from authority_support import rendered_preview

    w = make_world(tmp_path)
    w.deliver(w.message(w.grant("publish")))
    grant = w.grant("reclaim")
    rendered_preview(w.stack.ports.storage, w.stack.ports.records, w.record, grant)  # what the approver saw
    files = files_under(Path(w.candidate(40).uri))
    swapped = files[0]
    data = bytearray(swapped.read_bytes())
    data[0] ^= 0xFF  # same size
    swapped.write_bytes(bytes(data))
    # and another file is rewritten in the instant between its quarantine copy and its delete
    late = files[1]
    real_copy = quarantine.pinned_copy

    def copy_then_write(storage, src, dst, **pin):  # type: ignore[no-untyped-def]
        proof = real_copy(storage, src, dst, **pin)
        if src.uri == str(late):
            time.sleep(0.01)
            late.write_bytes(late.read_bytes() + b"!")
        return proof

    monkeypatch.setattr(quarantine, "pinned_copy", copy_then_write)
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    # The swap after publish: its version is not the published one, so nothing of the export is moved.
    assert action["state"] == "refused" and action["refusal"] in {"wrong_digest", "destination_unverified"}, action
    assert swapped.read_bytes() == bytes(data) and not _held(tmp_path)

    swapped.write_bytes(bytes(b ^ 0xFF if i == 0 else b for i, b in enumerate(data)))  # the published bytes again
    # (a rewrite with the same bytes is a new version: the plan is made from the versions as they are)
    w2 = make_world(tmp_path / "second")
    w2.deliver(w2.message(w2.grant("publish")))
    files2 = files_under(Path(w2.candidate(40).uri))
    late = files2[1]
    before = late.read_bytes()
    g2 = w2.grant("reclaim")
    w2.deliver(w2.message(g2))
    assert w2.action(g2.grant_id)["state"] == "reclaimed"
    assert late.exists() and late.read_bytes() == before + b"!"  # the source changed after its copy: kept
    held = [p for p in files_under(tmp_path / "second" / "runs") if PREFIX in str(p)]
    assert not any(p.name == late.name for p in held)  # and its stale copy left the quarantine
    entry = next(
        e for _d, e, _r in quarantine.entries(w2.stack.ports.records, w2.run_id) if e and e.source == str(late)
    )
    assert entry.state == "source_kept"


def test_purge_needs_its_own_grant(tmp_path: Path) -> None:
    w, export, gid = _reclaimed(tmp_path)
    held = _held(tmp_path)
    # a reclaim grant delivered again is a replay, never a purge
    w.deliver(w.message(w.grant("reclaim", grant_id=gid)))
    # a purge signed by a key no approver holds is refused
    forged = w.grant("purge")
    w.deliver(w.message(forged, key=new_key()))
    filed = [
        d for _g, d in ledger.list_grants(w.stack.ports.records, w.run_id) if d.body.get("grant_id") == forged.grant_id
    ]
    assert [d.refusal for d in filed] in (["unknown_approver"], ["bad_signature"]), filed
    assert _held(tmp_path) == held
    # the approver's purge grant deletes exactly the quarantined objects, and a restore then has nothing to do
    purge = w.grant("purge")
    w.deliver(w.message(purge))
    assert w.action(purge.grant_id)["state"] == "purged", w.action(purge.grant_id)
    assert not _held(tmp_path)
    assert not any(Path(u).exists() for u in export)
    result = quarantine.restore(
        w.stack.ports.storage, w.stack.ports.records, w.record, datetime.now(UTC), QuarantineSettings()
    )
    assert not result.restored and not result.refused


def test_quarantine_expiry_removes_only_quarantined_objects(tmp_path: Path) -> None:
    from rlcleanup.adapters.local_storage import LocalStorage

    settings = QuarantineSettings(prefix="_rlcleanup-quarantine", days=7)
    old = time.time() - 8 * 86400
    paths = {
        "expired": tmp_path / "_rlcleanup-quarantine" / "run-a" / "g1" / "exports" / "w.bin",
        "fresh": tmp_path / "_rlcleanup-quarantine" / "run-a" / "g2" / "exports" / "w.bin",
        "old-run-file": tmp_path / "run-a" / "exports" / "w.bin",
        "look-alike": tmp_path / "_rlcleanup-quarantine-other" / "w.bin",
    }
    for name, path in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode())
        if name != "fresh":
            os.utime(path, (old, old))
    gone = quarantine.expire(LocalStorage(), str(tmp_path), settings, datetime.now(UTC))
    assert gone == [str(paths["expired"])]
    assert {n for n, p in paths.items() if p.exists()} == {"fresh", "old-run-file", "look-alike"}
    later = quarantine.expire(LocalStorage(), str(tmp_path), settings, datetime.now(UTC) + timedelta(days=8))
    assert later == [str(paths["fresh"])] and paths["old-run-file"].exists() and paths["look-alike"].exists()
