"""Export grants: run a checkpoint's owed Hugging Face export on the run's controller (docs/authority.md §9).

rlcleanup never converts weights. An `export` grant names a step whose export is owed (a `convertible` candidate:
its `hf_export_request.json` is not complete and `policy/` holds nothing) and pins the request's bytes (its digest is
sha256 of the file as read when the grant was signed). Carrying it out (`plan_export`, which the preview runs too):

1. the request is read again and its sha256 compared with the grant's (`wrong_digest`: edited since);
2. it is validated against upstream's schema (formats/export_request_schema.py: all three versions, unknown keys
   refused, so a request cannot name a command or a script) and must be about this step, sit in the checkpoint it
   names, and export to the grant's destination, which is one of the run's own roots (`request_invalid`,
   `not_allowed`); a model source that is a URI or a path must lie under RLCLEANUP_EXPORT_ALLOWED_PREFIXES;
3. the command is the deployment's converter (RLCLEANUP_EXPORT_CONVERTER, never the run's) followed by upstream's
   `++checkpoint_export.*` overrides from the validated fields, an argv list; the request's Hub repo is not passed
   (the job would publish outside any grant: the new export is published by a publish grant once it validates);
4. the expiry preflight: the checkpoint's bytes over the export throughput (the median measured for the run's
   model size, else a stated default: authority/export_throughput.py) plus a margin must end before the
   checkpoint's first object expires (its backend's lifecycle rule, steps/expiry.py), else `expires_too_soon` with
   the numbers and the exact preserve grant to run instead. Once a preserve grant copied the checkpoint to durable
   storage (authority/preserve.py), the job reads that copy and the preflight lists it: no expiry;
5. the job is submitted through the controller port (`ExportSubmitter`) under a submission id derived from the grant,
   so a redelivery finds the job it already submitted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rlcleanup.authority.export_throughput import ListsRuns, Throughput, for_record
from rlcleanup.authority.grants import Grant, Refusal, real_location
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.authority.preserve import preserved_copy
from rlcleanup.formats.export_request_schema import (
    RequestSchemaError,
    RequestStatus,
    UpstreamRequest,
    converter_overrides,
    model_source,
    validate_request,
)
from rlcleanup.models.export_jobs import ExportJob, PreservedCheckpoint
from rlcleanup.models.record import Candidate, CompletionRecord
from rlcleanup.models.vocab import CandidateState
from rlcleanup.ports.controllers import ExportJobSpec, ExportSubmitter, SubmittedJob
from rlcleanup.ports.storage import Storage
from rlcleanup.settings import ExportSettings
from rlcleanup.steps.deferred_export import preserve_grant_command
from rlcleanup.steps.expiry import earliest_of, stamp
from rlcleanup.uris import basename, join, parent, within

REQUEST_CAP = 64 * 1024  # a request is a few hundred bytes; anything larger is not one
EXPORT_METADATA_RUN, EXPORT_METADATA_STEP, EXPORT_METADATA_GRANT = (
    "rlcleanup_export_of",  # never rlcleanup_run_uri: the sweep must not read the export job's end as the run's
    "rlcleanup_export_step",
    "rlcleanup_grant",
)


def preserve_alternative(run_id: str, step: int) -> str:
    """What an `expires_too_soon` refusal offers instead: the preserve grant that copies the checkpoint to durable
    storage server-side, after which the same export grant reads the copy."""
    return (
        f"copy the checkpoint server-side to durable storage first with a preserve grant, "
        f"`{preserve_grant_command(run_id, step)}` (then without --dry-run), then grant the export again: it reads "
        "the preserved copy, which no lifecycle rule expires"
    )


def request_digest(data: bytes) -> str:
    """What an export grant pins: sha256 of the request file's bytes as read."""
    return hashlib.sha256(data).hexdigest()


def submission_id(grant: Grant) -> str:
    """The job's id at the controller, from the grant alone: every delivery of one grant names the same job."""
    return f"rlcleanup-export-{grant.step}-{hashlib.sha256(grant.grant_id.encode()).hexdigest()[:24]}"


