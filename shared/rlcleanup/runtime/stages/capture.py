"""Stage capture: plan the capture in pages (plan-capture), copy one slice server-side per member (capture-part),
and the `capture` barrier (after the terminal state is settled and every part is stored), which writes the
manifest and fans out validation: one candidate-validation message per batch of candidates, one for resume."""

from __future__ import annotations

from datetime import datetime

from rlcleanup.errors import PermanentError
from rlcleanup.models.events import CapturePartMessage, CapturePartsMessage, CapturePlanPageMessage, RunMessage
from rlcleanup.models.outcomes import CapturePartOutcome, MemberError
from rlcleanup.models.plans import CapturePlan, PlanPage, ValidationSet
from rlcleanup.models.record import Deadline
from rlcleanup.runtime.attempt_scope import pass_id
from rlcleanup.runtime.claims import once, stored
from rlcleanup.runtime.layouts import run_layout
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages import large_copy, paged_plan
from rlcleanup.runtime.stages.barrier import Gathered, advance, barrier_work, member_key, member_set_key
from rlcleanup.runtime.stages.common import publish, run_errors
from rlcleanup.runtime.stages.validate import FAN_OUT as VALIDATION
from rlcleanup.runtime.stages.validate import validation_message
from rlcleanup.steps import capture as capture_step
from rlcleanup.steps.expiry import DEADLINE_HORIZON, earliest, merge_by_class, unpreserved_deadline
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.sync_manifests import check_sync_manifests
from rlcleanup.steps.validate import CANDIDATES_PER_BATCH

FAN_OUT = "capture"  # topology.yaml fan_outs[].name
Page = PlanPage[str]


def _plan_one_page(
    p: Ports, scope: str, msg: RunMessage, before: Page | None, page: int, only: frozenset[str] | None
) -> Page:
    """At most `p.capture_page_objects` objects listed from the cursor of the page before, their parts published
    (`only`: just those parts, and nothing recorded: the page was planned before, paged_plan.republish_lost_members)."""
    cursor = capture_step.PageCursor.model_validate(before.next) if before is not None else None
    layout = run_layout(p, msg.run_id, msg.run_uri, scope)
    planned = capture_step.plan_capture_page(
        p.storage,
        layout,
        msg.run_id,
        msg.preserve_root,
        pass_id(scope),
        page=page,
        cursor=cursor,
        limit=p.capture_page_objects,
    )
    if only is None:
        p.records.add_errors(msg.run_id, run_errors("capture", planned.errors))
        _record_expiry(p, msg.run_id, planned.expiry_by_class)
    for part in planned.parts:  # soonest-dying first (steps/capture.py): published, hence copied, first
        if only is not None and part.part_id not in only:
            continue
        part_msg = CapturePartMessage(
            run_id=msg.run_id, scope=scope, run_uri=msg.run_uri, dest_root=planned.dest_root, part=part
        )
        publish(p, p.topology.fan_out(FAN_OUT).topic, part_msg)
    part_ids = [part.part_id for part in planned.parts]
    return paged_plan.new_page(Page, part_ids, planned.dest_root, msg, planned.listed, planned.next)


def _record_expiry(p: Ports, run_id: str, by_class: dict[str, datetime]) -> None:
    """The page's earliest expiry per evidence class, merged into the record's (pages are planned one after the
    other, each by the page before it, so this read-modify-write never races another page of the run)."""
    if not by_class:
        return
    record = p.records.get(run_id)
    merged = merge_by_class(record.evidence_expiry if record else {}, by_class)
    p.records.update(
        run_id,
        {"evidence_expiry": merged, "evidence_expires_at": earliest(merged.values())},
    )


def _join(p: Ports, last: Page, pages: list[Page]) -> CapturePlan:
    """The pages' part ids in order; a plan of several pages also joins their listings into one."""
    if len(pages) > 1:
        merged = capture_step.merge_listings(p.storage, last.dest_root, len(pages))
        p.records.add_errors(last.run.run_id, run_errors("capture", merged))
    return CapturePlan(
        parts=[part_id for stored in pages for part_id in stored.parts],
        dest_root=last.dest_root,
        preserve_root=last.run.preserve_root,
        run_uri=last.run.run_uri,
        pages=len(pages),
    )


PLAN = paged_plan.PagedPlan(FAN_OUT, CapturePlanPageMessage, Page, plan_page=_plan_one_page, join=_join)
plan_capture = paged_plan.first_page_handler(PLAN)  # the planner's handler (run-classified)


def capture_part(p: Ports, delivery: CapturePartsMessage, attributes: dict[str, str]) -> str:
    msg = delivery.root
    if isinstance(msg, CapturePlanPageMessage):  # a paged capture plan's continuation shares the capture-parts topic
        return paged_plan.plan_later_page(p, PLAN, msg, attributes)
    key = member_key(p, msg.scope, FAN_OUT, msg.part.part_id)
    if large_copy.goes_to_job(p, msg.part) and stored(p, msg.run_id, key, CapturePartOutcome) is None:
        handed = large_copy.hand_off(p, msg, key)
        if stored(p, msg.run_id, key, CapturePartOutcome) is None:  # the job publishes this message when done
            return handed

    def work() -> CapturePartOutcome:
        return large_copy.part_outcome(p, msg, capture_step.copy_part(p.storage, msg.dest_root, msg.part))

    once(p, msg.run_id, key, work, model=CapturePartOutcome)  # None: done before, inline or by the job
    return advance(p, msg.run_id, msg.scope, FAN_OUT)


