"""Reclaim: delete the source copy of an artifact only after its destination is re-verified now.

1. The destination must carry a completion marker for the grant's digest, and every exported object must match
   its destination copy byte-for-byte (size + CRC32C, re-read at reclaim time, never trusted from the publish).
2. A plan is written (write-once, beside the preserved evidence) listing exactly what will be deleted and what is
   kept and why; the caller records it before anything is deleted.
3. Execution is idempotent: an object already gone counts as deleted; an object whose size, checksum or GCS
   generation changed after the plan was made is kept, and objects created later are not in the plan. Preserved evidence is never in the plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rlcleanup.authority import artifact
from rlcleanup.authority.checks import Expected, crc32c_of, expected_of, mismatch
from rlcleanup.authority.grants import Grant, Refusal
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.publish import read_marker, read_provenance
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.storage import Storage, WriteOutcome
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import join


def plan_uri(record: CompletionRecord, grant: Grant) -> str:
    return join(record.preserved_locations[0], "authority", f"reclaim-{grant.grant_id}.json")


def verify_destination(storage: Storage, grant: Grant, export: dict[str, Any]) -> Outcome | None:
    """None when every exported object's destination copy matches the source as it is now."""
    dest = (grant.destination or "").rstrip("/")
    marker = read_marker(storage, dest)
    if marker is None or marker.get("digest") != grant.digest or marker.get("step") != grant.step:
        what = f"step {grant.step} ({grant.digest})"
        return refuse(Refusal.destination_unverified, f"{dest} carries no completed publish of {what}", dest)
    published = {row["name"] for row in read_provenance(storage, dest).get("manifest", [])}
    missing = sorted(set(export) - published)
    if missing:
        return refuse(Refusal.destination_unverified, f"not in the destination's manifest: {missing[:5]}", dest)
    problems = [
        p for name, info in export.items() if (p := mismatch(storage, join(dest, name), expected_of(storage, info)))
    ]
    if problems:
        return refuse(Refusal.destination_altered, f"destination re-verification failed: {problems[:5]}", dest)
    return None


def make_plan(
    storage: Storage, record: CompletionRecord, layout: RunLayout, grant: Grant, export_uri: str, now: datetime
) -> dict[str, Any]:
    export_root = export_uri.rstrip("/") + "/"
    preserved = [p.rstrip("/") + "/" for p in record.preserved_locations]
    roots = [layout.run_uri] + ([layout.temp_root] if layout.temp_root else [])
    delete: list[dict[str, Any]] = []
    keep: list[dict[str, str]] = []
    seen: set[str] = set()
    for root in roots:
        for info in storage.list(root):
            if info.uri in seen:
                continue
            seen.add(info.uri)
            if any(info.uri.startswith(p) for p in preserved):
                keep.append({"uri": info.uri, "reason": "preserved evidence: never deleted"})
            elif info.uri.startswith(export_root):
                delete.append(
                    {
                        "uri": info.uri,
                        "size": info.size,
                        "crc32c": crc32c_of(storage, info),
                        "generation": info.generation,
                    }
                )
            else:
                keep.append({"uri": info.uri, "reason": f"outside the granted artifact (step {grant.step})"})
    return {
        "run_id": record.run_id,
        "grant_id": grant.grant_id,
        "made_at": now.isoformat(),
        "destination": grant.destination,
        "export": export_uri,
        "delete": delete,
        "delete_bytes": sum(d["size"] for d in delete),
        "keep": keep,
    }


def execute(storage: Storage, plan: dict[str, Any]) -> tuple[list[str], list[str], int]:
    """(deleted, kept-because-changed, bytes). Safe to run again: gone objects count as deleted."""
    deleted: list[str] = []
    changed: list[str] = []
    reclaimed = 0
    for entry in plan["delete"]:
        info = storage.stat(entry["uri"])
        if info is None:
            deleted.append(entry["uri"])
            reclaimed += entry["size"]
            continue
        want = Expected(size=entry["size"], crc32c=entry["crc32c"])
        # Content identity, not mtimes (the plan's clock and the storage's clock differ); GCS adds the generation.
        rewritten = entry.get("generation") is not None and info.generation != entry["generation"]
        if rewritten or mismatch(storage, entry["uri"], want) is not None:
            changed.append(entry["uri"])  # written after the plan was made: not ours to delete
            continue
        storage.delete(entry["uri"])
        deleted.append(entry["uri"])
        reclaimed += entry["size"]
    return deleted, changed, reclaimed


def reclaim(
    storage: Storage,
    record: CompletionRecord,
    layout: RunLayout,
    grant: Grant,
    now: datetime,
    on_plan: Callable[[str, dict[str, Any]], None],
) -> Outcome:
    """Verify, plan, record the plan (on_plan), delete. A redelivery after a crash resumes the written plan."""
    if not record.preserved_locations:
        return refuse(Refusal.record_not_eligible, "the run has no preserved location to keep the reclaim plan in")
    uri = plan_uri(record, grant)
    existing = storage.stat(uri)
    if existing is not None:
        plan = json.loads(storage.read_bytes(uri))
    else:
        candidate, refused = artifact.resolve(storage, record, grant)
        if refused:
            return refused
        assert candidate is not None
        export = artifact.listing(storage, candidate.uri)
        refused = verify_destination(storage, grant, export)
        if refused:
            return refused
        plan = make_plan(storage, record, layout, grant, candidate.uri, now)
        if (
            storage.write_if_absent(uri, json.dumps(plan, indent=1).encode(), "application/json")
            is WriteOutcome.conflict
        ):
            plan = json.loads(storage.read_bytes(uri))  # a concurrent worker wrote it first: follow that plan
    on_plan(uri, plan)
    deleted, changed, reclaimed = execute(storage, plan)
    result = {"plan": uri, "deleted": deleted, "kept_changed_after_plan": changed, "reclaimed_bytes": reclaimed}
    result_uri = uri.removesuffix(".json") + "-result.json"
    storage.write_if_absent(result_uri, json.dumps(result, indent=1).encode(), "application/json")
    return Outcome(
        state="reclaimed",
        destination=grant.destination,
        verified_objects=len(plan["delete"]),
        uri=result_uri,
        reclaimed_bytes=reclaimed,
        detail=f"deleted {len(deleted)} of {len(plan['delete'])} planned objects; kept {len(plan['keep'])}"
        + (f"; {len(changed)} changed after the plan and were kept" if changed else "")
        + f"; plan {uri}",
    )