@dataclass(frozen=True)
class ExportPlan:
    """What an export grant submits, and the numbers its preflight compared."""

    candidate: Candidate
    request_uri: str
    request: UpstreamRequest
    job: ExportJobSpec
    controller: str
    submitter: ExportSubmitter
    checkpoint_bytes: int
    needs_seconds: float
    expires_at: datetime | None
    notes: list[str]
    throughput: Throughput
    checkpoint: str  # what the job converts: the request's checkpoint, or its preserved copy
    planned_at: datetime  # submitted in the same invocation: a measured duration starts here

    def preview(self) -> dict[str, Any]:
        return {
            "step": self.candidate.step,
            "request": self.request_uri,
            "request_status": self.request.status.value,
            "export_path": self.request.export_path,
            "controller": self.controller,
            "job_id": self.job.submission_id,
            "argv": list(self.job.argv),
            "checkpoint": self.checkpoint,
            "checkpoint_bytes": self.checkpoint_bytes,
            "throughput": self.throughput.as_doc(),
            "needs_seconds": round(self.needs_seconds),
            "checkpoint_expires_at": stamp(self.expires_at) if self.expires_at else None,
            "notes": self.notes,
        }

    def record_job(self, submitted: SubmittedJob, digest: str) -> ExportJob:
        """The job as the record keeps it: what its controller reported (the fields of the same names: controller,
        id, state, exit code, message), the command planned, the digest signed, and what a measurement divides."""
        return ExportJob(
            **submitted.model_dump(include=set(ExportJob.model_fields)),
            argv=list(self.job.argv),
            request_digest=digest,
            submitted_at=self.planned_at,
            bytes=self.checkpoint_bytes,
        )


def _owed(record: CompletionRecord, grant: Grant) -> Candidate | Outcome:
    candidate = next((c for c in record.candidates if c.step == grant.step), None)
    if candidate is None or candidate.export_request is None:
        return refuse(Refusal.no_candidate, f"run {record.run_id} has no export request at step {grant.step}")
    if candidate.state is not CandidateState.convertible:
        why = (
            f"step {grant.step}'s export is not owed: its candidate is {candidate.state.value} (an export grant runs "
            "only a requested export that never ran, on a committed checkpoint)"
        )
        return refuse(Refusal.not_applicable, why, grant.destination)
    return candidate


def _read_request(storage: Storage, uri: str, grant: Grant) -> UpstreamRequest | Outcome:
    try:
        data = storage.read_bytes(uri, REQUEST_CAP)
    except FileNotFoundError:
        return refuse(Refusal.no_candidate, f"{_named(uri)} is gone", grant.destination)
    except ValueError as exc:
        return refuse(Refusal.request_invalid, f"{_named(uri)}: {exc}", grant.destination)
    if request_digest(data) != grant.digest:
        why = (
            f"{uri} changed since the grant was signed: sha256 {request_digest(data)}, the grant pinned {grant.digest}"
        )
        return refuse(Refusal.wrong_digest, why, grant.destination)
    try:
        return validate_request(json.loads(data))
    except (ValueError, RequestSchemaError) as exc:  # JSONDecodeError is a ValueError
        return refuse(Refusal.request_invalid, f"{_named(uri)}: {str(exc)[:1500]}", grant.destination)


def _named(uri: str) -> str:
    """A request as a refusal names it: by its checkpoint (the file's own name reads like a Hub token to the
    credential redaction every refusal detail goes through)."""
    return f"the export request of {parent(uri)}"


def _same(a: str, b: str) -> bool:
    return real_location(a.rstrip("/")) == real_location(b.rstrip("/"))


def _paths_refusal(
    record: CompletionRecord, grant: Grant, uri: str, request: UpstreamRequest, settings: ExportSettings
) -> Outcome | None:
    """The request is about this step, sits in the checkpoint it names, exports where the grant says into the run's
    own roots, and takes its model from an allowed place."""
    dest = grant.destination
    if request.step != grant.step:
        return refuse(Refusal.request_invalid, f"{_named(uri)} is for step {request.step}, not {grant.step}", dest)
    if request.status is RequestStatus.complete:
        return refuse(Refusal.not_applicable, f"{_named(uri)} already reads complete: nothing is owed", dest)
    if not _same(request.checkpoint_path, parent(uri)):
        why = f"{_named(uri)} names checkpoint_path {request.checkpoint_path}, not the checkpoint it sits in ({parent(uri)})"
        return refuse(Refusal.not_allowed, why, dest)
    base = getattr(request, "checkpoint_base_path", None)
    if base is not None and not _same(base, parent(request.checkpoint_path)):
        return refuse(Refusal.not_allowed, f"checkpoint_base_path {base} does not hold {request.checkpoint_path}", dest)
    if dest is None or not _same(request.export_path, dest):
        why = f"{_named(uri)} exports to {request.export_path}; the grant's destination is {dest}"
        return refuse(Refusal.not_allowed, why, dest)
    roots = tuple(real_location(r) for r in (record.run_uri, record.temp_root) if r)
    if not within(real_location(request.export_path), roots):
        why = f"export_path {request.export_path} is outside the run's roots {list(roots)}"
        return refuse(Refusal.not_allowed, why, dest)
    allowed = tuple(real_location(p) for p in settings.allowed_prefixes or ())
    for field, value in (("model_source_uri", model_source(request)), ("model_path", request.model_path)):
        if value and ("://" in value or value.startswith("/")) and not within(real_location(value), allowed):
            why = (
                f"{field} {value} is outside the allowed model sources {list(allowed)} "
                "(RLCLEANUP_EXPORT_ALLOWED_PREFIXES)"
            )
            return refuse(Refusal.not_allowed, why, dest)
    return None


