"""Publish / hand off to the Hugging Face Hub (`hf://<namespace>/<repo>`), the layout MarinSkyRL uses.

Order (every gate before any byte leaves): the artifact and grant checks of every publish; the repo's visibility
read back if it exists (nothing is created yet); plan the files; **stage** every file (pinned copies of the export
and the chain's logs, plus the model card, metrics CSV and provenance we generate) in the run's private staging
area and secret-scan the staged listing, exactly as a gs:// or local publish does (docs/authority.md P4: file
kinds by parsing, tensor bytes the only exemption). Only then is the repo created private when absent and its
real visibility **read back** again (an org may force public), and the staged, scanned bytes uploaded (each
streamed from its staged pin into a temp file, hashed while streaming). A refusal before the upload leaves
nothing on the Hub, not even an empty repo. `plan_hub` is also what `grant --dry-run` shows. After the upload:
verify, and write the `_PUBLISHED.json` marker last, in a commit of its own. The marker's commit sha is the
outcome's `uri` (`hf://org/repo@<sha>`) and so is on the run.

Repo layout: the export's files (weights, configs, tokenizer) at the root; `README.md` (model card with
provenance: run id, step, digest, source revision, base model, selection policy and metric window);
`provenance.json`; `training_logs/` with `metrics.csv`, `report.md`, `timeline.png` and the chain's logs.

Additive and resumable: nothing is ever deleted. Files are committed in batches; a redelivery (or the Cloud Run
job restarted) first reads paths-info, hashes each source while streaming it to a temp file, and skips every file
the Hub already holds with the same size and sha256 (LFS) or git blob id (regular files). A path that holds
*different* content is never overwritten: refused as a conflict. After the last batch every file's size and
sha256 from the Hub's metadata must equal what we sent; a mismatch is refused and recorded, with no marker.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcleanup.authority.artifact import Pinned
from rlcleanup.authority.grants import Action, Grant, Refusal
from rlcleanup.authority.hub_card import LOGS, PROVENANCE, metrics_csv, model_card
from rlcleanup.authority.manifest_check import verify_staged_manifest
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.pinning import CopyProof, pinned_copy, pinned_download
from rlcleanup.authority.publish import name_clash, plan_preview, scan_refusal
from rlcleanup.authority.secrets import scan_objects, scan_string
from rlcleanup.authority.staging import clean_prefix, staging_root
from rlcleanup.models.record import Candidate, CompletionRecord, PreservedObject
from rlcleanup.ports.hub import ModelHub, RemoteFile, git_blob_sha, repo_of
from rlcleanup.ports.storage import ObjectInfo, SourceChangedError, Storage, VisibilityReading, WriteOutcome
from rlcleanup.steps.evidence_check import (
    TamperedEvidence,
    changed_in_listing,
    mismatch,
)
from rlcleanup.uris import join, relative_to

MARKER = "_PUBLISHED.json"
CARD = "README.md"
BATCH_FILES = 50  # files per commit: an interruption loses at most one batch of uploads
BATCH_BYTES = 4 << 30  # ...and at most this much local disk holds a batch (a bigger single file still needs its size)
SMALL_FILE = 10 << 20  # larger files are always LFS on the Hub (no git blob id to compare)
MAX_FINDINGS_IN_RECORD = 10


@dataclass(frozen=True)
class HubItem:
    name: str  # path in the repo
    source: ObjectInfo | None  # an object in storage, or None for a file we generate (`data`)
    data: bytes | None = None
    preserved: PreservedObject | None = None  # preserved evidence: what the sealed manifest says it must still be


@dataclass(frozen=True)
class Sent:
    size: int
    sha256: str
    blob_id: str | None  # git blob id, for files small enough to be regular (non-LFS) on the Hub


def _preserved(storage: Storage, record: CompletionRecord) -> list[PreservedObject]:
    if not record.manifest_uri:
        return []
    manifest = json.loads(storage.read_bytes(record.manifest_uri))
    return [PreservedObject.model_validate(o) for o in manifest.get("objects", [])]


def plan(storage: Storage, record: CompletionRecord, grant: Grant, repo_id: str, pinned: Pinned) -> list[HubItem]:
    """The files of a hand-off: the pinned export (the listing whose digest matched the grant, never a second,
    later listing), the preserved logs, the derived report, and the files we generate."""
    candidate = pinned.candidate
    items = [HubItem(name, info) for name, info in sorted(pinned.objects.items())]
    root = record.preserved_locations[0] if record.preserved_locations else None
    sealed = {o.destination: o for o in _preserved(storage, record)}
    for obj in sealed.values():
        if obj.kind == "log" and root:
            info = storage.stat(obj.destination) or ObjectInfo(uri=obj.destination, size=obj.size)
            items.append(HubItem(f"{LOGS}/{relative_to(obj.destination, root)}", info, preserved=obj))
    if root:
        for name in ("report.md", "timeline.png"):
            derived = storage.stat(join(root, "derived", name))
            if derived is not None:
                items.append(HubItem(f"{LOGS}/{name}", derived, preserved=sealed.get(derived.uri)))
    csv_bytes = metrics_csv(storage, record)
    if csv_bytes is not None:
        items.append(HubItem(f"{LOGS}/metrics.csv", None, csv_bytes))
    items.append(HubItem(CARD, None, model_card(record, candidate, grant, repo_id)))
    manifest = [{"name": i.name, "source": i.source.uri if i.source else "generated"} for i in items]
    prov = {"run_id": record.run_id, "grant_id": grant.grant_id, "step": candidate.step, "digest": candidate.digest}
    prov |= {"source_revision": record.source_revision}
    prov |= {"base_model": record.base_model, "files": manifest}
    items.append(HubItem(PROVENANCE, None, json.dumps(prov, indent=1, sort_keys=True).encode()))
    return items


@dataclass(frozen=True)
class UploadProgress:
    """How far an upload is, by files and bytes (files already on the Hub count as done): on the run record."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    skipped: int  # of files_done, already on the Hub before this attempt (a resume)

    def as_doc(self) -> dict[str, int]:
        return {
            "files_done": self.files_done,
            "files_total": self.files_total,
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "skipped": self.skipped,
        }

    def line(self) -> str:
        return (
            f"uploading: {self.files_done} of {self.files_total} files, {self.bytes_done} of {self.bytes_total} "
            f"bytes ({self.skipped} already on the Hub)"
        )


