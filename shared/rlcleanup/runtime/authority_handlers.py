"""Authority handlers: apply_grant, retry_waiting_grants, capture_pre_cancel.

Wiring and timing only: what each action does is authority/actions.py.

A grant is verified on arrival (signature, approver, scope, expiry) and filed under runs/{run}/grants/{id}.
When its record is not ready it waits as `pending` and record-ready retries it (re-verified then: it may have
expired meanwhile). Carrying it out is guarded by a claim on `grant:<id>`: exactly one worker applies it, a crash
releases the claim and a redelivery resumes, and any delivery after completion is refused as `replayed`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime

from rlcleanup.authority import announce, ledger, precancel, quarantine
from rlcleanup.authority.actions import GrantTask, carry_out
from rlcleanup.authority.grants import Action, Grant, GrantState, Refusal, verify
from rlcleanup.errors import ErrorKind, PermanentError, error_kind
from rlcleanup.models.claims import PRE_CANCEL, GrantApplied, PreCancelCaptured, ReproducingFailure
from rlcleanup.models.events import JobEvent
from rlcleanup.models.model_events import ModelEvent
from rlcleanup.models.record import CompletionRecord, PreCancelCapture
from rlcleanup.ports.bus import Bus
from rlcleanup.ports.controllers import JobController
from rlcleanup.ports.records import RunRecords
from rlcleanup.runtime import admission
from rlcleanup.runtime.claims import once_ran as _once_ran
from rlcleanup.runtime.claims import stored_under
from rlcleanup.runtime.evidence import refresh_report
from rlcleanup.runtime.guard import guarded_ports
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.topology import load_topology
from rlcleanup.steps.capture import preserved_root
from rlcleanup.steps.facts import location_run_id
from rlcleanup.steps.layout import RunLayout, discover
from rlcleanup.uris import join

# ---------------------------------------------------------------- apply


def apply_grant(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    """Verify, file on arrival (authority/ledger.py decides refused / replayed / pending), then apply; the run's
    report is re-rendered from the record the grant changed (runtime/evidence.py)."""
    answer, run_id = _apply_grant(p, data, attributes)
    if run_id is not None:
        refresh_report(p, run_id)
    return answer


def _apply_grant(p: Ports, data: bytes, attributes: dict[str, str]) -> tuple[str, str | None]:
    now = p.clock.now()
    verdict = verify(
        p.records,
        data,
        now,
        expected_run=attributes.get("run_id"),
        intended_action=attributes.get("intent"),
        deployment_prefixes=p.allowed_destination_prefixes,
        limits=p.settings.grant_limits,
    )
    if verdict.grant is None:
        raise PermanentError("invalid_grant", verdict.detail)
    admission = ledger.admit(p.records, verdict, data, attributes.get("run_id"), now)
    if admission.answer is not None:
        if verdict.authentic and _used_as_signed(p, verdict.grant.run_id, admission.gid, verdict.raw):
            # A redelivery of a grant already carried out: announce again (same event id). The worker that carried
            # it out may have died between filing the outcome and publishing, and this is the only delivery left.
            announce_grant(p, verdict.grant, admission.gid)
        return admission.answer, verdict.grant.run_id
    return _try_apply(p, verdict.grant, admission.gid), verdict.grant.run_id


def _used_as_signed(p: Ports, run_id: str, gid: str, raw: object) -> bool:
    """The grant filed under `gid` was carried out (`used`) and is exactly this signed grant (not another one
    reusing its id)."""
    doc = ledger.get_grant_doc(p.records, run_id, gid)
    return doc is not None and doc.state is GrantState.used and doc.grant == raw


def retry_waiting_grants(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    """record-ready (or a finished pre-cancel capture): re-verify and apply every pending grant of the run."""
    payload = json.loads(data)
    run_id = payload.get("run_id") if isinstance(payload, dict) else None
    if not isinstance(run_id, str):
        raise PermanentError("bad_input", "record-ready message without run_id")
    return _retry(p, run_id)


def _retry(p: Ports, run_id: str, *, record_changed: bool = False) -> str:
    """Re-verify and apply each pending grant; re-render the report only when the record changed (a grant
    processed, the grants' view rebuilt differently, or the caller's own change): the record-ready every finished
    record sends would otherwise redraw the report select-candidate has just written, to identical bytes."""
    outcomes: list[str] = []
    for gid, doc in ledger.pending(p.records, run_id):
        now = p.clock.now()
        verdict = verify(
            p.records,
            doc.message(),
            now,
            expected_run=run_id,
            deployment_prefixes=p.allowed_destination_prefixes,
            limits=p.settings.grant_limits,
        )
        if verdict.grant is None or verdict.refusal is not None:
            refusal = verdict.refusal or Refusal.malformed
            ledger.set_state(
                p.records, run_id, gid, ledger.state_for(refusal), now, refusal=refusal, detail=verdict.detail
            )
            outcomes.append(f"{gid}: {refusal.value}")
            continue
        outcomes.append(f"{gid}: {_try_apply(p, verdict.grant, gid)}")
    synced = ledger.sync_record(p.records, run_id)
    if outcomes or synced or record_changed:
        refresh_report(p, run_id)
    return "; ".join(outcomes) or "no waiting grants"


def _try_apply(p: Ports, grant: Grant, gid: str) -> str:
    run_id = grant.run_id
    record = p.records.get(run_id)
    capture: PreCancelCaptured | None = None
    waiting, shown = None, GrantState.pending.value  # why the grant cannot run yet, and the state it waits in
    if grant.action is Action.cancel and precancel.run_has_ended(record):
        pass  # no live run to cancel: carried out at once, where the action refuses it as run_ended
    elif grant.action is Action.cancel:  # a cancel waits for the pre-cancel capture, not for the record
        captures = list(stored_under(p, run_id, PRE_CANCEL, PreCancelCaptured).values())
        capture, why, shown = precancel.clearance(p.records, run_id, record.run_uri if record else None, captures)
        waiting = why if capture is None else None
    elif not ledger.is_ready(record):
        waiting = "waiting for the completion record"
    filing = ledger.grant_file(p.records, grant, gid, p.clock)
    if waiting is not None:
        return filing.wait(waiting, shown)

    def apply_once() -> GrantApplied:
        filing.applying()
        applied = carry_out(p, GrantTask(grant, gid, record, capture))  # a transient error releases the claim
        if isinstance(applied, dict):
            return GrantApplied.model_validate(applied)  # the job files the outcome; the grant stays `applying`
        filing.outcome(applied)
        announce_grant(p, grant, gid)  # inside the claim: a crash before it completes announces again, same id
        return GrantApplied.model_validate(applied.as_doc())

    ran = _once_ran(p, run_id, f"grant:{gid}", apply_once, model=GrantApplied)
    if ran.repeat:
        return filing.replay()
    filing.sync()
    result = ran.result
    return f"{grant.action.value}: {result.state}" + (f" ({result.refusal})" if result.refusal else "")


def announce_grant(p: Ports, grant: Grant, gid: str) -> str | None:
    """Tell downstream what the record now says the grant did (model-published / model-reclaimed on the grant
    functions' `announce` route); nothing when it did neither. The record is synced first: the event follows it.
    Returns the event's id (its dedupe key), or None."""
    ledger.sync_record(p.records, grant.run_id)
    record = p.records.get(grant.run_id)
    if record is None:
        return None
    event = announce.grant_event(
        record,
        grant,
        gid,
        p.clock.now(),
        project=p.settings.project,
        record_url=p.records.console_url(grant.run_id),
    )
    if event is None:
        return None
    publish_announcement(p.bus, event, p.topology.route("apply-grant", "announce"))
    return event.id


def restore_announcements(
    records: RunRecords, record: CompletionRecord, restored: list[str], at: datetime, project: str | None
) -> list[ModelEvent]:
    """The model-restored events of a restore that put `restored` back (one per reclaim grant it undid), read
    from the quarantine records the restore has just marked `restored`."""
    wanted = set(restored)
    entries = [
        e
        for _, e, _ in quarantine.entries(records, record.run_id)
        if e and e.state == "restored" and e.source in wanted
    ]
    grants = {gid: doc.body for gid, doc in ledger.list_grants(records, record.run_id)}
    url = records.console_url(record.run_id)
    return announce.restore_events(record, entries, grants, at, project=project, record_url=url)


def model_events_topic() -> str:
    """The topology's model-events topic (the grant functions' `announce` route)."""
    return load_topology().route("apply-grant", "announce")


def publish_announcement(bus: Bus, event: ModelEvent, topic: str | None = None) -> str:
    """Publish one model event on the model-events topic (`topic`: the one the caller's topology names, else the
    packaged one's); its message id."""
    return bus.publish(topic or model_events_topic(), event.message(), event.pubsub_attributes())


# ---------------------------------------------------------------- pre-cancel capture


def _admit_pre_cancel(p: Ports, event: JobEvent) -> tuple[str, RunLayout | None]:
    """The same admission as on-job-event's: the run in the run buckets, its config-named roots inside them, and
    its identity the one its location is (or is now) bound to. A live run whose layout cannot be read yet may be
    captured only under an id its location already holds, or under the id its location spells when nobody holds
    that: never under an id an event names (a finished run's, say)."""
    admission.check_in_run_buckets(p, event.run_uri)
    try:
        layout = discover(p.storage, event.run_uri)
    except Exception as exc:
        if error_kind(exc) is ErrorKind.transient:
            raise  # the storage did not answer: redelivered, never taken for a run without a readable layout
        layout = None  # a live run may not have a readable layout yet: capture what the controller says
    if layout is not None:
        return admission.admit_run(p, layout), layout
    bound = admission.bound_run_id(p, event.run_uri)
    run_id = bound or location_run_id(event.run_uri)
    admission.bind_run_identity(p, run_id, event.run_uri)  # a held id is refused as a conflict, nothing written
    return run_id, None


def capture_pre_cancel(p: Ports, event: JobEvent, attributes: dict[str, str]) -> str:
    if event.intent != "pre_cancel":
        raise PermanentError("bad_input", "capture-pre-cancel needs an event with intent: pre_cancel")
    root = admission.deployment_preserve_root(p, event)  # every check before any identity is bound
    run_id, layout = _admit_pre_cancel(p, event)
    dest = join(preserved_root(root, run_id), "pre-cancel", event.event_key[:16])

    def work() -> PreCancelCaptured:
        p.records.create_if_absent(CompletionRecord(run_id=run_id, run_uri=event.run_uri))
        result = precancel.capture(
            p.storage,
            p.records,
            layout,
            run_id,
            dest,
            _controller(p, event.source),
            event.job_id,
            sync_wait_seconds=p.settings.precancel_sync_wait_seconds,
        )
        means = [r.mean for r in result.ranks]
        summary = PreCancelCapture(
            capture_uri=result.capture_uri,
            controller_state=result.controller_state,
            ranks=len(result.ranks),
            min_mean_utilization=min(means) if means else None,
            copied_objects=len(result.copied),
            unexplained_reproducing=[r.signature for r in result.reproducing if not r.cause_recorded],
            problems=result.problems[:20],
            final_sync=result.final_sync,
            not_synced=result.not_synced[:100],
        )
        p.records.update(run_id, {"pre_cancel": summary.model_dump(mode="json")})
        return PreCancelCaptured(
            capture_uri=result.capture_uri,
            job_id=event.job_id,
            source=event.source,
            captured_at=p.clock.now().isoformat(),
            reproducing=[ReproducingFailure.model_validate(asdict(r)) for r in result.reproducing],
            run_uri=event.run_uri,
            layout_read=layout is not None,
        )

    fresh = not _once_ran(p, run_id, f"{PRE_CANCEL}{event.event_key}", work, model=PreCancelCaptured).repeat
    if fresh:
        _tell_if_unexplained(p, run_id)
    retried = _retry(p, run_id, record_changed=fresh)  # a cancel grant may wait for this capture
    return f"{'captured' if fresh else 'already captured'} {run_id}; grants: {retried}"


def _tell_if_unexplained(p: Ports, run_id: str) -> None:
    """A capture that saw a reproducing failure nobody explained holds a cancel until a person records its cause:
    record-ready, so notify tells one (runtime/notify_handler.py; its claim dedupes a repeat)."""
    record = p.records.get(run_id)
    if record is None or record.pre_cancel is None or not record.pre_cancel.unexplained_reproducing:
        return
    ready = json.dumps({"run_id": run_id, "status": record.status.value, "reason": "pre_cancel"}).encode()
    p.bus.publish(p.topology.ready_topic, ready, {"run_id": run_id, "reason": "pre_cancel"})


def _controller(p: Ports, source: str) -> JobController | None:
    """The event's source's controller as the deployment configures it (the registry's; None: none)."""
    return p.controllers.for_source(source, p.settings)


def record_cause(p: Ports, run_id: str, sig_id: str, note: str, recorded_by: str, at: datetime) -> str:
    """A person recorded why a reproducing failure happens: waiting cancel grants are retried (outside any delivery,
    as retry-waiting-grants would: its declared topics bound what the retry may publish)."""
    p = guarded_ports(p, p.topology.function("retry-waiting-grants"))
    observed = precancel.observed_signature_ids(list(stored_under(p, run_id, PRE_CANCEL, PreCancelCaptured).values()))
    if sig_id not in observed:
        known = ", ".join(sorted(observed)) or "none: no pre-cancel capture of this run saw a reproducing failure"
        raise PermanentError(
            "unknown_signature",
            f"{sig_id!r} names no reproducing failure observed in run {run_id}'s pre-cancel captures "
            f"(observed: {known}); nothing recorded",
        )
    precancel.causes(p.records, run_id).put(sig_id, precancel.CauseNote(note=note, recorded_by=recorded_by, at=at))
    return _retry(p, run_id)
