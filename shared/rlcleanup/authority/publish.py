"""Publish / hand-off: gates (artifact pinned by digest, visibility), then stage, scan the staged bytes, promote.

Destination layout: the export's files at the top, the preserved logs under `training_logs/`, `provenance.json`
beside them and `_PUBLISHED.json` written LAST, only after every object was promoted and verified. Everything is
first copied (pinned, authority/pinning.py) into a private staging area inside the run's preserved location,
`provenance.json` written there too, and the staged listing scanned: what is scanned is exactly what is promoted
(each staged object is pinned as scanned). A refusal removes the staging area and what the attempt promoted; an
interrupted publish leaves no marker and a redelivery runs every check again. Marker and provenance carry no
wall-clock time, so a replay is byte-identical.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rlcleanup.authority.artifact import Pinned
from rlcleanup.authority.grants import Action, Grant, Refusal, Visibility
from rlcleanup.authority.manifest_check import verify_staged_manifest
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.pinning import CopyProof, pinned_copy, sha256_of
from rlcleanup.authority.secrets import ScanReport, scan_objects
from rlcleanup.authority.staging import clean_prefix, staging_root
from rlcleanup.authority.visibility import read_visibility
from rlcleanup.models.record import Candidate, CompletionRecord, PreservedObject
from rlcleanup.ports.hub import is_hub
from rlcleanup.ports.storage import ObjectInfo, SourceChangedError, Storage, WriteOutcome, scheme_facts
from rlcleanup.steps.evidence_check import changed_in_listing, mismatch
from rlcleanup.steps.validate import reserved_names
from rlcleanup.uris import join, relative_to, strip_file_scheme

log = logging.getLogger(__name__)

PROVENANCE = "provenance.json"
MARKER = "_PUBLISHED.json"
MAX_FINDINGS_IN_RECORD = 10


@dataclass(frozen=True)
class Item:
    source: ObjectInfo
    name: str  # relative to the destination
    preserved: PreservedObject | None = None  # a preserved object: what the manifest says it must still be


def plan_items(storage: Storage, record: CompletionRecord, pinned: dict[str, ObjectInfo]) -> list[Item]:
    """The export's pinned objects (from the listing whose digest matched the grant) and the preserved logs."""
    items = [Item(info, name) for name, info in sorted(pinned.items())]
    for obj in _preserved_logs(storage, record):
        root = record.preserved_locations[0]
        name = f"training_logs/{relative_to(obj.destination, root)}"
        items.append(Item(storage.stat(obj.destination) or _info(obj), name, obj))
    return items


def name_clash(export_names: list[str], ours: list[str]) -> str | None:
    """Why a plan's destination names cannot be published, or None: an export file named like what a publish
    writes itself (steps/validate.reserved_names: a forged marker or provenance), or two files for one name
    (say the export's own README.md where a Hub hand-off writes the model card). Checked before any byte moves."""
    reserved = reserved_names(export_names)
    if reserved:
        return f"the export ships files a publish writes itself: {reserved[:10]}"
    names = [*export_names, *ours]
    counts = Counter(name.lower() for name in names)
    twice = sorted({name for name in names if counts[name.lower()] > 1})
    return f"two files would be published under one name: {twice[:10]}" if twice else None


def _info(obj: PreservedObject) -> ObjectInfo:
    return ObjectInfo(uri=obj.destination, size=obj.size, crc32c=obj.crc32c, md5=obj.md5)


def preserved_log_names(storage: Storage, record: CompletionRecord) -> list[str]:
    """The preserved logs' names at a destination (`training_logs/...`), as plan_items names them."""
    if not record.preserved_locations:
        return []
    root = record.preserved_locations[0]
    return sorted(f"training_logs/{relative_to(o.destination, root)}" for o in _preserved_logs(storage, record))


def _preserved_logs(storage: Storage, record: CompletionRecord) -> list[PreservedObject]:
    """The logs as preserved (the evidence copy), from the capture manifest."""
    if not record.manifest_uri or not record.preserved_locations:
        return []
    manifest = json.loads(storage.read_bytes(record.manifest_uri))
    objects = [PreservedObject.model_validate(o) for o in manifest.get("objects", [])]
    return [o for o in objects if o.kind == "log"]


