"""Handlers of the event sources: Cloud Storage notifications (on-storage-event) and the reconciling sweep
(sweep: scheduler ticks, listing pages, stalled records, controller polls) → job-events.

Each source handler turns what it received into `JobEvent` hints on `job-events` and nothing else: classifying,
settling and capturing stay with on-job-event and the stages after it, whose claim keys make a duplicate or late
hint harmless. Dropped notifications (heartbeat locks, logs, checkpoints) cost one attribute check: no read, no
record-store call.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import cast

from pydantic import ValidationError

from rlcleanup.errors import PermanentError, RunErrorCode
from rlcleanup.formats.export_request import read_request
from rlcleanup.models.claims import K8sEndPublished, StorageNoticeHandled
from rlcleanup.models.documents import SourceSeen
from rlcleanup.models.events import JobEvent
from rlcleanup.models.record import CompletionRecord, ExportRequestState, RunError
from rlcleanup.report.notice import urgency
from rlcleanup.runtime.attempt_scope import PASS_PREFIX
from rlcleanup.runtime.claims import once_ran
from rlcleanup.runtime.evidence import refresh_report
from rlcleanup.runtime.export_follow import follow_export_jobs
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.recovery import redrive_lost_runs
from rlcleanup.settings import DeploymentSettings, unconfigured
from rlcleanup.sources import gcs_notifications as gcsn
from rlcleanup.sources import k8s
from rlcleanup.sources import sweep as sweep_source
from rlcleanup.sources.deadlines import deadline_records, recheck
from rlcleanup.sources.sweep import (
    ChildLister,
    SweepConfig,
    SweepPage,
    SweepRecords,
    parse_sweep_message,
    plan_redrive,
    stalled_fields,
    stalled_records,
    sweep_page,
    tick,
)
from rlcleanup.steps.facts import safe_run_id
from rlcleanup.uris import basename, in_run_buckets, parent

log = logging.getLogger(__name__)


def publish_job_event(p: Ports, event: JobEvent) -> None:
    p.bus.publish(
        p.topology.entry_topic, event.model_dump_json().encode(), {"source": event.source, "state": event.state}
    )


def run_id_hint(run_uri: str) -> str:
    """The id a Layout A run gets (`<name>-<version>`), used only to file a source's claims beside the run."""
    return safe_run_id(f"{basename(parent(run_uri))}-{basename(run_uri)}")


