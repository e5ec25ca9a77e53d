"""Stage classify (on-job-event): ledger every job event, ignore non-terminal states, admit the run, classify it from
its resolved config and route it: standard runs on to terminal state and capture (after storing the layout
snapshot every later hop reads), agentic runs away, unknown ones to a person."""

from __future__ import annotations

import json

from rlcleanup.authority.config_screen import screen_command
from rlcleanup.errors import PermanentError
from rlcleanup.models.events import JobEvent, RunMessage
from rlcleanup.models.plans import Classified
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import ClassificationKind, RecordStatus
from rlcleanup.runtime import admission, attempt_scope, recovery
from rlcleanup.runtime.attempt_scope import pass_id
from rlcleanup.runtime.claims import once_ran
from rlcleanup.runtime.layouts import snapshot_layout
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages.barrier import own_claim
from rlcleanup.runtime.stages.common import publish
from rlcleanup.sources.sweep import open_later_pass, plan_redrive
from rlcleanup.steps import capture as capture_step
from rlcleanup.steps.classify import classify
from rlcleanup.steps.facts import run_facts, safe_run_id
from rlcleanup.steps.layout import discover
from rlcleanup.steps.validate import resume_not_applicable
from rlcleanup.uris import basename, parent


def _not_a_run_end(p: Ports, event: JobEvent, hint: str) -> str | None:
    """What happened to an event that does not start a run's cleanup (too old, a pre-cancel request, a state that
    is not terminal), recorded on the event ledger; None for a terminal event."""
    age = (p.clock.now() - event.observed_at).total_seconds()
    if age > p.max_event_age_seconds:
        p.records.record_event(hint, event.event_key, {"state": event.state, "outcome": f"dropped: {age:.0f}s old"})
        return "dropped: older than the max event age"
    if event.intent == "pre_cancel":
        if p.records.record_event(hint, event.event_key, {"state": event.state, "outcome": "pre_cancel requested"}):
            publish(p, p.topology.route("on-job-event", "pre-cancel"), event, run_id=hint)
        return "pre-cancel routed"
    if not event.is_terminal:
        p.records.record_event(hint, event.event_key, {"state": event.state, "outcome": "ignored: non-terminal"})
        return "ignored: non-terminal state"
    return None


def on_job_event(p: Ports, event: JobEvent, attributes: dict[str, str]) -> str:
    admission.check_in_run_buckets(p, event.run_uri)  # before anything is read
    hint = safe_run_id(event.run_id or f"{basename(parent(event.run_uri))}-{basename(event.run_uri)}")
    handled = _not_a_run_end(p, event, hint)
    if handled is not None:
        return handled

    try:
        layout = discover(p.storage, event.run_uri)
    except PermanentError as exc:  # recorded failed under its own location's id, then refused as before
        admission.admit_unreadable_run(p, event.run_uri, exc)
        raise
    facts = run_facts(layout)
    # Roots inside the run buckets, then the identity: the id this location holds, bound write-once (a second
    # root claiming a held id is refused, never merged).
    run_id = admission.admit_run(p, layout, located_on_conflict=True)  # a conflict never blocks preservation
    p.records.record_event(
        run_id, event.event_key, {"state": event.state, "source": event.source, "outcome": "terminal"}
    )
    preserve_root = admission.deployment_preserve_root(p, event)
    if recovery.is_lost(p, run_id):  # never a duplicate: claims written since the store's reset are dropped
        recovery.start_over(p, run_id)
    # Which end of the run this is: its first, one already handled, or a resubmitted step's new end.
    marks = attempt_scope.end_marks(p.storage, layout)
    scope = attempt_scope.choose_scope(
        p.claims, run_id, marks, confirm=lambda: attempt_scope.end_marks(p.storage, discover(p.storage, layout.run_uri))
    )
    if scope is None:
        moved = move_unfinished_pass(p, run_id, preserve_root)
        return moved or f"duplicate: {run_id} already classified (no new end: {_marks_text(marks)})"

    def work() -> Classified:
        classification = classify(p.storage, layout)
        record = CompletionRecord(
            run_id=run_id,
            run_uri=layout.run_uri,
            classification=classification,
            controller_state=f"{event.source}:{event.state}" if event.controller_state else None,
            source_revision=facts.source_revision,
            base_model=facts.base_model,
            temp_root=layout.temp_root,
            resolved_config=facts.resolved_config,
            launch_command=screen_command(facts.launch_command) if facts.launch_command else None,
        )
        kind = classification.kind
        if kind is ClassificationKind.agentic:
            record.status = RecordStatus.routed
            record.remaining_work = ["agentic run: handled by the agentic cleanup path (rl-agentic-job-cleanup)"]
        elif kind is ClassificationKind.unknown:
            record.status = RecordStatus.needs_person
            record.remaining_work = [
                "classification unknown: a person must decide standard vs agentic from the evidence"
            ]
        else:
            record.not_applicable_evidence = list(capture_step.NOT_APPLICABLE_FOR_STANDARD)
            by_design = resume_not_applicable(layout)
            if by_design is not None:  # run-layout-v2.md §1, §3: absent by design, never reported missing
                record.not_applicable_evidence.append(f"checkpoints, exports and candidates: {by_design}")
        if not p.records.create_if_absent(record):
            # A later end keeps the finished record as it is (never back to in_progress) until its own selection
            # writes the new outcome; only what classification itself decides is refreshed now.
            fields = record.model_dump(mode="json", include=_CLASSIFY_FIELDS if scope else None)
            p.records.update(run_id, {k: v for k, v in fields.items() if k not in ("created_at", "errors")})
        next_msg = RunMessage(
            run_id=run_id,
            scope=scope,
            run_uri=layout.run_uri,
            preserve_root=preserve_root,
            event_state=event.controller_state,
            event_source=event.source,
            controller_absent=event.controller_absent,
        )
        snapshot: dict[str, str] = {}
        if kind is ClassificationKind.agentic:
            publish(p, p.topology.route("on-job-event", "agentic"), next_msg)
        elif kind is ClassificationKind.standard:
            # Discover once: every later hop reads this snapshot instead of listing the run again.
            snapshot = snapshot_layout(p, run_id, preserve_root, layout, scope)
            publish(p, p.topology.next_of("on-job-event"), next_msg)
        return Classified(kind=kind.value, **snapshot, end=marks.model_dump(mode="json"))

    ran = once_ran(p, run_id, own_claim(p, scope, "on-job-event"), work, model=Classified)
    which = f" (new end, pass {pass_id(scope)})" if scope else ""
    if ran.repeat:
        return move_unfinished_pass(p, run_id, preserve_root) or f"duplicate: {run_id} already classified"
    return f"classified {run_id}{which}: {ran.result.kind}"