def _preflight(
    storage: Storage,
    checkpoint: str,
    settings: ExportSettings,
    now: datetime,
    grant: Grant,
    throughput: Throughput,
    run_id: str,
) -> tuple[int, float, datetime | None] | Outcome:
    """(bytes, seconds the export needs, the checkpoint's first expiry), or the refusal naming the numbers and the
    preserve grant to run instead."""
    objects = list(storage.list(checkpoint))
    size = sum(o.size for o in objects)
    needs = size / throughput.bytes_per_second + settings.margin_seconds
    expires = earliest_of(objects)
    if expires is not None and now + timedelta(seconds=needs) > expires:
        left = max(0.0, (expires - now).total_seconds())
        why = (
            f"the checkpoint {checkpoint} ({size} bytes) expires at {stamp(expires)}, in {left:.0f} s; the export needs "
            f"about {needs:.0f} s ({size} B / {throughput.bytes_per_second:.0f} B/s, {throughput.describe()}, "
            f"+ {settings.margin_seconds:.0f} s margin): it cannot finish in time. Instead: "
            f"{preserve_alternative(run_id, grant.step or 0)}"
        )
        return refuse(Refusal.expires_too_soon, why, grant.destination)
    return size, needs, expires


def _preserved(storage: Storage, copy: PreservedCheckpoint, dest: str | None) -> Outcome | None:
    """The preserved copy still holds what the preserve grant verified (every name at its size, and its CRC32C/MD5
    where the listing gives one, as a hand-off's twin is checked), or the refusal: the destination is the
    approver's team's to write, so what it holds is checked again before a job reads it."""
    root = copy.destination.rstrip("/")
    held = {o.uri[len(root) + 1 :]: o for o in storage.list(root)}

    def changed(name: str, size: int, crc32c: str | None, md5: str | None) -> bool:
        now = held.get(name)
        return (
            now is None
            or now.size != size
            or bool(crc32c and now.crc32c and now.crc32c != crc32c)
            or bool(md5 and now.md5 and now.md5 != md5)
        )

    altered = [o.name for o in copy.objects if changed(o.name, o.size, o.crc32c, o.md5)]
    if altered:
        why = f"the preserved copy {copy.destination} no longer holds what was preserved: {altered[:5]}"
        return refuse(Refusal.destination_altered, why, dest)
    return None


Submitters = Callable[[str], ExportSubmitter | None]  # a controller's name -> its submitter (None: not configured)


@dataclass(frozen=True)
class ExportContext:
    """What an export plan needs beyond the storage, the record and the grant, the same for the grant and its
    preview: the deployment's export settings, its controllers, and the records store whose measured exports give
    the throughput the preflight estimates with (export_throughput.for_record)."""

    settings: ExportSettings
    submitters: Submitters
    records: ListsRuns