@dataclass
class HubPlan:
    """Exactly what a Hub hand-off will upload, and where: `grant --dry-run` shows it, `publish_to_hub` does it."""

    destination: str
    repo_id: str
    candidate: Candidate
    items: list[HubItem]
    visibility: str
    visibility_evidence: str
    exists: bool  # False: the repo is created private when the grant is applied (and its visibility read back)
    scanned_objects: int

    @property
    def total_bytes(self) -> int:
        return sum(_size(i) for i in self.items)

    def preview(self) -> dict[str, Any]:
        objects = [
            {
                "name": i.name,
                "source": i.source.uri if i.source else "generated",
                "source_version": i.source.fingerprint if i.source else None,
                "size": _size(i),
                "crc32c": i.source.crc32c if i.source else None,
                "md5": i.source.md5 if i.source else None,
            }
            for i in self.items
        ]
        creates = [] if self.exists else [f"hf://{self.repo_id} (private repo)"]
        scan = (
            f"clean ({self.scanned_objects} source objects and the generated files scanned; "
            "the staged copy is scanned again before upload)"
        )
        return plan_preview(self, creates, objects, scan)


def _size(item: HubItem) -> int:
    return item.source.size if item.source is not None else len(item.data or b"")


def _sent(path: Path, size: int, sha256: str) -> Sent:
    """What we send for a local file: git blob ids only for files small enough to be regular (non-LFS) files."""
    if size > SMALL_FILE:
        return Sent(size, sha256, None)
    return Sent(size, sha256, git_blob_sha(path.read_bytes()))


def _matches(remote: RemoteFile, sent: Sent) -> bool:
    if remote.size != sent.size:
        return False
    if remote.sha256 is not None:
        return remote.sha256 == sent.sha256
    return sent.blob_id is not None and remote.blob_id == sent.blob_id