def on_storage_event(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    try:
        notification = gcsn.parse_notification(data, attributes)
    except gcsn.NotificationError as exc:
        raise PermanentError("bad_notification", str(exc)) from exc
    cls = gcsn.classify_object(notification.name)
    if notification.attributes.event_type != gcsn.FINALIZE or cls.marker is None:
        return gcsn.decide(notification, _no_read).reason  # decided from attributes alone: cheap, no claim

    def read(uri: str, generation: int | None) -> bytes | None:
        return read_generation(p, uri, generation, gcsn.MAX_MARKER_BYTES)

    def work() -> StorageNoticeHandled:
        decision = gcsn.decide(notification, read)
        if decision.event is not None:
            publish_job_event(p, decision.event)
        return StorageNoticeHandled(
            object=notification.uri,
            generation=notification.generation,
            shape=notification.shape,
            outcome=decision.reason,
            published=decision.event is not None,
        )

    # Dedupe on (bucket, object, generation): the claim is filed beside the run the object belongs to.
    run_root = f"gs://{notification.bucket}/{cls.run_key}" if cls.run_key else parent(parent(notification.uri))
    hint = run_id_hint(run_root)
    ran = once_ran(p, hint, f"storage:{notification.dedupe_key}", work, model=StorageNoticeHandled)
    if ran.repeat:
        return f"duplicate: {notification.uri}#{notification.generation} already handled"
    prefix = "published" if ran.result.published else "recorded"
    return f"{prefix}: {ran.result.outcome} ({notification.shape} notification)"


def read_generation(p: Ports, uri: str, generation: int | None, max_bytes: int) -> bytes | None:
    """The object at a generation when the storage can (GCS), else the live object (local files have one)."""
    reader = getattr(p.storage, "read_generation", None)
    if reader is not None:
        data: bytes | None = reader(uri, generation, max_bytes)
        return data
    if p.storage.stat(uri) is None:
        return None
    return p.storage.read_range(uri, 0, max_bytes)


def _no_read(uri: str, generation: int | None) -> bytes | None:
    raise AssertionError("decided from the attributes alone")  # pragma: no cover - guarded by the caller


# ---------------------------------------------------------------- sweep (scheduler ticks and continuations)


def settings(p: Ports) -> DeploymentSettings:
    return p.settings if p.settings is not None else unconfigured()


def sweep_config(p: Ports) -> SweepConfig:
    slowest = max(fn.timeout_seconds for fn in p.topology.functions)
    conf = settings(p)
    return SweepConfig.from_settings(conf, slowest_timeout_seconds=slowest, controllers=p.controllers.polling(conf))


def sweep(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    try:
        config = sweep_config(p)
        msg = parse_sweep_message(data)
    except (ValueError, ValidationError) as exc:
        raise PermanentError("bad_sweep_message", str(exc)[:500]) from exc
    now = p.clock.now()
    if msg is None:
        fanout = tick(config)
        for item in fanout:
            p.bus.publish(_sweep_topic(p), item.model_dump_json().encode(), {"kind": item.kind})
        return f"tick: {len(fanout)} sweep messages ({len(config.roots)} roots)"
    if isinstance(msg, SweepPage):
        storage = cast(ChildLister, p.storage)
        try:
            out = sweep_page(storage, p.records, msg, now, config)
        except NotImplementedError as exc:  # a root on a backend without child listing
            raise PermanentError("sweep_unsupported_storage", str(exc)) from exc
        for page in out.continuations:
            p.bus.publish(_sweep_topic(p), page.model_dump_json().encode(), {"kind": page.kind})
        for event in out.events:
            publish_job_event(p, event)
        for key in out.seen:  # after publishing: a crash in between hints again (harmless)
            sweep_source.seen_hints(p.records).put(key, sweep_source.SWEPT, only_if_absent=True)
        return f"page {msg.prefix}: {len(out.events)} events, {len(out.continuations)} continuations"
    if isinstance(msg, SweepRecords):
        return _sweep_records(p, now, config)
    return _poll_controller(p, msg.source, now)


def _sweep_records(p: Ports, now: datetime, config: SweepConfig) -> str:
    redriven = stalled = 0
    keys = p.topology.pipeline_keys(PASS_PREFIX)
    for found in stalled_records(p.records, p.claims, now, config, keys):
        record, scope = found.record, found.scope
        plan = plan_redrive(p.claims, record, p.preserve_root, keys, scope)
        if (
            plan.missing
            and plan.republish
            and not sweep_source.seen_hints(p.records).put(
                f"redrive:{record.run_id}:{scope.rstrip('/')}", sweep_source.SWEPT, only_if_absent=True
            )
        ):
            plan = replace(plan, republish=[])  # re-driven once already and still missing: marked below
        for topic, payload in plan.republish:
            p.bus.publish(topic, json.dumps(payload).encode(), {"run_id": record.run_id, "redrive": "sweep"})
        if plan.republish:
            redriven += 1
            log.info("sweep re-drove %s%s: %s", record.run_id, _pass_text(scope), [t for t, _ in plan.republish])
        if plan.missing and not plan.republish:
            message = f"stalled{_pass_text(scope)}: missing {', '.join(plan.missing)}"[:2000]
            if scope:
                # A later pass keeps the finished record's outcome (it never regresses): its stall is reported
                # beside it, once per pass, instead of replacing the status.
                if not sweep_source.seen_hints(p.records).put(
                    f"stalled:{record.run_id}:{scope.rstrip('/')}", sweep_source.SWEPT, only_if_absent=True
                ):
                    continue
                remaining = [*record.remaining_work, *stalled_fields(plan.missing, now)["remaining_work"]]
                p.records.update(record.run_id, {"remaining_work": remaining})
            else:
                p.records.update(record.run_id, stalled_fields(plan.missing, now))
            stalled += 1
            refresh_report(p, record.run_id)  # a finished record's later pass stalled: no-op while in progress
            p.records.add_errors(record.run_id, [RunError(step="sweep", code=RunErrorCode.stalled, message=message)])
            log.warning("sweep marked %s stalled: %s", record.run_id, message)
    rechecked = _recheck_deadlines(p, now, config)
    lost = redrive_lost_runs(p, now)  # runs the record store lost: their kept event, published again
    # Export grants' jobs: asked whether they ended, and what an end means recorded (runtime/export_follow.py).
    jobs = follow_export_jobs(p, now, config.record_scan_limit)
    return (
        f"records: {redriven} re-driven, {stalled} stalled, {rechecked} deadline(s) changed, {lost} lost run(s) "
        f"re-driven; {jobs}"
    )


def _recheck_deadlines(p: Ports, now: datetime, config: SweepConfig) -> int:
    """Runs waiting on a person against a deadline (sources/deadlines.py): re-read their owed exports' requests
    (only inside the run buckets) and say a deadline that has passed."""

    def read(checkpoint: str) -> ExportRequestState | None:
        return read_request(p.storage, checkpoint) if in_run_buckets(checkpoint, p.run_buckets) else None

    changed = 0
    warning = timedelta(hours=settings(p).notify.deadline_warning_hours)
    for record in deadline_records(p.records, config.record_scan_limit):
        found = recheck(record, now, read)
        if found.fields:
            p.records.update(record.run_id, found.fields)
            p.records.add_errors(record.run_id, found.errors)
            refresh_report(p, record.run_id)  # a deadline passed: the report says so too
            changed += 1
        _deadline_notice(p, p.records.get(record.run_id) if found.fields else record, now, warning)
    return changed


def _deadline_notice(p: Ports, record: CompletionRecord | None, now: datetime, warning: timedelta) -> None:
    """A deadline that is now close or passed (or changed) is a new state for a person: record-ready once per
    run, deadlines and urgency (notify posts it once more; its own claim dedupes a repeat)."""
    if record is None or not record.deadlines:
        return
    how_urgent = urgency(record, now, warning)
    if how_urgent not in ("due_soon", "passed"):
        return
    state = hashlib.sha256(
        json.dumps([how_urgent, *sorted(f"{d.at.isoformat()} {d.item}" for d in record.deadlines)]).encode()
    ).hexdigest()[:16]
    seen = f"deadline-notice:{record.run_id}:{state}"
    if sweep_source.seen_hints(p.records).get(seen) is not None:
        return
    ready = {"run_id": record.run_id, "status": record.status.value, "deadline": how_urgent}
    p.bus.publish(p.topology.ready_topic, json.dumps(ready).encode(), {"run_id": record.run_id, "reason": "deadline"})
    sweep_source.seen_hints(p.records).put(
        seen, sweep_source.SWEPT, only_if_absent=True
    )  # after: a crash in between says it again


def _sweep_topic(p: Ports) -> str:
    """The sweep's own trigger: its continuations (pages, the record scan, polls) go back there."""
    return p.topology.trigger_of("sweep")


def _pass_text(scope: str) -> str:
    return f" (later pass {scope.rstrip('/')})" if scope else ""


def _poll_controller(p: Ports, source: str, now: datetime) -> str:
    """One poll of the named controller (an unknown name: `UnknownControllerError`, dead-lettered)."""

    def seen(key: str) -> bool:
        return sweep_source.seen_hints(p.records).get(key) is not None

    controller = p.controllers.build(source, settings(p))
    if controller is None or not controller.polls:
        return f"{source}: not configured (its settings name no controller to poll)"
    found = controller.list_finished(seen, now)
    published = 0
    for item in found:
        if item.event is not None:
            publish_job_event(p, item.event)  # before marking it seen: a crash in between republishes (harmless)
            published += 1
        else:
            log.warning("%s poll: %s", source, item.reason)
        hint = SourceSeen(source=source, outcome=item.reason)
        sweep_source.seen_hints(p.records).put(item.key, hint, only_if_absent=True)
    return f"{source}: {published} events, {len(found) - published} jobs without a run"


# ---------------------------------------------------------------- GKE / Kubernetes (Cloud Logging sink)


def on_k8s_log_entry(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    try:
        entry = k8s.parse_log_entry(data)
    except k8s.LogEntryError as exc:
        raise PermanentError("bad_log_entry", str(exc)) from exc
    end = k8s.job_end(entry)
    if isinstance(end, str):
        return end
    outcome = k8s.to_event(end, settings(p).k8s_run_uri_template)
    if isinstance(outcome, str):
        log.warning("%s", outcome)
        return outcome
    event = outcome

    def work() -> K8sEndPublished:
        publish_job_event(p, event)
        return K8sEndPublished(job=event.job_id, state=event.state)

    # Events and audit entries of one Job end (and a sink's redelivery) are one event: keyed by the Job end.
    ran = once_ran(
        p, safe_run_id(f"k8s-{end.namespace}-{end.name}"), f"k8s:{end.dedupe_key}", work, model=K8sEndPublished
    )
    return f"duplicate: {event.job_id} {event.state}" if ran.repeat else f"published: {event.job_id} {event.state}"
