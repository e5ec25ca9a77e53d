"""Grants that must be refused, one test each: nothing copied, nothing deleted, the reason recorded."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from authority_support import World, files_under, make_world

from rlcleanup.authority.grants import new_key, sign


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _sources(w: World) -> list[tuple[str, int]]:
    return [(str(p), p.stat().st_size) for p in files_under(w.tmp / "runs")]


def _refused(w: World, data: bytes, grant_id: str, reason: str, run_id: str | None = None, **attrs: str) -> None:
    before = _sources(w)
    w.deliver(data, **attrs)
    assert files_under(w.dest_root) == [], "nothing may be copied"
    assert _sources(w) == before, "nothing may be deleted"
    docs = w.stack.ports.records.list_docs(f"runs/{run_id or w.run_id}/grants")
    refused = [d for _, d in docs if d["refusal"] == reason]
    assert refused, f"no grant refused as {reason}: {docs}"
    assert refused[0]["state"] in {"refused", "expired"}
    assert any(a.refusal == reason for a in w.record.authority_actions)


def test_forged_signature_is_refused(world: World) -> None:
    grant = world.grant()
    forged = world.message(grant, key=new_key())  # signed by mallory, claims alice
    _refused(world, forged, grant.grant_id, "bad_signature")


def test_tampered_grant_is_refused(world: World) -> None:
    grant = world.grant()
    msg = sign(grant, world.key)
    msg["grant"]["visibility"] = "public"  # changed after signing
    _refused(world, json.dumps(msg).encode(), grant.grant_id, "bad_signature")
    # A forged message is never filed under the real grant's id (it cannot overwrite a real grant).
    assert world.stack.ports.records.get_doc(f"runs/{world.run_id}/grants", grant.grant_id) is None


def test_unsigned_grant_is_refused(world: World) -> None:
    grant = world.grant()
    data = json.dumps({"grant": grant.model_dump(mode="json")}).encode()
    _refused(world, data, grant.grant_id, "unsigned")


def test_unknown_approver_is_refused(world: World) -> None:
    grant = world.grant(granted_by="mallory")
    _refused(world, world.message(grant), grant.grant_id, "unknown_approver")


def test_expired_grant_is_refused(world: World) -> None:
    past = datetime.now(UTC) - timedelta(days=2)
    grant = world.grant(granted_at=past, expires_at=past + timedelta(hours=24))
    _refused(world, world.message(grant), grant.grant_id, "expired")
    assert world.grant_doc(grant.grant_id)["state"] == "expired"


def test_replayed_grant_is_refused(world: World) -> None:
    grant = world.grant()
    world.deliver(world.message(grant))
    assert world.grant_doc(grant.grant_id)["state"] == "used"
    published = {p: p.stat().st_mtime_ns for p in files_under(world.dest_root)}
    sources = _sources(world)
    world.deliver(world.message(grant))  # the same signed grant, sent again later
    assert {p: p.stat().st_mtime_ns for p in files_under(world.dest_root)} == published
    assert _sources(world) == sources
    assert world.grant_doc(grant.grant_id)["state"] == "used"
    states = [(a.state, a.refusal) for a in world.record.authority_actions if a.grant_id == grant.grant_id]
    assert states == [("published", None), ("refused", "replayed")]


def test_publish_grant_used_for_reclaim_is_refused(world: World) -> None:
    grant = world.grant("publish")
    _refused(world, world.message(grant, intent="reclaim"), grant.grant_id, "wrong_action")
    # The intent is not signed: a misdirected copy must not burn the grant for its legitimate delivery.
    world.deliver(world.message(grant))
    assert world.grant_doc(grant.grant_id)["state"] == "used"


def test_grant_for_another_run_is_refused(world: World) -> None:
    grant = world.grant(run_id="some-other-run")
    _refused(world, world.message(grant, run_id=world.run_id), grant.grant_id, "wrong_run", run_id=world.run_id)


def test_wrong_digest_is_refused(world: World) -> None:
    grant = world.grant(digest="a" * 64)
    _refused(world, world.message(grant), grant.grant_id, "wrong_digest")


def test_destination_outside_allowed_prefixes_is_refused(world: World) -> None:
    elsewhere = world.tmp / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    grant = world.grant(destination=str(elsewhere / "model"))
    _refused(world, world.message(grant), grant.grant_id, "out_of_prefix")
    assert files_under(elsewhere) == []
    # A sibling that merely shares the string prefix is outside too.
    sibling = world.grant(destination=str(world.dest_root) + "-evil/model")
    world.deliver(world.message(sibling))
    assert world.grant_doc(sibling.grant_id)["refusal"] == "out_of_prefix"