def _scan_generated(items: list[HubItem], repo_id: str) -> list[str]:
    """A preview scans the files we would write (model card, provenance, metrics CSV) from memory; a hand-off
    scans them as staged, with everything else."""
    found = []
    for item in items:
        if item.data is not None:
            found += scan_string(item.data.decode("utf-8", errors="replace"), f"hf://{repo_id}/{item.name}")
    return [str(f) for f in found]


def _visibility_refusal(seen: VisibilityReading, grant: Grant, dest: str) -> Outcome | None:
    if seen.visibility is None:
        return refuse(Refusal.visibility_unknown, seen.evidence, dest)
    if seen.visibility.rank > grant.visibility.rank:
        return refuse(
            Refusal.visibility_broader,
            f"destination is {seen.visibility.value}, granted {grant.visibility.value}: {seen.evidence}",
            dest,
        )
    return None


def plan_hub(
    storage: Storage, record: CompletionRecord, grant: Grant, hub: ModelHub, pinned: Pinned, *, apply: bool = False
) -> tuple[HubPlan | None, Outcome | None]:
    """Read the repo's visibility back (nothing is created here), plan the files of the pinned artifact;
    a preview (`apply=False`) also scans the sources and the files we generate. The plan, or the refusal."""
    assert grant.destination is not None
    dest = grant.destination.rstrip("/")
    try:
        repo_id = repo_of(dest)
    except ValueError as exc:
        return None, refuse(Refusal.malformed, str(exc), dest)
    candidate = pinned.candidate
    seen = hub.visibility(repo_id)
    if seen is None:
        visibility, evidence = "private", f"hf://{repo_id} does not exist yet: it will be created private"
    else:
        refused = _visibility_refusal(seen, grant, dest)
        if refused:
            return None, refused
        assert seen.visibility is not None
        visibility, evidence = seen.visibility.value, seen.evidence
    try:
        items = plan(storage, record, grant, repo_id, pinned)
    except TamperedEvidence as exc:
        return None, refuse(Refusal.evidence_tampered, f"preserved evidence changed since it was sealed: {exc}", dest)
    why_tampered = changed_in_listing((i.preserved, i.source) for i in items)
    if why_tampered is not None:
        return None, refuse(Refusal.evidence_tampered, why_tampered, dest)
    clash = name_clash(list(pinned.objects), [*(i.name for i in items[len(pinned.objects) :]), MARKER])
    if clash:
        return None, refuse(Refusal.candidate_invalid, clash, dest)
    scanned = 0
    if not apply:
        report = scan_objects(storage, [i.source for i in items if i.source is not None])
        findings = [str(f) for f in report.findings] + _scan_generated(items, repo_id)
        if report.refused and not findings:
            shown = "; ".join(report.refused[:MAX_FINDINGS_IN_RECORD])
            return None, refuse(Refusal.unscannable, f"not scannable, so not published: {shown}", dest)
        if findings:
            return None, refuse(Refusal.secret_found, f"secret scan: {_shown(findings)}", dest)
        scanned = len(report.scanned)
    return HubPlan(dest, repo_id, candidate, items, visibility, evidence, seen is not None, scanned), None


def _shown(findings: list[str]) -> str:
    more = len(findings) - MAX_FINDINGS_IN_RECORD
    return "; ".join(findings[:MAX_FINDINGS_IN_RECORD]) + (f" (+{more} more)" if more > 0 else "")


def _stage(storage: Storage, items: list[HubItem], staging: str) -> tuple[str | None, dict[str, CopyProof]]:
    """Every file to upload copied (pinned) into the private staging area, generated ones written there: what is
    scanned and uploaded is this copy. Returns a conflict's description (or None) and the copies' proofs by name."""
    proofs: dict[str, CopyProof] = {}
    for item in items:
        target = join(staging, item.name)
        if item.source is not None:
            proof = pinned_copy(storage, item.source, target)
            if proof.outcome == "conflict":
                return f"staging {item.name} did not verify", proofs
            proofs[item.name] = proof
            changed = mismatch(item.preserved, proof.size, proof.crc32c, proof.md5) if item.preserved else None
            if item.preserved is not None and changed is not None:
                raise TamperedEvidence(f"{item.preserved.destination}: changed since it was preserved ({changed})")
        elif storage.write_if_absent(target, item.data or b"", "application/octet-stream") is WriteOutcome.conflict:
            return f"staging {item.name}", proofs
    return None, proofs


