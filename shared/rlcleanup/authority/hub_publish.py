"""Publish / hand off to the Hugging Face Hub (`hf://<namespace>/<repo>`), the layout MarinSkyRL uses.

Order (every gate before any byte leaves): the artifact and grant checks of every publish; create the repo
private when absent; **read back** its real visibility (an org may force public) and refuse when wider than the
grant; plan the files; the same secret scan as every publish (logs, configs, safetensors metadata and the model
card we generate); then upload additively, verify, and write the `_PUBLISHED.json` marker last, in a commit of its
own. The marker's commit sha is the outcome's `uri` (`hf://org/repo@<sha>`) and so is on the run.

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

import csv
import hashlib
import io
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlcleanup.adapters.hf_hub import HubDestination, RemoteFile, git_blob_sha, repo_of
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority import artifact
from rlcleanup.authority.grants import Action, Grant, Refusal
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.secrets import scan_objects
from rlcleanup.models.record import Candidate, CompletionRecord, PreservedObject
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.uris import join, relative_to

MARKER = "_PUBLISHED.json"
CARD = "README.md"
PROVENANCE = "provenance.json"
LOGS = "training_logs"
BATCH_FILES = 50  # files per commit: an interruption loses at most one batch of uploads
MAX_FINDINGS_IN_RECORD = 10


@dataclass(frozen=True)
class HubItem:
    name: str  # path in the repo
    source: ObjectInfo | None  # an object in storage, or None for a file we generate (`data`)
    data: bytes | None = None


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


def metrics_csv(storage: Storage, record: CompletionRecord) -> bytes | None:
    """The stitched metrics (metrics.jsonl) as one CSV: step, kind, attempt, then every metric name."""
    if not record.metrics_uri:
        return None
    try:
        lines = list(storage.iter_lines(record.metrics_uri))
    except FileNotFoundError:
        return None
    rows = [json.loads(line) for line in lines if line.strip()]
    rows = [r for r in rows if r.get("kind") in ("train", "eval")]
    names = sorted({k for r in rows for k in (r.get("metrics") or {})})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["step", "kind", "attempt", *names])
    for r in rows:
        m = r.get("metrics") or {}
        writer.writerow(
            [r["step"], r["kind"], r.get("attempt", ""), *("" if m.get(n) is None else m[n] for n in names)]
        )
    return out.getvalue().encode()


def model_card(record: CompletionRecord, candidate: Candidate, grant: Grant, repo_id: str) -> bytes:
    sel = record.selection
    chosen = sel is not None and sel.step == candidate.step
    rev = record.source_revision
    facts = [
        ("run id", record.run_id),
        ("run", record.run_uri),
        ("step", str(candidate.step)),
        ("digest", candidate.digest or "-"),
        ("parameters", f"{candidate.parameter_count:,}" if candidate.parameter_count else "-"),
        ("base model", record.base_model or "-"),
        ("source revision", ", ".join(f"{k} {v}" for k, v in sorted(rev.items()) if v) or "-"),
        ("selection policy", (json.dumps(sel.policy, sort_keys=True) if sel.policy else sel.status) if sel else "-"),
        (
            "metric window",
            json.dumps(sel.metric_window, sort_keys=True) if chosen and sel and sel.metric_window else "-",
        ),
        ("grant", f"{grant.grant_id} ({grant.action.value}) by {grant.granted_by}"),
    ]
    base = f"base_model: {record.base_model}\n" if record.base_model else ""
    lines = ["---", "library_name: transformers", f"{base}tags:", "- rlcleanup", "- reinforcement-learning", "---", ""]
    lines += [f"# {repo_id.split('/')[-1]}", "", f"Published by rlcleanup from run `{record.run_id}`.", ""]
    lines += ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in facts), ""]
    lines += [
        f"Training logs, stitched metrics and the cleanup report are in `{LOGS}/`; `{PROVENANCE}` lists every file."
    ]
    return ("\n".join(lines) + "\n").encode()


def plan(
    storage: Storage,
    record: CompletionRecord,
    candidate: Candidate,
    grant: Grant,
    repo_id: str,
    pinned: dict[str, ObjectInfo] | None = None,
) -> list[HubItem]:
    """`pinned`: the listing whose digest matched the grant (never a second, later listing)."""
    export = pinned if pinned is not None else artifact.listing(storage, candidate.uri)
    items = [HubItem(name, info) for name, info in sorted(export.items())]
    root = record.preserved_locations[0] if record.preserved_locations else None
    for obj in _preserved(storage, record):
        if obj.kind == "log" and root:
            info = storage.stat(obj.destination) or ObjectInfo(uri=obj.destination, size=obj.size)
            items.append(HubItem(f"{LOGS}/{relative_to(obj.destination, root)}", info))
    if root:
        for name in ("report.md", "timeline.png"):
            derived = storage.stat(join(root, "derived", name))
            if derived is not None:
                items.append(HubItem(f"{LOGS}/{name}", derived))
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


def _materialize(storage: Storage, item: HubItem, tmp: Path) -> tuple[Path, Sent]:
    """The item's bytes in a local file (streamed from storage in bounded chunks), with what we will send."""
    path = tmp / hashlib.sha1(item.name.encode(), usedforsecurity=False).hexdigest()
    if item.data is not None:
        path.write_bytes(item.data)
    else:
        assert item.source is not None
        path.unlink(missing_ok=True)
        storage.copy_if_absent(item.source.uri, str(path))
    sha, size = hashlib.sha256(), 0
    small = bytearray()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            sha.update(block)
            size += len(block)
            if size <= 10 << 20:
                small += block
    blob = git_blob_sha(bytes(small)) if size <= 10 << 20 else None
    return path, Sent(size, sha.hexdigest(), blob)


