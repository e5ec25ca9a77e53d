"""Shared setup for the authority tests: a finished sample run on the embedded stack, an approver, signed grants."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rlcleanup.authority.grants import Approver, Grant, new_key, public_b64, register_approver, sign
from rlcleanup.models.events import JobEvent
from rlcleanup.models.record import Candidate, CompletionRecord
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import write_sample_run


@dataclass
class World:
    stack: EmbeddedStack
    run_uri: str
    run_id: str
    key: Ed25519PrivateKey
    dest_root: Path  # inside alice's allowed prefix, owner-only (private)
    tmp: Path

    @property
    def record(self) -> CompletionRecord:
        record = self.stack.ports.records.get(self.run_id)
        assert record is not None
        return record

    def candidate(self, step: int | None = None) -> Candidate:
        record = self.record
        wanted = step if step is not None else max(c.step for c in record.candidates if c.valid)
        return next(c for c in record.candidates if c.step == wanted)

    def grant(self, action: str = "publish", **overrides: Any) -> Grant:
        cand = self.candidate(overrides.pop("step", None))
        now = datetime.now(UTC)
        fields: dict[str, Any] = {
            "run_id": self.run_id,
            "action": action,
            "step": cand.step,
            "digest": cand.digest,
            "destination": str(self.dest_root / "model"),
            "visibility": "private",
            "granted_by": "alice",
            "granted_at": now,
            "expires_at": now + timedelta(hours=1),
            "reason": "test",
        }
        fields.update(overrides)
        return Grant.model_validate(fields)

    def message(self, grant: Grant, key: Ed25519PrivateKey | None = None, **envelope: Any) -> bytes:
        return json.dumps({**sign(grant, key or self.key), **envelope}).encode()

    def deliver(self, data: bytes, **attributes: str) -> None:
        self.stack.bus.publish("authority-grants", data, attributes)
        self.stack.bus.drain()

    def grant_doc(self, grant_id: str) -> dict[str, Any]:
        doc = self.stack.ports.records.get_doc(f"runs/{self.run_id}/grants", grant_id)
        assert doc is not None
        return doc

    def action(self, grant_id: str) -> dict[str, Any]:
        return next(a.model_dump() for a in self.record.authority_actions if a.grant_id == grant_id)


def pre_cancel_event(run_uri: str, job_id: str = "job-1") -> JobEvent:
    """An operator's request to capture a live run before it is cancelled (intent pre_cancel)."""
    return JobEvent(
        source="manual",
        job_id=job_id,
        run_uri=run_uri,
        state="RUNNING",
        observed_at=datetime.now(UTC),
        intent="pre_cancel",
    )


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


def make_world(tmp: Path, scenario: str = "selection-policy", *, run: bool = True) -> World:
    run_root = write_sample_run(tmp / "runs", scenario)
    preserve = tmp / "preserved"
    stack = EmbeddedStack.create(tmp / "records.db", str(preserve))
    dest_root = tmp / "dest"
    dest_root.mkdir(mode=0o700)
    os.chmod(dest_root, 0o700)
    key = new_key()
    register_approver(
        stack.ports.records,
        Approver(approver_id="alice", public_key=public_b64(key), allowed_prefixes=[str(dest_root)]),
    )
    event = manual_event(str(run_root))
    if run:
        stack.emit(event)
    from rlcleanup.runtime.handlers import resolve_run_id

    return World(stack, str(run_root), resolve_run_id(stack.ports, event), key, dest_root, tmp)


def rendered_preview(storage: Any, records: Any, record: CompletionRecord, grant: Grant) -> dict[str, Any]:
    """`grant --dry-run` as the CLI shows it, text and JSON (issue 38 item 3): the preview of `grant` computed by
    the code that applies it, JSON-serialisable, and its text naming every object with its size."""
    from rlcleanup.authority.preview import preview_grant
    from rlcleanup.cli.preview_text import render_preview

    preview = preview_grant(storage, record, grant, datetime.now(UTC), records)
    assert json.loads(json.dumps(preview)) == preview
    text = render_preview(preview)
    assert preview["would"] == grant.action.value, preview
    assert text.startswith(f"dry run: {grant.action.value}"), text
    for row in preview.get("objects") or preview.get("delete") or []:
        assert f"{row.get('name') or row['uri']}  {row['size']} B" in text, text
    assert "None" not in text, text
    return preview


def cancel_grant(w: World) -> Grant:
    """A cancel grant for the world's run, valid for an hour."""
    now = datetime.now(UTC)
    return Grant(
        run_id=w.run_id,
        action="cancel",
        granted_by="alice",
        granted_at=now,
        expires_at=now + timedelta(hours=1),
        reason="stuck",
    )


def cleared(w: World) -> list[dict[str, Any]]:
    """Every cancel-cleared message published so far."""
    return [json.loads(m.data) for m in w.stack.bus.published if m.topic == "cancel-cleared"]


def published_then_reclaimed(w: World) -> dict[str, bytes]:
    """Publish step 40, then reclaim it: returns the export's bytes by path as they were (now in quarantine)."""
    w.deliver(w.message(w.grant("publish")))
    export = {str(p): p.read_bytes() for p in files_under(Path(w.candidate(40).uri))}
    reclaim = w.grant("reclaim")
    w.deliver(w.message(reclaim))
    assert w.action(reclaim.grant_id)["state"] == "reclaimed"
    assert not any(Path(p).exists() for p in export)
    return export
