"""Preserve grants: copy a step's checkpoint server-side to durable storage before its lifecycle rule deletes it
(docs/authority.md §9, issue 49 item 1's alternative to an export that cannot finish in time).

A `preserve` grant names a step whose checkpoint the record knows (the directory its `hf_export_request.json` sits
in) and pins a manifest digest: sha256 over every object's name, size, CRC32C and version under the checkpoint as
listed when the grant was signed (`formats/checkpoints/base.export_digest`, the function every other grant's
digest uses). Carrying it out (`plan_preserve`, which the preview runs too, then `preserve`):

1. the destination: not under the run's own roots, the checkpoint or rlcleanup's evidence store (`not_allowed`:
   never a place the run writes or reclaims), not on temp storage (`destination_expires`: a `tmp/ttl=<N>d/`
   prefix, the lifecycle rule every expiry in rlcleanup reads, steps/expiry.py), and no wider than granted (its
   visibility read back through the backend, as a hand-off's is);
2. the checkpoint listed again and its digest compared with the grant's (`wrong_digest`: a byte, a name or a
   version changed since the approver signed; nothing is copied);
3. each object copied pinned to the listed version (authority/pinning.py: a GCS rewrite with
   `if_source_generation_match`, an S3 copy with `CopySourceIfMatch`, else streamed with every byte hashed) and
   verified (size, CRC32C/MD5 of the copy against the source's); write-once, so a redelivery finds identical
   copies and a foreign file at the destination is `destination_conflict` (another's marker there is refused
   before a byte moves, in the preview too);
4. `_PRESERVED.json` written last (the digest, step, grant and every object's proof). Any refusal after the first
   copy removes what this attempt created: a refusal leaves nothing behind.

An export grant of the step then reads the preserved copy (authority/export.py): its checkpoint for the converter,
its expiry (none) for the preflight.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcleanup.authority.artifact import listing
from rlcleanup.authority.grants import Grant, Refusal, real_location
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.pinning import CopyProof, pinned_copy
from rlcleanup.authority.publish import create_private_dirs, missing_local_dirs, visibility_fix
from rlcleanup.authority.visibility import read_visibility
from rlcleanup.formats.checkpoints.base import export_digest
from rlcleanup.models.export_jobs import CheckpointCopy, PreservedCheckpoint
from rlcleanup.models.record import AuthorityAction, CompletionRecord
from rlcleanup.ports.hub import is_hub
from rlcleanup.ports.storage import ObjectInfo, SourceChangedError, Storage, WriteOutcome
from rlcleanup.steps.expiry import ttl_days
from rlcleanup.uris import join, parent, within

MARKER = "_PRESERVED.json"
PRESERVED = "preserved"  # the outcome's state


def checkpoint_of(record: CompletionRecord, step: int | None) -> str | None:
    """The checkpoint directory of `step` as the record knows it: where its export request sits."""
    candidate = next((c for c in record.candidates if c.step == step), None)
    if candidate is None or candidate.export_request is None:
        return None
    return parent(candidate.export_request.uri)


def manifest_digest(objects: dict[str, ObjectInfo]) -> str:
    """What a preserve grant pins: every object under the checkpoint, by name, size, CRC32C and version."""
    return export_digest(objects.items())


def preserved_copy(actions: list[AuthorityAction], step: int) -> PreservedCheckpoint | None:
    """The latest verified durable copy of `step`'s checkpoint a used preserve grant made, or None."""
    copies = [
        a.preserved for a in actions if a.preserved is not None and a.refusal is None and a.preserved.step == step
    ]
    return copies[-1] if copies else None


def _run_places(record: CompletionRecord, checkpoint: str) -> tuple[str, ...]:
    """Where a preserve may never copy to: the run's roots (the run writes and a reclaim deletes there), the
    checkpoint itself and rlcleanup's evidence store."""
    named = (record.run_uri, record.temp_root, checkpoint, *record.preserved_locations)
    return tuple(real_location(p.rstrip("/")) for p in named if p)


def destination_refusal(storage: Storage, record: CompletionRecord, grant: Grant, checkpoint: str) -> Outcome | None:
    """Why the grant's destination cannot hold a durable copy of this checkpoint, or None."""
    dest = (grant.destination or "").rstrip("/")
    if not dest:
        return refuse(Refusal.not_allowed, "a preserve grant needs a destination (--to URI)", grant.destination)
    if is_hub(dest):
        why = f"{dest} is a model hub: a checkpoint is preserved to storage (gs://, s3://, a local directory)"
        return refuse(Refusal.not_allowed, why, dest)
    real = real_location(dest)
    places = _run_places(record, checkpoint)
    if within(real, places) or any(within(p, (real,)) for p in places):
        why = f"{dest} is under (or holds) the run's own places {list(places)}: a durable copy lives outside them"
        return refuse(Refusal.not_allowed, why, dest)
    days = ttl_days(real)
    if days is not None:
        why = (
            f"{dest} lies on temp storage (tmp/ttl={days}d/): its lifecycle rule deletes every object {days} days "
            "after it is written; preserve to durable storage (a prefix no lifecycle rule expires)"
        )
        return refuse(Refusal.destination_expires, why, dest)
    return None