def move_unfinished_pass(p: Ports, run_id: str, preserve_root: str | None) -> str | None:
    """A job event re-emitted for a run already classified whose pass stopped short (its record `in_progress` and
    unchanged for a lease, RLCLEANUP_LEASE_SECONDS, or a later pass without a selection): publish `run-classified` again when what is missing hangs off it (a plan,
    lost fan-out members, which each plan publishes again (stages/paged_plan.py), a fan-in), so the re-emitted
    event moves the run; every stage re-checks its claim, so done work is not redone. Otherwise say why not (the
    stage it waits on is after capture: the sweep re-drives that). None: the run's passes are all finished."""
    record = p.records.get(run_id)
    if record is None:
        return None
    quiet = (p.clock.now() - record.updated_at).total_seconds()
    if record.status is RecordStatus.in_progress and quiet < p.lease_seconds:
        # The end's other hints (storage notifications, the sweep, a controller) arrive while it is moving.
        return f"duplicate: {run_id} already classified and moving (its record changed {quiet:.0f} s ago)"
    keys = p.topology.pipeline_keys(attempt_scope.PASS_PREFIX)
    scope = "" if record.status is RecordStatus.in_progress else open_later_pass(p.claims, run_id, keys)
    if scope is None:
        return None
    plan = plan_redrive(p.claims, record, preserve_root, keys, scope)
    after = p.topology.next_of("on-job-event")  # what hangs off classification: its plans and their fan-ins
    moved = [payload for topic, payload in plan.republish if topic == after]
    for payload in moved:
        p.bus.publish(after, json.dumps(payload).encode(), {"run_id": run_id, "redrive": "job-event"})
    if moved:
        return f"re-driven: {run_id} was classified but its pass stopped short; {after} published again"
    waits = ", ".join(topic for topic, _ in plan.republish) or "; ".join(plan.missing)
    return (
        f"duplicate: {run_id} already classified; its pass waits on {waits}, which a job event cannot redo: "
        "the sweep re-drives it after its stall deadline"
    )


_CLASSIFY_FIELDS = {
    "classification",
    "controller_state",
    "source_revision",
    "base_model",
    "temp_root",
    "resolved_config",
    "launch_command",
    "not_applicable_evidence",
}


def _marks_text(marks: attempt_scope.EndMarks) -> str:
    tokens = ", ".join(f"{m.uri.rsplit('/', 2)[-2]}: {m.token}" for m in marks.statuses) or "no status file"
    return f"{tokens}; {len(marks.attempts)} attempts"