def provenance(
    record: CompletionRecord, candidate: Candidate, grant: Grant, manifest: list[dict[str, Any]]
) -> dict[str, Any]:
    selection = record.selection
    chosen = selection is not None and selection.step == candidate.step
    return {
        "run_id": record.run_id,
        "action": grant.action.value,
        "grant_id": grant.grant_id,
        "granted_by": grant.granted_by,
        "step": candidate.step,
        "digest": candidate.digest,
        "source_uris": {"run": record.run_uri, "export": candidate.uri, "preserved": record.preserved_locations},
        "source_revision": record.source_revision,
        "base_model": record.base_model,
        "resolved_config_sha256": record.resolved_config.sha256 if record.resolved_config else None,
        "metric_window": selection.metric_window if chosen and selection else None,
        "selection": selection.status if selection else None,
        "chain_coverage": record.chain.coverage.model_dump(mode="json"),
        "parameter_count": candidate.parameter_count,
        "manifest": manifest,
    }


def _manifest(items: list[Item]) -> list[dict[str, Any]]:
    """What a preview shows: the pinned listing's own sizes, checksums and versions (no byte is read for it)."""
    return [
        {
            "name": i.name,
            "source": i.source.uri,
            "source_version": i.source.fingerprint,
            "size": i.source.size,
            "crc32c": i.source.crc32c,
            "md5": i.source.md5,
        }
        for i in items
    ]


@dataclass
class PublishPlan:
    """Exactly what a publish will copy, and where: `grant --dry-run` shows this, `publish` carries it out."""

    destination: str
    candidate: Candidate
    items: list[Item]
    manifest: list[dict[str, Any]]
    visibility: str
    visibility_evidence: str
    created: list[str]  # local directories created (0700) for the destination; "would create" in a preview
    scanned_objects: int

    def preview(self) -> dict[str, Any]:
        scan = f"clean ({self.scanned_objects} source objects scanned; the staged copy is scanned again)"
        return plan_preview(self, self.created, self.manifest, scan)


class _Plan(Protocol):
    destination: str
    candidate: Candidate
    visibility: str
    visibility_evidence: str


def plan_preview(plan: _Plan, creates: list[str], objects: list[dict[str, Any]], secret_scan: str) -> dict[str, Any]:
    """What `grant --dry-run` shows of a copy plan (a storage publish or a Hub hand-off): the same fields for
    both, built from the plan the grant would carry out."""
    return {
        "destination": plan.destination,
        "step": plan.candidate.step,
        "digest": plan.candidate.digest,
        "visibility": plan.visibility,
        "visibility_evidence": plan.visibility_evidence,
        "creates": creates,
        "objects": objects,
        "object_count": len(objects),
        "total_bytes": sum(row["size"] or 0 for row in objects),
        "secret_scan": secret_scan,
    }


def missing_local_dirs(dest: str) -> list[Path]:
    """The directories a local destination still needs, outermost first (empty for gs:// or an existing one)."""
    if "://" in dest and not dest.startswith("file://"):
        return []  # gs:// (or any other scheme): nothing to create on the local disk
    path = Path(strip_file_scheme(dest)).absolute()
    missing: list[Path] = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return list(reversed(missing))


def create_private_dirs(dirs: list[Path]) -> None:
    # 0700 whatever the umask and the parent's mode: a new destination is private until someone widens it.
    for directory in dirs:
        directory.mkdir(mode=0o700, exist_ok=True)
        directory.chmod(0o700)


def visibility_fix(storage: Storage, dest: str, evidence: str) -> str:
    """The fix the destination's store declares (SchemeFacts); its credentials fix when the read-back failed for
    want of credentials."""
    facts = scheme_facts(storage, dest)
    if facts.credentials_fix and ("DefaultCredentialsError" in evidence or "credentials" in evidence.lower()):
        return facts.credentials_fix
    return facts.visibility_fix


