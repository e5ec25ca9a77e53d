"""Publish / hand-off / reclaim with an `s3://` source (the stack's SeaweedFS): the export streams out of S3 into
the destination with per-object verification, and reclaim deletes S3 sources only under the rules it applies to
every backend (a verified destination, the plan recorded first, nothing outside the plan, evidence kept)."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # the authority tests' World
from authority_support import World

from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.authority.grants import Approver, new_key, public_b64, register_approver
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.handlers import resolve_run_id
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.samples.upload import upload_sample_run_to

pytestmark = pytest.mark.integration


def _s3_world(tmp: Path, bucket: str) -> World:
    write_sample_run(tmp / "sample", "selection-policy")
    run_uri = upload_sample_run_to(S3Storage(), tmp / "sample", f"s3://{bucket}/iris/job")
    stack = EmbeddedStack.create(tmp / "records.db", str(tmp / "preserved"))
    dest_root = tmp / "dest"
    dest_root.mkdir(mode=0o700)
    os.chmod(dest_root, 0o700)
    key = new_key()
    register_approver(
        stack.ports.records,
        Approver(approver_id="alice", public_key=public_b64(key), allowed_prefixes=[str(dest_root)]),
    )
    event = manual_event(run_uri)
    stack.emit(event)
    return World(stack, run_uri, resolve_run_id(stack.ports, event), key, dest_root, tmp)


def test_publish_from_s3_then_reclaim_the_s3_source(s3_admin, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    bucket = f"s3-auth-{uid}"
    s3_admin.create_bucket(Bucket=bucket)
    w = _s3_world(tmp_path, bucket)
    cand = w.candidate()
    assert cand.valid and cand.uri.startswith(f"s3://{bucket}/"), cand

    grant = w.grant()
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["state"] == "published", action
    dest = Path(grant.destination or "")
    storage = S3Storage()
    sources = {o.uri.rsplit("/", 1)[-1]: o for o in storage.list(cand.uri)}
    for name, src in sources.items():  # every exported object arrived whole: size and MD5 = the S3 ETag
        data = (dest / name).read_bytes()
        assert len(data) == src.size and base64.b64encode(hashlib.md5(data).digest()).decode() == src.md5, name
    assert (dest / "_PUBLISHED.json").exists()

    before = {o.uri for o in storage.list(w.run_uri.rsplit("/durable/", 1)[0])}
    reclaim = w.grant("reclaim")
    w.deliver(w.message(reclaim))
    raction = w.action(reclaim.grant_id)
    assert raction["state"] == "reclaimed", raction
    plan = w.stack.ports.records.get_doc(f"runs/{w.run_id}/reclaim_plans", reclaim.grant_id)  # the record store
    assert plan is not None and raction["uri"] == f"runs/{w.run_id}/reclaim_plans/{reclaim.grant_id}"
    planned = {d["uri"] for d in plan["delete"]}
    assert planned == {o.uri for o in sources.values()}  # the granted artifact's S3 source copy, nothing else
    after = {o.uri for o in storage.list(w.run_uri.rsplit("/durable/", 1)[0])}
    assert after == before - planned
    assert all(storage.stat(u) is None for u in planned)
    assert (dest / "_PUBLISHED.json").exists() and list(Path(w.record.preserved_locations[0]).rglob("*.log"))


def test_every_preview_renders_on_an_s3_run(s3_admin, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 38 item 3 on S3: publish, hand-off, register, cancel (refused: the run ended, as its grant is), then
    (after the publish) reclaim, text and JSON."""
    from authority_support import rendered_preview

    from rlcleanup.authority.preview import preview_grant

    bucket = f"s3-prev-{uid}"
    s3_admin.create_bucket(Bucket=bucket)
    w = _s3_world(tmp_path, bucket)
    ports = w.stack.ports
    for action in ("publish", "handoff", "register"):
        rendered_preview(ports.storage, ports.records, w.record, w.grant(action))
    # A cancel of a run whose end was observed is refused in the preview exactly as the grant would (issue 47)
    cancel = preview_grant(ports.storage, w.record, w.grant("cancel"), datetime.now(UTC), ports.records)
    assert cancel["would"] == "refuse" and cancel["refusal"] == "run_ended", cancel
    assert not (w.dest_root / "model").exists()
    publish = w.grant()
    w.deliver(w.message(publish))
    assert w.action(publish.grant_id)["state"] == "published"
    preview = rendered_preview(ports.storage, ports.records, w.record, w.grant("reclaim"))
    assert preview["delete"] and all(d["uri"].startswith(f"s3://{bucket}/") for d in preview["delete"])