def _staged_path(tmp: Path, name: str) -> Path:
    return tmp / hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()


def _already_there(
    storage: Storage, staged: dict[str, ObjectInfo], remote: dict[str, RemoteFile], tmp: Path
) -> dict[str, Sent]:
    """What we would send for each path the repo already holds (hashed from the staged pin; nothing kept on disk)."""
    sent: dict[str, Sent] = {}
    for name in sorted(set(remote) & set(staged)):
        path = _staged_path(tmp, name)
        sent[name] = _sent(path, *pinned_download(storage, staged[name], path))
        path.unlink(missing_ok=True)
    return sent


def _first_conflict(
    items: list[HubItem], remote: dict[str, RemoteFile], sent: dict[str, Sent], repo_id: str
) -> str | None:
    for item in items:
        there = remote.get(item.name)
        if there is not None and not _matches(there, sent[item.name]):
            return f"hf://{repo_id}/{item.name} exists with other content (size {there.size}); never overwritten"
    missing = [i.name for i in items if i.name not in remote]
    if MARKER in remote and missing:
        return f"hf://{repo_id}/{MARKER} already marks another publish (it lacks {missing[:5]})"
    return None


def publish_to_hub(
    storage: Storage,
    record: CompletionRecord,
    grant: Grant,
    hub: ModelHub,
    pinned: Pinned,
    progress: Callable[[UploadProgress], None] | None = None,
    batch_files: int | None = None,
) -> Outcome:
    """Plan, stage, scan the staged bytes, then (only then) create/read back the repo and upload from the staged
    copy. Any refusal before the upload leaves nothing on the Hub (not even an empty repo) and no staging."""
    found, refused = plan_hub(storage, record, grant, hub, pinned, apply=True)
    if refused:
        return refused
    assert found is not None
    hub_plan = found
    dest = hub_plan.destination
    if not record.preserved_locations:
        return refuse(Refusal.record_not_eligible, "the run has no preserved location to stage the upload in", dest)
    staging = staging_root(record, grant)
    clean_prefix(storage, staging)  # a crashed attempt's leftovers: staged and scanned again, from the pins
    try:
        try:
            conflict, proofs = _stage(storage, hub_plan.items, staging)
        except SourceChangedError as exc:
            return refuse(Refusal.source_changed, str(exc), dest)
        except TamperedEvidence as exc:
            return refuse(Refusal.evidence_tampered, f"preserved evidence changed since it was sealed: {exc}", dest)
        if conflict:
            return refuse(Refusal.destination_conflict, conflict, dest)
        # The upload streams every byte anyway, so a server-side staged copy is hashed too: checked before the repo.
        exported = {name: proof for name, proof in proofs.items() if name in pinned.objects}
        verdict = verify_staged_manifest(
            storage, staging, exported, hub_plan.candidate.model_identity, stream_unhashed=True
        )
        if verdict is not None and verdict.mismatch is not None:
            return refuse(Refusal.manifest_mismatch, verdict.mismatch, dest)
        listed = {relative_to(o.uri, staging): o for o in storage.list(staging)}
        report = scan_objects(storage, sorted(listed.values(), key=lambda o: o.uri))
        why = scan_refusal(report, staging)
        if why is not None:
            return refuse(Refusal.secret_found if report.findings else Refusal.unscannable, why, dest)
        batch = batch_files or BATCH_FILES
        out = _upload(storage, record, grant, hub, hub_plan, listed, len(report.scanned), progress, batch)
        if verdict is not None and not out.refused:  # what the staged copy proved against the model manifest
            out.detail += f"; {verdict.statement()}"
            out.model_manifest = verdict.as_doc()
        return out
    finally:
        clean_prefix(storage, staging)