def plan_publish(
    storage: Storage, record: CompletionRecord, grant: Grant, pinned: Pinned, *, apply: bool = False
) -> tuple[PublishPlan | None, Outcome | None]:
    """Read visibility back, list and scan the pinned objects: the plan, or the refusal.
    `apply` creates a missing local destination (0700); a preview (`apply=False`) only says it would."""
    assert grant.destination is not None  # checked by grants.check_scope
    if is_hub(grant.destination):  # publish() hands the Hub to hub_publish; no storage plan exists
        detail = "a Hub destination is planned and checked by authority/hub_publish.py when the grant is applied"
        return None, refuse(Refusal.not_applicable, detail, grant.destination)
    dest = grant.destination.rstrip("/")
    candidate = pinned.candidate

    missing = missing_local_dirs(dest)
    if missing and apply:
        create_private_dirs(missing)
    if missing and not apply:
        seen_visibility, seen_evidence = Visibility.private, f"{missing[0]} will be created with mode 0700"
    else:
        seen = read_visibility(storage, dest)
        if seen.visibility is None:
            return None, refuse(
                Refusal.visibility_unknown,
                f"{seen.evidence}; fix: {visibility_fix(storage, dest, seen.evidence)}",
                dest,
            )
        seen_visibility, seen_evidence = seen.visibility, seen.evidence
    if seen_visibility.rank > grant.visibility.rank:
        return None, refuse(
            Refusal.visibility_broader,
            f"destination is {seen_visibility.value}, granted {grant.visibility.value}: {seen_evidence}; "
            f"fix: {visibility_fix(storage, dest, seen_evidence)}",
            dest,
        )

    items = plan_items(storage, record, pinned.objects)
    why_tampered = changed_in_listing((i.preserved, i.source) for i in items)
    if why_tampered is not None:
        return None, refuse(Refusal.evidence_tampered, why_tampered, dest)
    scanned = 0
    if not apply:  # a preview scans the sources; a publish scans the staged copy (the bytes it will publish)
        report = scan_objects(storage, [i.source for i in items])
        why = scan_refusal(report, "")
        if why is not None:
            return None, refuse(Refusal.secret_found if report.findings else Refusal.unscannable, why, dest)
        scanned = len(report.scanned)
    created = [str(d) for d in missing]
    plan = PublishPlan(dest, candidate, items, _manifest(items), seen_visibility.value, seen_evidence, created, scanned)
    return plan, None


def _refuse_and_clean(
    storage: Storage, reason: Refusal, detail: str, dest: str, *, staging: str, promoted: list[str] | None = None
) -> Outcome:
    """A refusal leaves nothing behind: the staging area goes, and so does every object this attempt created at
    the destination (it did not exist before; a file that was already there with the same bytes stays)."""
    clean_prefix(storage, staging)
    for uri in promoted or []:
        storage.delete(uri)
    return refuse(reason, detail, dest)


def destination_clash(storage: Storage, staged: ObjectInfo, target: str) -> str | None:
    """Why `target` cannot take the staged object, or None: absent, or already holding exactly its bytes."""
    there = storage.stat(target)
    if there is None:
        return None
    if there.size != staged.size:
        return f"{target} exists with other content; never overwritten"
    if staged.crc32c and there.crc32c and staged.crc32c != there.crc32c:
        return f"{target} exists with other content (crc32c); never overwritten"
    if staged.md5 and there.md5 and staged.md5 != there.md5:
        return f"{target} exists with other content (md5); never overwritten"
    comparable = (staged.crc32c and there.crc32c) or (staged.md5 and there.md5)
    if not comparable and sha256_of(storage, there) != sha256_of(storage, staged):  # no checksum to compare
        return f"{target} exists with other content; never overwritten"
    return None


def scan_refusal(report: ScanReport, staging: str) -> str | None:
    if report.clean and not report.refused:
        return None
    if report.findings:
        shown = "; ".join(str(f).replace(staging + "/", "") for f in report.findings[:MAX_FINDINGS_IN_RECORD])
        more = len(report.findings) - MAX_FINDINGS_IN_RECORD
        return f"secret scan: {shown}" + (f" (+{more} more)" if more > 0 else "")
    shown = "; ".join(r.replace(staging + "/", "") for r in report.refused[:MAX_FINDINGS_IN_RECORD])
    return f"not scannable, so not published: {shown}"