@barrier_work("capture-done")
def finish_capture(p: Ports, run_id: str, scope: str, gathered: Gathered) -> ValidationSet:
    """The terminal state is settled and every capture part is stored: write the manifest, then fan out
    validation. A failed part wrote no part manifest: the manifest lists what was preserved; errors[] what was
    not."""
    plan = gathered.member_set(FAN_OUT, CapturePlan)
    outcomes = gathered.member_outcomes(FAN_OUT, CapturePartOutcome)
    record = p.records.get(run_id)
    run_uri = plan.run_uri or (record.run_uri if record else "")
    preserved = [pid for pid, outcome in outcomes.items() if outcome.ok]
    summary = capture_step.finalize_capture(p.storage, plan.dest_root, run_id, preserved)
    p.records.add_errors(run_id, run_errors("capture", _unpreserved(outcomes)))
    earlier = record if scope else None  # a later pass: the newest location first, keep the rest
    older = [loc for loc in (earlier.preserved_locations if earlier else []) if loc != plan.dest_root]
    deadlines = _unpreserved_deadlines(p, outcomes)
    kept = [d for d in (record.deadlines if record else []) if d.source != "capture"]
    p.records.update(
        run_id,
        {
            "deadlines": [d.model_dump(mode="json") for d in sorted([*kept, *deadlines], key=lambda d: d.at)],
            "evidence_deadline": earliest(d.at for d in [*kept, *deadlines]),
            "manifest_uri": summary.manifest_uri,
            "preserved_locations": [plan.dest_root, *older],
            "preserved_object_count": summary.object_count,
            "preserved_bytes": summary.total_bytes,
        },
    )
    p.records.add_errors(run_id, run_errors("capture", summary.errors))
    layout = run_layout(p, run_id, run_uri, scope)
    _record_incomplete_evidence(p, run_id, layout)
    candidates = [f"candidate:{step}" for step in layout.candidate_steps]
    targets = ValidationSet(targets=[*candidates, "resume"], run_uri=run_uri, preserve_root=plan.preserve_root)
    # The member set is stored BEFORE the fan-out: a validation that finishes before this barrier completes must
    # still know which siblings to wait for (an empty/unknown set would look like "all done").
    p.claims.complete_as(run_id, member_set_key(p, scope, VALIDATION), targets)
    # One message per batch of candidates (one invocation validates a batch together), one for resume.
    run, topic = (run_id, scope, run_uri, plan.preserve_root), p.topology.fan_out(VALIDATION).topic
    for i in range(0, len(candidates), CANDIDATES_PER_BATCH):
        publish(p, topic, validation_message(*run, targets=candidates[i : i + CANDIDATES_PER_BATCH]))
    publish(p, topic, validation_message(*run, target="resume"))
    return targets


def _record_incomplete_evidence(p: Ports, run_id: str, layout: RunLayout) -> None:
    """Each node's sync-manifest.json against its rendezvous directory: what is missing or was skipped goes on the
    record (run-layout-v3.md §4), with one error line saying evidence is incomplete."""
    incomplete, problems = check_sync_manifests(p.storage, layout)
    p.records.update(run_id, {"incomplete_evidence": [item.model_dump(mode="json") for item in incomplete]})
    errors = [f"unreadable_sync_manifest: {problem}" for problem in problems]
    if incomplete:
        missing = sum(1 for item in incomplete if item.status == "missing")
        errors.append(
            f"incomplete_evidence: {missing} debug artifact(s) listed as copied are missing and "
            f"{len(incomplete) - missing} were skipped by the node (record: incomplete_evidence)"
        )
    p.records.add_errors(run_id, run_errors("capture", errors))


def _unpreserved_deadlines(p: Ports, outcomes: dict[str, CapturePartOutcome]) -> list[Deadline]:
    """A failed part whose temp evidence dies within DEADLINE_HORIZON: a person must get it preserved before then
    (a later expiry stays the `capture_part_failed` error it is, with the class's expiry on the record)."""
    now = p.clock.now()
    return [
        Deadline(
            at=outcome.unpreserved_expires_at,
            source="capture",
            item=unpreserved_deadline(
                pid,
                len(outcome.unpreserved),
                outcome.error.code if outcome.error else "failed",
                outcome.unpreserved_expires_at,
                now,
            ),
        )
        for pid, outcome in sorted(outcomes.items())
        if not outcome.ok
        and outcome.unpreserved_expires_at is not None
        and outcome.unpreserved_expires_at - now < DEADLINE_HORIZON
    ]


def _unpreserved(outcomes: dict[str, CapturePartOutcome]) -> list[str]:
    return [
        f"capture_part_failed: part {pid} could not preserve {len(outcome.unpreserved)} objects"
        f" ({outcome.error.code}: {outcome.error.message}); first: {', '.join(outcome.unpreserved[:3])}"
        for pid, outcome in outcomes.items()
        if not outcome.ok and outcome.error
    ]


def failed_copy(
    p: Ports, key: str, delivery: CapturePartsMessage, error: PermanentError
) -> list[tuple[str, CapturePartOutcome]]:
    """What a capture part that failed stores: every source it was to preserve, unpreserved."""
    failure = MemberError(code=error.code, message=str(error)[:2000])
    copy = delivery.root
    assert isinstance(copy, CapturePartMessage)  # only a part is a member (a continuation is the plan's)
    unpreserved = [item.source for item in copy.part.items]
    dies = earliest(item.expires_at for item in copy.part.items)
    outcome = CapturePartOutcome(ok=False, error=failure, unpreserved=unpreserved, unpreserved_expires_at=dies)
    return [(key, outcome)]