def plan_export(
    storage: Storage, record: CompletionRecord, grant: Grant, context: ExportContext, now: datetime
) -> ExportPlan | Outcome:
    """Every check the grant runs, in order (module docstring); nothing is written or submitted."""
    settings = context.settings
    dest = grant.destination
    if not settings.converter:
        return refuse(Refusal.not_allowed, "no export converter is configured (RLCLEANUP_EXPORT_CONVERTER)", dest)
    if not settings.controller:
        why = "no controller runs export jobs in this deployment (RLCLEANUP_EXPORT_CONTROLLER, e.g. ray)"
        return refuse(Refusal.no_controller, why, dest)
    submitter = context.submitters(settings.controller)
    if submitter is None:
        configured_by = "for ray: RLCLEANUP_RAY_DASHBOARD; for iris: RLCLEANUP_IRIS_URL"
        why = f"the run's controller {settings.controller} is not configured here ({configured_by})"
        return refuse(Refusal.no_controller, why, dest)
    candidate = _owed(record, grant)
    if isinstance(candidate, Outcome):
        return candidate
    assert candidate.export_request is not None
    uri = candidate.export_request.uri
    copy = preserved_copy(record.authority_actions, grant.step) if grant.step is not None else None
    if copy is not None:  # a preserve grant copied it to durable storage: the job reads the copy
        altered = _preserved(storage, copy, dest)
        if altered is not None:
            return altered
    # The request as the preserved copy holds it (the same bytes: the digest says so) outlives the original.
    request = _read_request(storage, join(copy.destination, basename(uri)) if copy else uri, grant)
    if isinstance(request, Outcome):
        return request
    refused = _paths_refusal(record, grant, uri, request, settings)
    if refused is not None:
        return refused
    checkpoint, notes = request.checkpoint_path, []
    if copy is not None:
        checkpoint = copy.destination
        notes.append(f"the job reads the preserved copy {checkpoint} (a preserve grant copied {copy.source})")
    throughput = for_record(context.records, record, settings)  # listed only once the cheap checks pass
    timing = _preflight(storage, checkpoint, settings, now, grant, throughput, record.run_id)
    if isinstance(timing, Outcome):
        return timing
    if request.hf_hub_repo_id:
        notes.append(
            f"the request names Hub repo {request.hf_hub_repo_id}: not passed to the job (it would publish outside "
            "any grant); publish the validated export with a publish grant"
        )
    if request.status is RequestStatus.in_progress:
        notes.append(f"the request reads in_progress ({request.attempts} attempt(s)): an earlier job may still run")
    argv = (*settings.converter, *converter_overrides(request, hub_repo_id=None, checkpoint_path=checkpoint))
    metadata = {
        EXPORT_METADATA_RUN: record.run_id,
        EXPORT_METADATA_STEP: str(request.step),
        EXPORT_METADATA_GRANT: grant.grant_id,
    }
    job = ExportJobSpec(submission_id=submission_id(grant), argv=argv, metadata=metadata)
    size, needs, expires = timing
    return ExportPlan(
        candidate, uri, request, job, settings.controller, submitter, size, needs, expires, notes,
        throughput, checkpoint, planned_at=now,
    )  # fmt: skip


def submit(plan: ExportPlan, grant: Grant) -> Outcome:
    """Submit the planned job once (a redelivery finds it: `already`); the outcome carries the typed job."""
    submitted = plan.submitter.submit(plan.job)
    job = plan.record_job(submitted, grant.digest or "")
    said = "already submitted" if submitted.already else "submitted"
    detail = f"export job {job.job_id} {said} to {job.controller} ({job.state}) for step {plan.candidate.step}"
    return Outcome(
        state="submitted",
        destination=grant.destination,
        detail=detail,
        uri=plan.request_uri,
        export_job=job.model_dump(mode="json"),
    )


class ExportTargetError(ValueError):
    """Why `grant --action export` signs nothing; `exit_code` as the CLI's other refusals (2 usage, 1 not found, 3
    refused)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def export_target(
    storage: Storage, record: CompletionRecord, step: int | None, digest: str | None, destination: str | None
) -> tuple[int, str, str]:
    """(step, the request's digest, where it exports) for a new export grant: the step must be named and its
    request is read now; the grant pins those bytes (a later edit is refused `wrong_digest` when carried out)."""
    if step is None:
        owed = [c.step for c in record.candidates if c.state is CandidateState.convertible]
        raise ExportTargetError(f"an export grant needs --step N (owed exports: {owed or 'none'})", 2)
    candidate = next((c for c in record.candidates if c.step == step), None)
    if candidate is None or candidate.export_request is None:
        raise ExportTargetError(f"run {record.run_id!r} has no export request at step {step}", 1)
    uri = candidate.export_request.uri
    try:
        found = request_digest(storage.read_bytes(uri, REQUEST_CAP))
    except (OSError, ValueError) as exc:
        raise ExportTargetError(f"cannot read {uri}: {exc}", 1) from exc
    if digest is not None and digest != found:
        raise ExportTargetError(f"{uri} has sha256 {found} now, not --digest {digest}: nothing was signed", 3)
    dest = destination or candidate.export_request.export_path
    if not dest:
        raise ExportTargetError(f"{uri} names no export_path: pass --destination", 2)
    return step, found, dest
