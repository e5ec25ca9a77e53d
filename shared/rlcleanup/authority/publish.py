"""Publish / hand-off: gates first (artifact, visibility, secret scan), then provenance, copy, verify, marker.

Destination layout: the export's files at the top, the preserved logs under `training_logs/`, `provenance.json`
beside them and `_PUBLISHED.json` written LAST, only after every object was re-read and matched. An interrupted
copy leaves no marker (so nothing claims completeness) and a redelivery resumes: copies are write-once and a
replayed copy of identical bytes is a no-op. Marker and provenance carry no wall-clock time, so a replay is
byte-identical.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcleanup.authority import artifact
from rlcleanup.authority.checks import Expected, expected_of, mismatch
from rlcleanup.authority.grants import Action, Grant, Refusal, Visibility
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.secrets import scan_objects
from rlcleanup.authority.visibility import read_visibility
from rlcleanup.models.record import Candidate, CompletionRecord, PreservedObject
from rlcleanup.ports.storage import ObjectInfo, Storage, WriteOutcome
from rlcleanup.uris import join, relative_to, strip_file_scheme

PROVENANCE = "provenance.json"
MARKER = "_PUBLISHED.json"
MAX_FINDINGS_IN_RECORD = 10


@dataclass(frozen=True)
class Item:
    source: ObjectInfo
    name: str  # relative to the destination


def plan_items(storage: Storage, record: CompletionRecord, candidate: Candidate) -> list[Item]:
    items = [Item(info, name) for name, info in sorted(artifact.listing(storage, candidate.uri).items())]
    for obj in _preserved_logs(storage, record):
        root = record.preserved_locations[0]
        items.append(
            Item(storage.stat(obj.destination) or _info(obj), f"training_logs/{relative_to(obj.destination, root)}")
        )
    return items


def _info(obj: PreservedObject) -> ObjectInfo:
    return ObjectInfo(uri=obj.destination, size=obj.size, crc32c=obj.crc32c, md5=obj.md5)


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


def _manifest(storage: Storage, items: list[Item]) -> tuple[list[dict[str, Any]], dict[str, Expected]]:
    expected = {item.name: expected_of(storage, item.source) for item in items}
    rows = [
        {"name": i.name, "source": i.source.uri, "size": e.size, "crc32c": e.crc32c, "md5": e.md5}
        for i in items
        for e in [expected[i.name]]
    ]
    return rows, expected


@dataclass
class PublishPlan:
    """Exactly what a publish will copy, and where: `grant --dry-run` shows this, `publish` carries it out."""

    destination: str
    candidate: Candidate
    items: list[Item]
    manifest: list[dict[str, Any]]
    expected: dict[str, Expected]
    visibility: str
    visibility_evidence: str
    created: list[str]  # local directories created (0700) for the destination; "would create" in a preview
    scanned_objects: int

    @property
    def total_bytes(self) -> int:
        return sum(row["size"] or 0 for row in self.manifest)

    def preview(self) -> dict[str, Any]:
        return {
            "destination": self.destination,
            "step": self.candidate.step,
            "digest": self.candidate.digest,
            "visibility": self.visibility,
            "visibility_evidence": self.visibility_evidence,
            "creates": self.created,
            "objects": self.manifest,
            "object_count": len(self.manifest),
            "total_bytes": self.total_bytes,
            "secret_scan": f"clean ({self.scanned_objects} text objects scanned)",
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


def _visibility_fix(dest: str, evidence: str) -> str:
    if dest.startswith("gs://"):
        if "DefaultCredentialsError" in evidence or "credentials" in evidence.lower():
            return (
                "no Google Cloud credentials to read the bucket's IAM: set GOOGLE_APPLICATION_CREDENTIALS to a "
                "service-account key (or run `gcloud auth application-default login`); for the local stack set "
                'STORAGE_EMULATOR_HOST (`eval "$(rlcleanup stack up)"`), or publish to a local directory'
            )
        return "grant the bucket's actual visibility, or remove its public IAM members"
    return (
        "make the destination private (`chmod go-rwx DIR` on it or an ancestor), choose a new directory "
        "(rlcleanup creates it 0700), or grant the wider visibility"
    )


def plan_publish(
    storage: Storage, record: CompletionRecord, grant: Grant, *, apply: bool = False
) -> tuple[PublishPlan | None, Outcome | None]:
    """Resolve, read visibility back, list and scan the objects: the plan, or the refusal.
    `apply` creates a missing local destination (0700); a preview (`apply=False`) only says it would."""
    assert grant.destination is not None  # checked by grants.check_scope
    if grant.destination.startswith("hf://"):  # publish() hands the Hub to hub_publish; no storage plan exists
        detail = "a Hub destination is planned and checked by authority/hub_publish.py when the grant is applied"
        return None, refuse(Refusal.not_applicable, detail, grant.destination)
    dest = grant.destination.rstrip("/")
    candidate, refused = artifact.resolve(storage, record, grant)
    if refused:
        return None, refused
    assert candidate is not None

    missing = missing_local_dirs(dest)
    if missing and apply:
        create_private_dirs(missing)
    if missing and not apply:
        seen_visibility, seen_evidence = Visibility.private, f"{missing[0]} will be created with mode 0700"
    else:
        seen = read_visibility(storage, dest)
        if seen.visibility is None:
            return None, refuse(
                Refusal.visibility_unknown, f"{seen.evidence}; fix: {_visibility_fix(dest, seen.evidence)}", dest
            )
        seen_visibility, seen_evidence = seen.visibility, seen.evidence
    if seen_visibility.rank > grant.visibility.rank:
        return None, refuse(
            Refusal.visibility_broader,
            f"destination is {seen_visibility.value}, granted {grant.visibility.value}: {seen_evidence}; "
            f"fix: {_visibility_fix(dest, seen_evidence)}",
            dest,
        )

    items = plan_items(storage, record, candidate)
    report = scan_objects(storage, [i.source for i in items])
    if not report.clean:
        shown = "; ".join(str(f) for f in report.findings[:MAX_FINDINGS_IN_RECORD])
        more = (
            f" (+{len(report.findings) - MAX_FINDINGS_IN_RECORD} more)"
            if len(report.findings) > MAX_FINDINGS_IN_RECORD
            else ""
        )
        return None, refuse(Refusal.secret_found, f"secret scan: {shown}{more}", dest)
    manifest, expected = _manifest(storage, items)
    created = [str(d) for d in missing]
    plan = PublishPlan(
        dest, candidate, items, manifest, expected, seen_visibility.value, seen_evidence, created, len(report.scanned)
    )
    return plan, None


def publish(storage: Storage, record: CompletionRecord, grant: Grant) -> Outcome:
    """Publish or hand off the grant's artifact. Returns the outcome; never raises for a refusal."""
    if grant.destination and grant.destination.startswith("hf://"):  # the Hub is a destination, not a storage scheme
        from rlcleanup.authority.hub_publish import publish_to_hub

        return publish_to_hub(storage, record, grant)
    plan, refused = plan_publish(storage, record, grant, apply=True)
    if refused:
        return refused
    assert plan is not None
    dest, candidate, items = plan.destination, plan.candidate, plan.items
    manifest, expected = plan.manifest, plan.expected
    prov = json.dumps(provenance(record, candidate, grant, manifest), indent=1, sort_keys=True).encode()
    prov_uri = join(dest, PROVENANCE)
    if storage.write_if_absent(prov_uri, prov, "application/json") is WriteOutcome.conflict:
        return refuse(Refusal.destination_conflict, f"{prov_uri} exists with other content (another publish?)", dest)

    conflicts = [
        join(dest, i.name)
        for i in items
        if storage.copy_if_absent(i.source.uri, join(dest, i.name)) is WriteOutcome.conflict
    ]
    if conflicts:
        return refuse(Refusal.destination_conflict, f"exists with different content: {conflicts[:5]}", dest)

    problems = [p for i in items if (p := mismatch(storage, join(dest, i.name), expected[i.name]))]
    if problems:  # something else wrote there meanwhile: no marker, so the destination never claims completeness
        return refuse(Refusal.destination_conflict, f"verification failed: {problems[:5]}", dest)

    marker = {
        "run_id": record.run_id,
        "grant_id": grant.grant_id,
        "step": candidate.step,
        "digest": candidate.digest,
        "object_count": len(items),
        "provenance": PROVENANCE,
    }
    marker_uri = join(dest, MARKER)
    if storage.write_if_absent(marker_uri, json.dumps(marker, sort_keys=True).encode(), "application/json") is (
        WriteOutcome.conflict
    ):
        return refuse(Refusal.destination_conflict, f"{marker_uri} already marks another publish", dest)
    return Outcome(
        state="handed_off" if grant.action is Action.handoff else "published",
        destination=dest,
        verified_objects=len(items),
        uri=prov_uri,
        detail=(f"created {', '.join(plan.created)} (mode 0700); " if plan.created else "")
        + f"visibility {plan.visibility}: {plan.visibility_evidence}; {plan.scanned_objects} text objects scanned",
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
