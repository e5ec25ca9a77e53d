"""Reclaim: delete the source copy of a published artifact, one object at a time, each only right after its
destination twin is re-verified.

- The plan lives in the record store (`runs/{run}/reclaim_plans/{grant}`), never in a bucket: a file planted in
  the preserved location or the destination is never read as a plan. It is derived only from the record and the
  record store: the granted candidate (its digest re-checked against the objects as they are now, so their
  versions are the validated ones) and the proofs the publish filed on its grant (per object: the pinned source
  version and what arrived at the destination — generation + checksums, or the SHA-256 of every byte).
- A plan may name only objects under the granted export (`exports/global_step_<step>/policy/`), never preserved
  evidence or anything under the deployment's preserve root; it is checked against these rules when made and again
  on every attempt, so a plan edited in the store is refused (`plan_rejected`) before anything is deleted.
- Execution, on every attempt including resumes: for each object, the destination twin is re-verified now
  (generation + checksums on GCS, SHA-256 of the bytes elsewhere), then the source is deleted only if it is still
  the pinned version (GCS: `if_generation_match`). A twin that fails stops the reclaim (`destination_altered`)
  with the source kept. An object already gone counts as deleted; one rewritten since the plan is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from rlcleanup.authority import artifact, ledger, quarantine, retention
from rlcleanup.authority.grants import Action, Grant, GrantState, Refusal
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.pinning import CopyProof, twin_mismatch
from rlcleanup.authority.publish import read_marker
from rlcleanup.models.documents import Document
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.collections import RECLAIM_PLANS, reclaim_results
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import ListsIncompleteUploads, ObjectInfo, SourceChangedError, Storage, anchored_to
from rlcleanup.settings import QuarantineSettings, read

MAX_KEEP_LISTED = 500  # the store's documents are bounded; the count of everything kept is always exact


class PlanEntry(Document):
    uri: str
    name: str
    size: int = Field(ge=0)
    source_fingerprint: str
    source_generation: int | None = None
    twin: CopyProof


class KeepEntry(Document):
    uri: str
    reason: str


class UploadEntry(Document):
    key_uri: str
    upload_id: str
    bytes: int = 0
    parts: int = 0
    initiated: datetime | None = None
    abort: bool = False  # under the granted export: aborted by this reclaim


class ReclaimPlan(Document):
    run_id: str
    grant_id: str
    publish_grant_id: str
    made_at: datetime
    destination: str
    export: str
    delete: list[PlanEntry]
    delete_bytes: int
    keep: list[KeepEntry]
    keep_count: int
    step: int | None = None
    digest: str | None = None
    refused: list[KeepEntry] = Field(default_factory=list)  # objects the retention plan would not let go, with why
    retention: list[str] = Field(default_factory=list)  # the retention plan in words (authority/retention.py)
    # Incomplete multipart uploads under the run's roots (invisible to listings): shown; those under the granted
    # export (an interrupted upload of its files) are aborted by this reclaim, the rest only listed.
    incomplete_uploads: list[UploadEntry] = Field(default_factory=list)
    quarantine: str | None = None  # where the moved objects go (the deployment's prefix) and for how long
    protection: str | None = None  # which mechanism protects what is removed (quarantine, a bucket's soft delete)


# The fields of a plan's result that a reclaim's Outcome reports as they are.
EXECUTED = {"reclaimed_bytes", "deleted", "kept_changed", "quarantined"}


class PlanResult(BaseModel):
    deleted: list[str] = Field(default_factory=list)
    kept_changed: list[str] = Field(default_factory=list)
    quarantined: list[str] = Field(default_factory=list)  # where each moved object is now, until expiry
    aborted_uploads: list[str] = Field(default_factory=list)  # incomplete multipart uploads aborted (their ids)
    reclaimed_bytes: int = 0
    stopped: str | None = None  # why execution stopped before the end (a twin failed re-verification)


def _under(uri: str, root: str) -> bool:
    root = root.rstrip("/")
    return uri.startswith(root + "/")


def plan_problem(plan: ReclaimPlan, record: CompletionRecord, grant: Grant, preserve_root: str | None) -> str | None:
    """Why this plan must not run (None: it may). Checked when it is made and before every attempt."""
    if plan.run_id != record.run_id or plan.grant_id != grant.grant_id:
        return "the plan belongs to another run or grant"
    candidate = next((c for c in record.candidates if c.step == grant.step), None)
    if candidate is None or candidate.uri.rstrip("/") != plan.export.rstrip("/"):
        return f"the plan's export {plan.export} is not the record's candidate at step {grant.step}"
    if not candidate.uri.rstrip("/").endswith(f"global_step_{grant.step}/policy"):
        return f"the candidate {candidate.uri} is not an export directory"
    if (plan.destination or "").rstrip("/") != (grant.destination or "").rstrip("/"):
        return "the plan's destination is not the grant's"
    evidence = [*record.preserved_locations, *([preserve_root] if preserve_root else [])]
    for entry in plan.delete:
        if any(seg in {"..", "."} for seg in entry.uri.split("/")[3:]) or "\x00" in entry.uri:
            return f"{entry.uri}: not a plain object name"
        if not _under(entry.uri, plan.export):
            return f"{entry.uri} is outside the granted export {plan.export}"
        if any(_under(entry.uri, root) or entry.uri == root.rstrip("/") for root in evidence):
            return f"{entry.uri} is preserved evidence"
        if not entry.twin.destination.startswith(plan.destination.rstrip("/") + "/"):
            return f"{entry.uri}: its twin {entry.twin.destination} is outside the destination"
    return None


def _published_twins(
    records: RunRecords, record: CompletionRecord, grant: Grant
) -> tuple[str, dict[str, dict[str, Any]]] | None:
    """(publish grant id, twins by name) of a completed publish of this digest to this destination, from the
    record store (where the publish filed its proofs), never from files at the destination. A publish that no
    longer applies to the record (its candidate was re-derived with other bytes) proves nothing for it."""
    dest = (grant.destination or "").rstrip("/")
    no_longer = {s.grant_id for s in record.superseded_grants}
    for gid, doc in ledger.list_grants(records, grant.run_id):
        body, out = doc.body, doc.result
        if (
            gid not in no_longer
            and doc.state is GrantState.used
            and body.get("action") in {Action.publish.value, Action.handoff.value}
            and body.get("digest") == grant.digest
            and body.get("step") == grant.step
            and (out.get("destination") or "").rstrip("/") == dest
            and isinstance(out.get("twins"), list)
        ):
            return gid, {t["name"]: t for t in out["twins"] if isinstance(t, dict) and "name" in t}
    return None


def make_plan(
    storage: Storage,
    records: RunRecords,
    record: CompletionRecord,
    grant: Grant,
    now: datetime,
    quarantine_settings: QuarantineSettings | None = None,
) -> ReclaimPlan | Outcome:
    """`quarantine_settings`: the deployment's (read once at cold start); None: read from the environment now (a command)."""
    dest = (grant.destination or "").rstrip("/")
    # digest == versions, now (a byte-exact restore's versions read as the validated ones they replaced)
    restored = quarantine.restored_versions(records, record.run_id, grant.step, grant.digest)
    candidate, export, refused = artifact.resolve_pinned(storage, record, grant, restored)
    if refused:
        return refused
    assert candidate is not None
    marker = read_marker(storage, dest)
    if marker is None or marker.get("digest") != grant.digest or marker.get("step") != grant.step:
        what = f"step {grant.step} ({grant.digest})"
        return refuse(Refusal.destination_unverified, f"{dest} carries no completed publish of {what}", dest)
    published = _published_twins(records, record, grant)
    if published is None:
        return refuse(Refusal.destination_unverified, f"no publish of {grant.digest} to {dest} is recorded", dest)
    publish_gid, twins = published
    delete: list[PlanEntry] = []
    for name, info in sorted(export.items()):
        twin = twins.get(name)
        if twin is None or twin.get("source_fingerprint") != artifact.validated_version(info, restored):
            return refuse(Refusal.destination_unverified, f"{name}: this version was not published to {dest}", dest)
        proof = CopyProof.model_validate(twin["proof"])
        problem = twin_mismatch(storage, proof)
        if problem:
            return refuse(Refusal.destination_altered, f"destination re-verification failed: {problem}", dest)
        delete.append(
            PlanEntry(
                uri=info.uri,
                name=name,
                size=info.size,
                # The version there now: the published one, or the one a byte-exact restore put back for it.
                source_fingerprint=info.fingerprint or twin["source_fingerprint"],
                source_generation=info.generation if info.generation is not None else twin.get("source_generation"),
                twin=proof,
            )
        )
    listed = _listed(storage, record)
    kept_by = retention.make_retention(
        record, retention.checkpoint_steps(listed, record), retention.declared_max_ckpts(storage, record)
    )
    held_back: list[KeepEntry] = []
    for entry in list(delete):
        why = retention.protection(entry.uri, kept_by, record, grant.step)
        if why.blocks_reclaim:  # a "best" never evicts the resume point, an owed export, evidence
            held_back.append(KeepEntry(uri=entry.uri, reason=f"refused: {why.reason}"))
            delete.remove(entry)
    planned = {d.uri for d in delete}
    keep: list[KeepEntry] = []
    count = 0
    for info in listed:
        if info.uri in planned:
            continue
        count += 1
        if len(keep) < MAX_KEEP_LISTED:
            keep.append(KeepEntry(uri=info.uri, reason=retention.protection(info.uri, kept_by, record, None).reason))
    settings = quarantine_settings or read(QuarantineSettings)
    uploads = [
        UploadEntry(
            key_uri=u.key_uri,
            upload_id=u.upload_id,
            bytes=u.bytes,
            parts=u.parts,
            initiated=u.initiated,
            abort=_under(u.key_uri, candidate.uri),
        )
        for root in [record.run_uri, *([record.temp_root] if record.temp_root else [])]
        for u in (storage.incomplete_uploads(root) if isinstance(storage, ListsIncompleteUploads) else [])
    ][:MAX_KEEP_LISTED]
    return ReclaimPlan(
        incomplete_uploads=uploads,
        run_id=record.run_id,
        grant_id=grant.grant_id,
        publish_grant_id=publish_gid,
        made_at=now,
        destination=dest,
        export=candidate.uri,
        delete=delete,
        delete_bytes=sum(d.size for d in delete),
        keep=keep,
        keep_count=count,
        step=grant.step,
        digest=grant.digest,
        refused=held_back,
        retention=kept_by.reasons(),
        quarantine=f"{quarantine.quarantine_root(candidate.uri, record.run_uri, settings)}/{record.run_id}/"
        f"{grant.grant_id}/ for {settings.days} days",
        protection=quarantine.protection(storage, candidate.uri),
    )