def _visibility_refusal(storage: Storage, grant: Grant, dest: str, creates: bool) -> tuple[str, Outcome | None]:
    """The destination's visibility as read back (a hand-off's rule: never wider than granted), or the refusal."""
    if creates:
        return "private (will be created with mode 0700)", None
    seen = read_visibility(storage, dest)
    if seen.visibility is None:
        fix = visibility_fix(storage, dest, seen.evidence)
        return "", refuse(Refusal.visibility_unknown, f"{seen.evidence}; fix: {fix}", dest)
    if seen.visibility.rank > grant.visibility.rank:
        why = (
            f"destination is {seen.visibility.value}, granted {grant.visibility.value}: {seen.evidence}; "
            f"fix: {visibility_fix(storage, dest, seen.evidence)}"
        )
        return "", refuse(Refusal.visibility_broader, why, dest)
    return f"{seen.visibility.value} ({seen.evidence})", None


@dataclass(frozen=True)
class PreservePlan:
    """Exactly what a preserve grant copies, and where: the preview shows it, `preserve` carries it out."""

    step: int
    checkpoint: str
    destination: str
    objects: dict[str, ObjectInfo]  # by name under the checkpoint: the very listing whose digest matched
    digest: str
    visibility: str
    creates: list[str]  # local directories created (0700) for the destination

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects.values())

    def preview(self) -> dict[str, Any]:
        rows = [
            {"name": n, "source": o.uri, "size": o.size, "crc32c": o.crc32c, "md5": o.md5}
            for n, o in sorted(self.objects.items())
        ]
        return {
            "step": self.step,
            "digest": self.digest,
            "checkpoint": self.checkpoint,
            "destination": self.destination,
            "visibility": self.visibility,
            "creates": self.creates,
            "destination_expires": None,
            "objects": rows,
            "object_count": len(rows),
            "total_bytes": self.total_bytes,
        }


def plan_preserve(
    storage: Storage, record: CompletionRecord, grant: Grant, *, apply: bool = False
) -> PreservePlan | Outcome:
    """Every check the grant runs before a byte moves (module docstring), in order. `apply` creates a missing local
    destination (0700); a preview only says it would."""
    checkpoint = checkpoint_of(record, grant.step)
    if checkpoint is None or grant.step is None:
        why = f"run {record.run_id} has no checkpoint the record knows at step {grant.step} (an export request's)"
        return refuse(Refusal.no_candidate, why, grant.destination)
    refused = destination_refusal(storage, record, grant, checkpoint)
    if refused is not None:
        return refused
    dest = (grant.destination or "").rstrip("/")
    objects = listing(storage, checkpoint)
    if not objects:
        return refuse(Refusal.no_candidate, f"the checkpoint {checkpoint} lists nothing (expired?)", dest)
    now = manifest_digest(objects)
    if now != grant.digest:
        why = (
            f"the checkpoint {checkpoint} is not what the grant pinned: its manifest digest is {now} now, the grant "
            f"signed {grant.digest} (an object was added, removed or rewritten since)"
        )
        return refuse(Refusal.wrong_digest, why, dest)
    marker = _read_marker(storage, join(dest, MARKER))
    if marker is not None and (marker.get("grant_id"), marker.get("manifest_digest")) != (grant.grant_id, now):
        return refuse(Refusal.destination_conflict, f"{join(dest, MARKER)} already marks another preserve", dest)
    missing = missing_local_dirs(dest)
    if missing and apply:
        create_private_dirs(missing)
    visibility, refused = _visibility_refusal(storage, grant, dest, creates=bool(missing) and not apply)
    if refused is not None:
        return refused
    return PreservePlan(grant.step, checkpoint, dest, objects, now, visibility, [str(d) for d in missing])


def _clean(storage: Storage, created: list[str], plan: PreservePlan) -> None:
    """Remove what this attempt created at the destination (files first, then its own empty directories)."""
    for uri in created:
        storage.delete(uri)
    for directory in reversed(plan.creates):
        with contextlib.suppress(OSError):
            Path(directory).rmdir()


def _marker_doc(record: CompletionRecord, grant: Grant, plan: PreservePlan, proofs: dict[str, CopyProof]) -> bytes:
    doc = {
        "run_id": record.run_id,
        "grant_id": grant.grant_id,
        "step": plan.step,
        "source": plan.checkpoint,
        "manifest_digest": plan.digest,
        "objects": [{"name": n, **p.model_dump(mode="json", exclude={"outcome"})} for n, p in sorted(proofs.items())],
    }
    return json.dumps(doc, sort_keys=True, indent=1).encode()


