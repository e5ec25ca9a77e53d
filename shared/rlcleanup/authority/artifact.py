"""Which artifact a grant covers, checked against the record and against the bytes as they are now."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from rlcleanup.authority.grants import Grant, Refusal
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.formats.checkpoints.base import UnknownFormatError, export_digest
from rlcleanup.models.record import Candidate, CompletionRecord
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.steps.validate import candidate_pins


def listing(storage: Storage, uri: str) -> dict[str, ObjectInfo]:
    """Objects under uri keyed by their name relative to it (the same naming the digest uses)."""
    root = uri.rstrip("/")
    return {o.uri[len(root) + 1 :]: o for o in storage.list(root)}


@dataclass(frozen=True)
class Pinned:
    """The grant's candidate and the objects (by name) of the very listing whose digest matched the grant.

    Resolved once per application of a grant (apply-grant, the upload job, a preview) and handed down: every
    later size check, copy or upload uses these versions, never a second listing (which would also read every
    shard's header again to re-digest it)."""

    candidate: Candidate
    objects: dict[str, ObjectInfo]

    @property
    def size(self) -> int:
        return sum(info.size for info in self.objects.values())


def pin(storage: Storage, record: CompletionRecord, grant: Grant) -> Pinned | Outcome:
    """The grant's artifact as it is now, or the refusal: unresolved selection, unknown/invalid candidate, digest
    mismatch (a grant pins exact bytes: an export edited since validation is refused here)."""
    candidate, objects, refused = resolve_pinned(storage, record, grant)
    if refused is not None:
        return refused
    assert candidate is not None
    return Pinned(candidate, objects)


def validated_version(info: ObjectInfo, restored: Mapping[str, str]) -> str | None:
    """The version an object counts as: the validated one it was restored from (quarantine.restored_versions),
    else its own."""
    return restored.get(f"{info.uri}\t{info.fingerprint}", info.fingerprint)


def resolve_pinned(
    storage: Storage, record: CompletionRecord, grant: Grant, restored: Mapping[str, str] | None = None
) -> tuple[Candidate | None, dict[str, ObjectInfo], Outcome | None]:
    """resolve(), plus the objects (by name) of the very listing whose digest matched the grant: the pinned
    versions every later copy or delete must use (never a second, later listing). `restored`: versions a
    byte-exact restore put back, read as the validated versions they replaced (the digest is compared on those)."""
    step = grant.step
    if step is None:
        if record.selection is None or record.selection.status != "selected" or record.selection.step is None:
            return None, {}, refuse(Refusal.selection_unresolved, "selection is unresolved and the grant names no step")
        step = record.selection.step
    candidate = next((c for c in record.candidates if c.step == step), None)
    if candidate is None:
        return None, {}, refuse(Refusal.no_candidate, f"run {record.run_id} has no export candidate at step {step}")
    if not candidate.valid:  # invalid, or no export yet: convertible (a requested export) or partial (unfinished)
        why = f"candidate {step} is {candidate.state.value}, not an export to grant: {'; '.join(candidate.problems)}"
        return None, {}, refuse(Refusal.candidate_invalid, why)
    if candidate.digest != grant.digest:
        why = f"grant digest {grant.digest} != candidate {step} {candidate.digest}"
        return None, {}, refuse(Refusal.wrong_digest, why)
    try:
        now, pinned = candidate_pins(storage, candidate)
    except UnknownFormatError as exc:  # a record from a build that knew a format this one does not
        return None, {}, refuse(Refusal.candidate_invalid, f"candidate {step} cannot be re-digested: {exc}")
    if now != grant.digest and restored:
        now = export_digest(
            (name, replace(info, fingerprint=validated_version(info, restored))) for name, info in pinned.items()
        )
    if now != grant.digest:
        return None, {}, refuse(Refusal.wrong_digest, f"the export at {candidate.uri} changed since it was validated")
    return candidate, pinned, None