def _listed(storage: Storage, record: CompletionRecord) -> list[ObjectInfo]:
    """The roots classification checked (the record's), listed now: what is kept is what the run holds today."""
    seen: dict[str, ObjectInfo] = {}
    for root in [record.run_uri, *([record.temp_root] if record.temp_root else [])]:
        for info in storage.list(root):
            seen.setdefault(info.uri, info)
    return list(seen.values())


def execute(
    storage: Storage,
    plan: ReclaimPlan,
    *,
    records: RunRecords,
    record: CompletionRecord,
    now: datetime,
    settings: QuarantineSettings | None = None,
) -> PlanResult:
    """Each object: re-verify its twin now, then move it into quarantine if it is still the pinned version (the
    move re-checks the pin at the copy and again right before the source's delete). Safe to re-run."""
    settings = settings or read(QuarantineSettings)
    result = PlanResult()
    for entry in plan.delete:
        info = storage.stat(entry.uri)
        if info is None:  # moved by an earlier attempt
            result.deleted.append(entry.uri)
            result.reclaimed_bytes += entry.size
            continue
        if info.fingerprint != entry.source_fingerprint or (
            entry.source_generation is not None and info.generation != entry.source_generation
        ):
            result.kept_changed.append(entry.uri)  # rewritten after the plan: not the bytes that were published
            continue
        problem = twin_mismatch(storage, entry.twin)
        if problem:
            result.stopped = f"{entry.name}: destination twin failed re-verification: {problem}"
            return result
        try:
            moved = quarantine.move(
                storage, records, record, plan.grant_id, info, now, settings, step=plan.step, digest=plan.digest
            )
        except SourceChangedError:
            result.kept_changed.append(entry.uri)
            continue
        result.deleted.append(entry.uri)
        result.quarantined.append(moved.quarantine)
        result.reclaimed_bytes += entry.size
    for upload in plan.incomplete_uploads:
        # Parts of an upload never completed hold no object to quarantine: aborting is the only reclaim there is,
        # and only for uploads under the export this grant names (re-checked here against the plan's export).
        ours = upload.abort and _under(upload.key_uri, plan.export)
        if (
            ours
            and isinstance(storage, ListsIncompleteUploads)
            and storage.abort_incomplete_upload(upload.key_uri, upload.upload_id)
        ):
            result.aborted_uploads.append(upload.upload_id)
            result.reclaimed_bytes += upload.bytes
    return result


