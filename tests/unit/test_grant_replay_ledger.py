"""Replay after `forget` (issue 37 item 12): a grant that ended (used, refused, expired) is remembered by id in a
ledger outside the run's documents, so re-sending its signed message after the record was forgotten (or a
`--rerun` reset it) and the run re-processed is refused as `replayed` and acts on nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

from authority_support import World, files_under, make_world

from rlcleanup.authority.ledger import ENDED_GRANTS
from rlcleanup.cli.maintenance import forget, reset_for_rerun
from rlcleanup.runtime.backends import OpenStore, StoreBackend
from rlcleanup.runtime.embedded import manual_event


def _opened(w: World) -> OpenStore:
    ports = w.stack.ports
    return OpenStore(ports.records, ports.claims, "test", StoreBackend.sqlite, w.tmp / "records.db")


def _reprocess(w: World) -> None:
    w.stack.emit(manual_event(w.run_uri))
    assert w.record.status.value == "awaiting_authority"


def test_a_used_publish_grant_re_sent_after_forget_publishes_nothing(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    message = w.message(grant)
    w.deliver(message)
    assert w.grant_doc(grant.grant_id)["state"] == "used"
    dest = Path(grant.destination or "")
    shutil.rmtree(dest)  # so a second publish would be visible

    forget(_opened(w), w.run_id)
    assert w.stack.ports.records.get(w.run_id) is None
    assert w.stack.ports.records.get_doc(ENDED_GRANTS, grant.grant_id) is not None  # the ledger outlives it
    _reprocess(w)
    w.deliver(message)
    doc = w.grant_doc(grant.grant_id)
    assert doc["state"] == "refused" and doc["refusal"] == "replayed", doc
    assert files_under(dest) == []
    assert [a["refusal"] for a in w.record.model_dump()["authority_actions"]] == ["replayed"]


def test_a_refused_grant_re_sent_after_forget_stays_refused(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant(digest="0" * 64)  # refused at apply: wrong_digest
    message = w.message(grant)
    w.deliver(message)
    assert w.grant_doc(grant.grant_id)["refusal"] == "wrong_digest"
    forget(_opened(w), w.run_id)
    _reprocess(w)
    w.deliver(message)
    assert w.grant_doc(grant.grant_id)["refusal"] == "replayed"


def test_a_used_grant_re_sent_after_a_rerun_reset_publishes_nothing(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    message = w.message(grant)
    w.deliver(message)
    dest = Path(grant.destination or "")
    shutil.rmtree(dest)
    reset_for_rerun(_opened(w), w.run_id)
    _reprocess(w)
    w.deliver(message)
    assert files_under(dest) == []


def test_a_fresh_grant_after_forget_is_still_applied(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    first = w.grant()
    w.deliver(w.message(first))
    forget(_opened(w), w.run_id)
    _reprocess(w)
    second = w.grant(destination=str(w.dest_root / "again"))
    w.deliver(w.message(second))
    assert w.grant_doc(second.grant_id)["state"] == "used"
    assert (w.dest_root / "again" / "_PUBLISHED.json").exists()