def _matches(remote: RemoteFile, sent: Sent) -> bool:
    if remote.size != sent.size:
        return False
    if remote.sha256 is not None:
        return remote.sha256 == sent.sha256
    return sent.blob_id is not None and remote.blob_id == sent.blob_id


def _scan_generated(items: list[HubItem], tmp: Path) -> list[str]:
    local = LocalStorage(checksums=False)
    infos: list[ObjectInfo] = []
    for item in items:
        if item.data is not None:
            path = tmp / f"scan-{len(infos)}-{Path(item.name).name}"
            path.write_bytes(item.data)
            infos.append(ObjectInfo(uri=str(path), size=len(item.data)))
    return [str(f) for f in scan_objects(local, infos).findings]


def publish_to_hub(
    storage: Storage,
    record: CompletionRecord,
    grant: Grant,
    hub: HubDestination | None = None,
    progress: Callable[[str], None] | None = None,
) -> Outcome:
    assert grant.destination is not None
    dest = grant.destination.rstrip("/")
    try:
        repo_id = repo_of(dest)
    except ValueError as exc:
        return refuse(Refusal.malformed, str(exc), dest)
    candidate, pinned, refused = artifact.resolve_pinned(storage, record, grant)
    if refused:
        return refused
    assert candidate is not None
    hub = hub or HubDestination()

    hub.ensure_private_repo(repo_id)
    seen = hub.visibility(repo_id)  # read back: the flag we sent may have been overridden
    if seen.visibility is None:
        return refuse(Refusal.visibility_unknown, seen.evidence, dest)
    if seen.visibility.rank > grant.visibility.rank:
        return refuse(
            Refusal.visibility_broader,
            f"destination is {seen.visibility.value}, granted {grant.visibility.value}: {seen.evidence}",
            dest,
        )

    items = plan(storage, record, candidate, grant, repo_id, pinned)
    with tempfile.TemporaryDirectory(prefix="rlcleanup-hub-") as tmp_dir:
        tmp = Path(tmp_dir)
        report = scan_objects(storage, [i.source for i in items if i.source is not None])
        if report.refused:  # unknown file kinds are refused, never skipped (docs/authority.md P4)
            shown = "; ".join(report.refused[:MAX_FINDINGS_IN_RECORD])
            return refuse(Refusal.unscannable, f"not scannable, so not published: {shown}", dest)
        findings = [str(f) for f in report.findings] + _scan_generated(items, tmp)
        if findings:
            shown = "; ".join(findings[:MAX_FINDINGS_IN_RECORD])
            more = (
                f" (+{len(findings) - MAX_FINDINGS_IN_RECORD} more)" if len(findings) > MAX_FINDINGS_IN_RECORD else ""
            )
            return refuse(Refusal.secret_found, f"secret scan: {shown}{more}", dest)

        remote = hub.remote_files(repo_id, [i.name for i in items] + [MARKER])
        sent: dict[str, Sent] = {}
        uploaded = skipped = 0
        batch: list[tuple[str, Path]] = []
        commits: list[str] = []

        def flush() -> None:
            nonlocal batch
            if batch:
                part = len(commits) + 1
                message = f"rlcleanup: run {record.run_id} step {candidate.step} (part {part})"
                commits.append(hub.commit_files(repo_id, batch, message))
                for _, path in batch:
                    path.unlink(missing_ok=True)  # bounded disk: only one batch is held at a time
                batch = []
                if progress:
                    progress(f"{uploaded} of {len(items)} files uploaded, {skipped} already on the Hub")

        for item in items:
            path, what = _materialize(storage, item, tmp)
            sent[item.name] = what
            there = remote.get(item.name)
            if there is not None:
                path.unlink(missing_ok=True)
                if _matches(there, what):
                    skipped += 1  # resumed: already uploaded and verified
                    continue
                return refuse(
                    Refusal.destination_conflict,
                    f"hf://{repo_id}/{item.name} exists with other content (size {there.size}); never overwritten",
                    dest,
                )
            batch.append((item.name, path))
            uploaded += 1
            if len(batch) >= BATCH_FILES:
                flush()
        flush()

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
            f"{seen.evidence}; commit {head}; {uploaded} files uploaded, {skipped} already there; "
            f"{len(report.scanned)} text objects scanned; {hub.requests} Hub calls"
        ),
    )