def reclaim(
    storage: Storage,
    records: RunRecords,
    record: CompletionRecord,
    grant: Grant,
    now: datetime,
    on_plan: Callable[[str, ReclaimPlan], None],
    preserve_root: str | None = None,
    quarantine_settings: QuarantineSettings | None = None,
) -> Outcome:
    """Plan (or resume the stored plan), record it (on_plan), then delete twin-verified objects one by one.

    Every local path it reads, moves or deletes is walked without following a link from the roots it may touch
    (the run's bucket, which holds the quarantine, the record's roots and preserved evidence, the grant's
    destination): a symlink planted anywhere on a path (`_rlcleanup-quarantine` beside the run root, a directory
    of the export) refuses the reclaim (UnsafePathError, `apply_failed`) before the object is copied or deleted."""
    roots = [
        *quarantine.local_anchors(record),
        *record.preserved_locations,
        *([preserve_root] if preserve_root else []),
        *([grant.destination] if grant.destination else []),
    ]
    with anchored_to(storage, roots) as held_storage:
        plans = RECLAIM_PLANS.bind(records, record.run_id, ReclaimPlan)
        try:
            plan = plans.get(grant.grant_id)
            if plan is None:
                made = make_plan(held_storage, records, record, grant, now, quarantine_settings)
                if isinstance(made, Outcome):
                    return made
                problem = plan_problem(made, record, grant, preserve_root)
                if problem:
                    return refuse(Refusal.plan_rejected, problem, grant.destination)
                # A concurrent worker may have stored its plan first: follow that one.
                plan = made if plans.put(grant.grant_id, made, only_if_absent=True) else plans.get(grant.grant_id)
        except ValueError as exc:
            return refuse(Refusal.plan_rejected, f"the stored plan is not a plan: {exc}"[:500], grant.destination)
        if plan is None:  # stored by another worker, then removed (`forget`) before this one read it
            return refuse(Refusal.plan_rejected, "the stored plan is gone", grant.destination)
        problem = plan_problem(plan, record, grant, preserve_root)  # on every attempt, resumes included
        if problem:
            return refuse(Refusal.plan_rejected, problem, grant.destination)
        plan_ref = f"{plans.path}/{grant.grant_id}"
        on_plan(plan_ref, plan)
        result = execute(held_storage, plan, records=records, record=record, now=now, settings=quarantine_settings)
        reclaim_results(grant.grant_id).bind(records, record.run_id, PlanResult).put(now.isoformat(), result)
        summary = (
            f"deleted {len(result.deleted)} of {len(plan.delete)} planned objects (moved to quarantine "
            f"{plan.quarantine}: `rlcleanup restore {record.run_id}` puts them back); kept {plan.keep_count}"
            + (f"; refused {len(plan.refused)} the retention plan keeps" if plan.refused else "")
            + (f"; {len(result.kept_changed)} changed after the plan and were kept" if result.kept_changed else "")
            + f"; plan {plan_ref}"
        )
        if result.stopped:
            out = refuse(Refusal.destination_altered, f"{result.stopped}; {summary}", grant.destination)
            out.reclaimed_bytes = result.reclaimed_bytes
            out.deleted = result.deleted
            return out
        return Outcome(
            state="reclaimed",
            destination=grant.destination,
            verified_objects=len(plan.delete),
            uri=plan_ref,
            **result.model_dump(include=EXECUTED),  # what the execution did, under the outcome's own names
            detail=summary,
            refused_objects=[r.model_dump() for r in plan.refused],
        )