def publish(storage: Storage, record: CompletionRecord, grant: Grant, pinned: Pinned) -> Outcome:
    """Publish or hand off the grant's artifact. Returns the outcome; never raises for a refusal.

    1. the artifact as validated (`pinned`: its digest matched the grant, these versions), the destination's real
       visibility;
    2. every object copied, pinned, into a private staging area, plus provenance.json written there;
    3. the staged copy is scanned, exactly the bytes that will be published (what we wrote ourselves included);
    4. promotion: each staged object (pinned as scanned) copied to the destination and verified, marker last.
    Any refusal removes the staging area and what this attempt promoted. An `hf://` destination is not a storage
    scheme: apply-grant hands it to hub_publish.publish_to_hub instead (plan_publish refuses it as not_applicable)."""
    plan, refused = plan_publish(storage, record, grant, pinned, apply=True)
    if refused:
        return refused
    assert plan is not None
    out = _carry_out(storage, record, grant, pinned, plan)
    if out.refused:  # the directories this attempt created for the destination go too (only while empty)
        for directory in reversed(plan.created):
            with contextlib.suppress(OSError):
                Path(directory).rmdir()
    return out


def _carry_out(storage: Storage, record: CompletionRecord, grant: Grant, pinned: Pinned, plan: PublishPlan) -> Outcome:  # noqa: C901 -- the publish sequence (marker, stage, copy, verify, visibility), one refusal per step; split later
    dest, candidate, items = plan.destination, plan.candidate, plan.items
    if not record.preserved_locations:
        return refuse(Refusal.record_not_eligible, "the run has no preserved location to stage the publish in", dest)
    marker = read_marker(storage, dest)
    if marker is not None:  # a finished publish: a redelivery of ours is a no-op, anyone else's is a conflict
        if marker.get("grant_id") == grant.grant_id and marker.get("digest") == candidate.digest:
            return _published(grant, plan, len(read_provenance(storage, dest).get("manifest", [])), 0)
        return refuse(Refusal.destination_conflict, f"{join(dest, MARKER)} already marks another publish", dest)

    clash = name_clash(list(pinned.objects), [*(i.name for i in items[len(pinned.objects) :]), PROVENANCE, MARKER])
    if clash:
        return refuse(Refusal.candidate_invalid, clash, dest)

    staging = staging_root(record, grant)
    clean_prefix(storage, staging)  # a crashed attempt's leftovers: every check runs again on fresh copies
    staged: list[CopyProof] = []
    try:
        for item in items:
            proof = pinned_copy(storage, item.source, join(staging, item.name), grant_id=grant.grant_id)
            if proof.outcome == "conflict":
                return _refuse_and_clean(
                    storage, Refusal.destination_conflict, f"staging {item.name} did not verify", dest, staging=staging
                )
            sealed = item.preserved
            changed = mismatch(sealed, proof.size, proof.crc32c, proof.md5) if sealed is not None else None
            if sealed is not None and changed is not None:  # the bytes copied are not the evidence that was sealed
                tamper = f"preserved evidence changed since it was sealed: {sealed.destination}: {changed}"
                return _refuse_and_clean(storage, Refusal.evidence_tampered, tamper, dest, staging=staging)
            staged.append(proof)
    except SourceChangedError as exc:
        return _refuse_and_clean(storage, Refusal.source_changed, str(exc), dest, staging=staging)
    exported = {i.name: p for i, p in zip(items, staged, strict=True) if i.name in pinned.objects}
    verdict = verify_staged_manifest(storage, staging, exported, candidate.model_identity, stream_unhashed=False)
    if verdict is not None and verdict.mismatch is not None:
        return _refuse_and_clean(storage, Refusal.manifest_mismatch, verdict.mismatch, dest, staging=staging)

    manifest = [
        {
            "name": item.name,
            "source": item.source.uri,
            "source_version": item.source.fingerprint,
            "size": proof.size,
            "crc32c": proof.crc32c,
            "md5": proof.md5,
            "sha256": proof.sha256,
        }
        for item, proof in zip(items, staged, strict=True)
    ]
    prov = json.dumps(provenance(record, candidate, grant, manifest), indent=1, sort_keys=True).encode()
    if storage.write_if_absent(join(staging, PROVENANCE), prov, "application/json") is WriteOutcome.conflict:
        return _refuse_and_clean(
            storage, Refusal.destination_conflict, "staging provenance.json", dest, staging=staging
        )

    # Scan the staged bytes, pinned as listed: promotion copies exactly these versions, so a byte written into
    # staging after the scan fails the promotion instead of being published.
    listed = sorted(storage.list(staging), key=lambda o: o.uri)
    report = scan_objects(storage, listed)
    why = scan_refusal(report, staging)
    if why is not None:
        reason = Refusal.secret_found if report.findings else Refusal.unscannable
        return _refuse_and_clean(storage, reason, why, dest, staging=staging)

    # Every precondition before the first byte reaches the destination: each path is free or already holds
    # exactly these bytes (a redelivery), and no marker appeared meanwhile.
    for info in listed:
        target = join(dest, relative_to(info.uri, staging))
        problem = destination_clash(storage, info, target)
        if problem:
            return _refuse_and_clean(storage, Refusal.destination_conflict, problem, dest, staging=staging)

    promoted: list[str] = []
    proofs: list[CopyProof] = []
    try:
        for info in listed:
            target = join(dest, relative_to(info.uri, staging))
            proof = pinned_copy(storage, info, target, grant_id=grant.grant_id)
            if proof.outcome == "conflict":
                return _refuse_and_clean(
                    storage, Refusal.destination_conflict, f"{target} exists with other content or did not verify",
                    dest, staging=staging, promoted=promoted,
                )  # fmt: skip
            if proof.outcome == WriteOutcome.created.value:
                promoted.append(target)  # only what this attempt created is removed on a refusal
            proofs.append(proof)
    except SourceChangedError as exc:
        return _refuse_and_clean(
            storage, Refusal.source_changed, f"staged copy changed after the scan: {exc}", dest,
            staging=staging, promoted=promoted,
        )  # fmt: skip

    marker_doc = {
        "run_id": record.run_id,
        "grant_id": grant.grant_id,
        "step": candidate.step,
        "digest": candidate.digest,
        "object_count": len(items),
        "provenance": PROVENANCE,
    }
    marker_uri = join(dest, MARKER)
    if storage.write_if_absent(marker_uri, json.dumps(marker_doc, sort_keys=True).encode(), "application/json") is (
        WriteOutcome.conflict
    ):
        return _refuse_and_clean(
            storage, Refusal.destination_conflict, f"{marker_uri} already marks another publish", dest,
            staging=staging, promoted=promoted,
        )  # fmt: skip
    clean_prefix(storage, staging)
    # The proofs go to the record store (the caller files them on the grant): reclaim re-verifies each
    # destination twin against them, never against files an approver's bucket could hold.
    out = _published(grant, plan, len(items), len(report.scanned))
    out.twins = _twins(items, staged, proofs, dest)
    if verdict is not None:  # what the copy proved against the export's model manifest, said on the outcome
        out.detail += f"; {verdict.statement()}"
        out.model_manifest = verdict.as_doc()
    return out


