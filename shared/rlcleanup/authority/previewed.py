"""What the approver saw: `grant --dry-run` remembers the artifact it previewed, and the same `grant` command
without `--dry-run` refuses to sign when that artifact moved since (issue 37 item 7).

A record can be derived again between a preview and the grant (a resubmitted step ends another pass and
validates a new export, its logs are preserved): a grant that looked its digest up in the record afterwards
would sign, and publish, files the approver never saw. So a preview is filed under the run, the action, the
step as asked (`selected` when omitted), the destination and the approver; the grant command compares the step,
the digest and the preserved logs it would publish now with that preview, and refuses with what changed. With
`--digest` the grant carries the previewed digest itself, and apply-grant refuses it as `wrong_digest` when the
candidate no longer has it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from rlcleanup.authority.publish import preserved_log_names
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.collections import PREVIEWS, Documents
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import Storage
from rlcleanup.uris import relative_to


def preview_key(action: str, step: int | None, destination: str | None, approver: str) -> str:
    """One preview per (action, step as asked, destination, approver): the command the approver will run next."""
    asked = {"action": action, "step": "selected" if step is None else step, "destination": destination or ""}
    body = json.dumps({**asked, "approver": approver}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


class SeenArtifact(BaseModel):
    """What an approver saw of the artifact a grant would act on."""

    model_config = ConfigDict(extra="forbid")
    step: int | None
    digest: str | None
    export_files: list[str]
    logs: list[str]


class Preview(SeenArtifact):
    """runs/{run_id}/previews/{key}: the artifact as the approver's preview of one command showed it."""

    previewed_at: str


def _previews(records: RunRecords, run_id: str) -> Documents[Preview]:
    return PREVIEWS.bind(records, run_id, Preview)


def seen_artifact(storage: Storage, record: CompletionRecord, step: int | None, digest: str | None) -> SeenArtifact:
    """The artifact a grant for `step` would act on now: its step, digest, export files and preserved logs."""
    candidate = next((c for c in record.candidates if c.step == step), None)
    export_files: list[str] = []
    if candidate is not None:
        export_files = sorted(relative_to(o.uri, candidate.uri) for o in storage.list(candidate.uri))
    logs = preserved_log_names(storage, record)
    return SeenArtifact(step=step, digest=digest, export_files=export_files, logs=logs)


def remember_preview(records: RunRecords, run_id: str, key: str, artifact: SeenArtifact, now: datetime) -> None:
    _previews(records, run_id).put(key, Preview(**artifact.model_dump(), previewed_at=now.isoformat()))


def moved_since_preview(records: RunRecords, run_id: str, key: str, seen_now: Callable[[], SeenArtifact]) -> str | None:
    """What changed since the approver's preview (None: nothing, or no preview of this command was made; then
    nothing is read: `seen_now` lists the export only when there is a preview to compare with)."""
    seen = _previews(records, run_id).get(key)
    if seen is None:
        return None
    now_seen = seen_now()
    changes = []
    if seen.step != now_seen.step:
        changes.append(f"step {seen.step} -> {now_seen.step}")
    if seen.digest != now_seen.digest:
        changes.append(f"digest {str(seen.digest)[:16]}... -> {str(now_seen.digest)[:16]}...")
    for before_files, after_files, what in (
        (seen.export_files, now_seen.export_files, "export file"),
        (seen.logs, now_seen.logs, "log"),
    ):
        before, after = set(before_files), set(after_files)
        if after - before:
            changes.append(f"{what}s added: {sorted(after - before)[:10]}")
        if before - after:
            changes.append(f"{what}s removed: {sorted(before - after)[:10]}")
    if not changes:
        return None
    return f"the artifact changed since your preview at {seen.previewed_at}: " + "; ".join(changes)
