"""Issue 45, "also harden": a signed purge message replayed on `authority-grants` is refused and deletes nothing; a
revoked approver's pending purge is refused when the record becomes ready (retry-waiting-grants re-verifies it);
the pre-cancel capture's wait on a node's final sync manifest refuses the paths it names outside the node's
directory, and the capture still happens."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from authority_support import World, files_under, make_world, pre_cancel_event

from rlcleanup.authority.approvers import revoke_approver
from rlcleanup.authority.grants import Approver, new_key, public_b64, register_approver
from rlcleanup.authority.ledger import grants_collection

QUARANTINE = "/_rlcleanup-quarantine/"


def _held(w: World) -> list[Path]:
    return [p for p in files_under(w.tmp / "runs") if QUARANTINE in str(p)]


def _published_and_reclaimed(tmp_path: Path) -> World:
    w = make_world(tmp_path)
    w.deliver(w.message(w.grant("publish")))
    reclaim = w.grant("reclaim")
    w.deliver(w.message(reclaim))
    assert w.action(reclaim.grant_id)["state"] == "reclaimed", w.action(reclaim.grant_id)
    assert _held(w)
    return w


def test_a_revoked_approvers_pending_purge_and_a_replayed_purge_are_refused(tmp_path: Path) -> None:
    """One reclaimed run (a world is costly): first a pending purge whose approver is revoked before the record is
    ready, then another approver's purge, used, and its message delivered again."""
    w = _published_and_reclaimed(tmp_path)
    held = _held(w)
    records = w.stack.ports.records
    bob = new_key()
    register_approver(
        records, Approver(approver_id="bob", public_key=public_b64(bob), allowed_prefixes=[str(w.dest_root)])
    )

    # A revoked approver's pending purge is refused when the record becomes ready (retry-waiting-grants).
    records.update(w.run_id, {"status": "in_progress"})  # the record is being re-derived: grants wait
    pending = w.grant("purge")
    w.deliver(w.message(pending))
    assert w.grant_doc(pending.grant_id)["state"] == "pending"
    revoke_approver(records, "alice", by="security", reason="key leaked", now=datetime.now(UTC))
    records.update(w.run_id, {"status": "awaiting_authority"})
    w.stack.bus.publish("record-ready", json.dumps({"run_id": w.run_id}).encode(), {"run_id": w.run_id})
    w.stack.bus.drain()
    doc = w.grant_doc(pending.grant_id)
    assert (doc["state"], doc["refusal"]) == ("refused", "approver_revoked")
    assert _held(w) == held  # the quarantine is intact

    # A signed purge, used, then delivered again on authority-grants: refused as a replay, applied once.
    purge = w.grant("purge", granted_by="bob")
    message = w.message(purge, key=bob)
    w.deliver(message)
    purged = w.action(purge.grant_id)
    assert purged["state"] == "purged" and not _held(w), purged
    w.deliver(message)
    assert w.action(purge.grant_id) == purged  # its outcome is still the first one
    doc = w.grant_doc(purge.grant_id)
    assert (doc["state"], doc.get("replays")) == ("used", 1)
    purges = [a for a in w.record.authority_actions if a.grant_id == purge.grant_id]
    assert [(a.state, a.refusal) for a in purges] == [("purged", None), ("refused", "replayed")]  # shown, not applied
    # Its document gone (a store rebuilt), the ended-grant ledger still refuses it.
    with sqlite3.connect(tmp_path / "records.db") as db:
        db.execute(
            "DELETE FROM docs WHERE collection = ? AND doc_id = ?", (grants_collection(w.run_id), purge.grant_id)
        )
    w.deliver(message)
    doc = w.grant_doc(purge.grant_id)
    assert (doc["state"], doc["refusal"]) == ("refused", "replayed")


def test_a_final_sync_manifest_naming_paths_outside_the_run_is_refused_and_the_capture_happens(
    tmp_path: Path,
) -> None:
    w = make_world(tmp_path, "rendezvous-rank-cause", run=False)  # a live run
    manifest = next((tmp_path / "runs").rglob("sync-manifest.json"))
    doc = json.loads(manifest.read_text())
    outside = ["../../../../../../etc/passwd", "/etc/shadow", "../other-node/stacks/x.log"]
    doc["reason"] = "signal 15 (head)"  # final
    doc["copied"] += [{"path": p, "bytes": 10} for p in outside]
    doc["skipped"] += [{"path": "../../secrets.env", "bytes": 1, "reason": "budget"}]
    manifest.write_text(json.dumps(doc))
    ports = w.stack.ports
    ports.settings = ports.settings.model_copy(update={"precancel_sync_wait_seconds": 0.0})
    event = pre_cancel_event(w.run_uri, "j1")
    w.stack.emit(event)
    pre = w.record.pre_cancel
    assert pre is not None and pre.final_sync is True and pre.copied_objects > 0  # captured all the same
    assert not [n for n in pre.not_synced if "etc/" in n or "secrets.env" in n or "other-node" in n], pre.not_synced
    refused = [p for p in pre.problems if "outside its node directory, refused" in p]
    assert len(refused) == 1 and "/etc/shadow" in refused[0] and "secrets.env" in refused[0], pre.problems
    assert "flight_recorder/nccl_fr_rank_1: missing" in " ".join(pre.not_synced)  # the real gaps still listed