def _twins(items: list[Item], staged: list[CopyProof], promoted: list[CopyProof], dest: str) -> list[dict[str, Any]]:
    """Per exported object: its pinned source and the proof of its destination copy."""
    by_dest = {p.destination: p for p in promoted}
    rows: list[dict[str, Any]] = []
    for item, stage in zip(items, staged, strict=True):
        twin = by_dest.get(join(dest, item.name))
        if twin is None:
            continue
        rows.append(
            {
                "name": item.name,
                "source": item.source.uri,
                "source_fingerprint": stage.source_fingerprint,
                "source_generation": stage.source_generation,
                "proof": twin.model_copy(update={"sha256": twin.sha256 or stage.sha256}).model_dump(mode="json"),
            }
        )
    return rows


def _published(grant: Grant, plan: PublishPlan, objects: int, scanned: int) -> Outcome:
    return Outcome(
        state="handed_off" if grant.action is Action.handoff else "published",
        destination=plan.destination,
        verified_objects=objects,
        uri=join(plan.destination, PROVENANCE),
        detail=(f"created {', '.join(plan.created)} (mode 0700); " if plan.created else "")
        + f"visibility {plan.visibility}: {plan.visibility_evidence}; {scanned} staged objects scanned",
    )


def read_marker(storage: Storage, destination: str) -> dict[str, Any] | None:
    try:
        value = json.loads(storage.read_bytes(join(destination.rstrip("/"), MARKER)))
    except FileNotFoundError:
        return None
    return value if isinstance(value, dict) else None


def read_provenance(storage: Storage, destination: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(storage.read_bytes(join(destination.rstrip("/"), PROVENANCE)))
    return value