def preserve(storage: Storage, record: CompletionRecord, grant: Grant) -> Outcome:
    """Carry the grant out: plan, copy each pinned object, verify it, write the marker last. Never raises for a
    refusal; a refusal after the first copy removes what this attempt created."""
    plan = plan_preserve(storage, record, grant, apply=True)
    if isinstance(plan, Outcome):
        return plan
    marker = join(plan.destination, MARKER)
    existing = _read_marker(storage, marker)  # plan_preserve refused another's: this is ours (a redelivery) or none
    created: list[str] = []
    proofs: dict[str, CopyProof] = {}
    try:
        for name, info in sorted(plan.objects.items()):
            proof = pinned_copy(storage, info, join(plan.destination, name), grant_id=grant.grant_id)
            if proof.outcome == "conflict":
                _clean(storage, created, plan)
                why = f"{proof.destination} holds other bytes (never overwritten) or its copy did not verify"
                return refuse(Refusal.destination_conflict, why, plan.destination)
            if proof.outcome == WriteOutcome.created.value:
                created.append(proof.destination)
            proofs[name] = proof
    except SourceChangedError as exc:
        _clean(storage, created, plan)
        return refuse(Refusal.source_changed, f"the checkpoint changed while it was copied: {exc}", plan.destination)
    except Exception:  # anything else (a defect, an outage): nothing this attempt copied stays; a retry starts over
        with contextlib.suppress(Exception):
            _clean(storage, created, plan)
        raise
    if existing is None:
        written = storage.write_if_absent(marker, _marker_doc(record, grant, plan, proofs), "application/json")
        if written is WriteOutcome.conflict:  # another preserve finished meanwhile
            _clean(storage, created, plan)
            return refuse(Refusal.destination_conflict, f"{marker} already marks another preserve", plan.destination)
    copy = PreservedCheckpoint(
        step=plan.step,
        source=plan.checkpoint,
        destination=plan.destination,
        manifest_digest=plan.digest,
        object_count=len(proofs),
        total_bytes=plan.total_bytes,
        objects=[_recorded_copy(n, p) for n, p in sorted(proofs.items())],
        marker=marker,
    )
    said = "already preserved" if existing is not None else "preserved"
    detail = (
        f"{said} {len(proofs)} object(s), {plan.total_bytes} bytes of {plan.checkpoint} at {plan.destination}, each "
        f"copy verified (size, checksums); visibility {plan.visibility}; no lifecycle rule expires it"
    )
    return Outcome(
        state=PRESERVED,
        destination=plan.destination,
        verified_objects=len(proofs),
        uri=marker,
        detail=(f"created {', '.join(plan.creates)} (mode 0700); " if plan.creates else "") + detail,
        preserved=copy.model_dump(mode="json"),
    )


def _recorded_copy(name: str, proof: CopyProof) -> CheckpointCopy:
    """One object's verified copy as the record keeps it: the proof's fields of the same names (size, checksums,
    the source version pinned), under the object's name in the checkpoint."""
    return CheckpointCopy(name=name, **proof.model_dump(include=set(CheckpointCopy.model_fields)))


def _read_marker(storage: Storage, uri: str) -> dict[str, Any] | None:
    """The destination's marker (None: there is none). One that is not ours to read (not JSON, too large, not an
    object) reads as an empty marker: another's, a conflict, never an error that uses the grant up."""
    try:
        value = json.loads(storage.read_bytes(uri, 16 * 1024 * 1024))
    except FileNotFoundError:
        return None
    except ValueError:  # not JSON (JSONDecodeError), or larger than any marker we write (ObjectTooLarge)
        return {}
    return value if isinstance(value, dict) else {}


class PreserveTargetError(ValueError):
    """Why `grant --action preserve` signs nothing; `exit_code` as the CLI's other refusals."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def preserve_target(
    storage: Storage, record: CompletionRecord, step: int | None, digest: str | None
) -> tuple[int, str]:
    """(step, the checkpoint's manifest digest now) for a new preserve grant: the grant pins the listing as the
    approver signs it, so an object changed afterwards is refused `wrong_digest` when the grant is carried out."""
    if step is None:
        known = [c.step for c in record.candidates if c.export_request is not None]
        raise PreserveTargetError(f"a preserve grant needs --step N (checkpoints with an export request: {known})", 2)
    checkpoint = checkpoint_of(record, step)
    if checkpoint is None:
        raise PreserveTargetError(f"run {record.run_id!r} has no checkpoint the record knows at step {step}", 1)
    objects = listing(storage, checkpoint)
    if not objects:
        raise PreserveTargetError(f"the checkpoint {checkpoint} lists nothing", 1)
    found = manifest_digest(objects)
    if digest is not None and digest != found:
        raise PreserveTargetError(f"{checkpoint} has manifest digest {found} now, not --digest {digest}", 3)
    return step, found