def _upload(  # noqa: C901 -- the upload's resume, batch and commit steps with their failure branches; split with the hand-off
    storage: Storage,
    record: CompletionRecord,
    grant: Grant,
    hub: ModelHub,
    hub_plan: HubPlan,
    staged: dict[str, ObjectInfo],
    scanned: int,
    progress: Callable[[UploadProgress], None] | None,
    batch_files: int,
) -> Outcome:
    repo_id, dest, candidate, items = hub_plan.repo_id, hub_plan.destination, hub_plan.candidate, hub_plan.items
    if not hub_plan.exists:
        hub.ensure_private_repo(repo_id)
    seen = hub.visibility(repo_id)  # read back now, right before the first byte: an org may force public
    if seen is None:
        return refuse(Refusal.visibility_unknown, f"hf://{repo_id} is not readable after creating it", dest)
    refused = _visibility_refusal(seen, grant, dest)
    if refused:
        return refused
    total_bytes = sum(staged[i.name].size for i in items)
    with tempfile.TemporaryDirectory(prefix="rlcleanup-hub-") as tmp_dir:
        tmp = Path(tmp_dir)
        remote = hub.remote_files(repo_id, [i.name for i in items] + [MARKER])
        # Every conflict the first paths-info shows is refused before the first commit: a path holding other
        # bytes, or a marker over a repo that lacks some of our files (another publish's, or a forged one).
        sent = _already_there(storage, staged, remote, tmp)
        conflict = _first_conflict(items, remote, sent, repo_id)
        if conflict:
            return refuse(Refusal.destination_conflict, conflict, dest)
        uploaded = skipped = done_bytes = 0
        batch: list[tuple[str, Path]] = []
        batch_bytes = 0
        commits: list[str] = []

        def report() -> None:
            if progress:
                progress(UploadProgress(uploaded + skipped, len(items), done_bytes, total_bytes, skipped))

        def flush() -> None:
            nonlocal batch, batch_bytes, done_bytes
            if batch:
                part = len(commits) + 1
                message = f"rlcleanup: run {record.run_id} step {candidate.step} (part {part})"
                commits.append(hub.commit_files(repo_id, batch, message))
                for _, path in batch:
                    path.unlink(missing_ok=True)  # bounded disk: only one batch is held at a time
                done_bytes += batch_bytes
                batch, batch_bytes = [], 0
                report()

        for item in items:
            if item.name in remote:  # checked above: it holds exactly these bytes
                skipped += 1  # resumed: already uploaded and verified
                done_bytes += sent[item.name].size
                continue
            path = _staged_path(tmp, item.name)
            what = _sent(path, *pinned_download(storage, staged[item.name], path))  # the staged, scanned bytes
            sent[item.name] = what
            batch.append((item.name, path))
            batch_bytes += what.size
            uploaded += 1
            if len(batch) >= batch_files or batch_bytes >= BATCH_BYTES:
                flush()
        flush()
        report()

        after = hub.remote_files(repo_id, list(sent))
        problems = []
        for name, what in sent.items():
            got = after.get(name)
            if got is None:
                problems.append(f"{name}: missing after upload")
            elif not _matches(got, what):
                problems.append(
                    f"{name}: Hub reports size {got.size} sha256 {got.sha256 or got.blob_id}, sent {what.size} {what.sha256}"
                )
        if problems:
            return refuse(Refusal.destination_unverified, f"verification failed: {problems[:5]}", dest)

        marker = {
            "run_id": record.run_id,
            "grant_id": grant.grant_id,
            "step": candidate.step,
            "digest": candidate.digest,
            "object_count": len(sent),
            "files": {name: s.sha256 for name, s in sorted(sent.items())},
        }
        marker_bytes = json.dumps(marker, indent=1, sort_keys=True).encode()
        existing = remote.get(MARKER)
        if existing is not None and existing.blob_id != git_blob_sha(marker_bytes):
            return refuse(Refusal.destination_conflict, f"hf://{repo_id}/{MARKER} already marks another publish", dest)
        if existing is None:
            marker_path = tmp / "marker.json"
            marker_path.write_bytes(marker_bytes)
            commits.append(hub.commit_files(repo_id, [(MARKER, marker_path)], f"rlcleanup: {MARKER} (verified)"))
        head = commits[-1] if commits else "unchanged"
    return Outcome(
        state="handed_off" if grant.action is Action.handoff else "published",
        destination=dest,
        verified_objects=len(sent),
        uri=f"hf://{repo_id}@{head}",
        detail=(
            f"{seen.evidence}; commit {head}; {uploaded} files uploaded, {skipped} already there, "
            f"{total_bytes} bytes; {scanned} staged objects scanned; {hub.requests} Hub calls"
        ),
    )
