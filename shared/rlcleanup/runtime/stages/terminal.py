"""Stage terminal-state: plan the log scan in pages (establish-terminal-state), scan one slice of logs per member
(scan-log-part; a cut log's segments each publish the next), and the `terminal` barrier, which settles the
terminal state once every part is stored. A failed part is stored as a failed outcome (`failed_scan`), so the
barrier always fires and the record names the logs that were not read."""

from __future__ import annotations

from rlcleanup.authority.config_screen import screen_command
from rlcleanup.errors import PermanentError
from rlcleanup.models.events import LogScanPartMessage, LogScanPartsMessage, LogScanPlanPageMessage, RunMessage
from rlcleanup.models.outcomes import LogScanOutcome, MemberError
from rlcleanup.models.plans import LogScanPlan, LogScanPlanEntry, PlanPage, TerminalSettled
from rlcleanup.runtime.attempt_scope import pass_id
from rlcleanup.runtime.claims import once
from rlcleanup.runtime.layouts import run_layout
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages import paged_plan
from rlcleanup.runtime.stages.barrier import Gathered, advance, barrier_work, member_key
from rlcleanup.runtime.stages.common import publish, run_errors
from rlcleanup.steps import capture as capture_step
from rlcleanup.steps import logscan
from rlcleanup.steps.settle import settle_terminal_state

FAN_OUT = "log-scan"  # topology.yaml fan_outs[].name
Page = PlanPage[LogScanPlanEntry]


def _plan_one_page(
    p: Ports, scope: str, msg: RunMessage, before: Page | None, page: int, only: frozenset[str] | None
) -> Page:
    """At most `p.capture_page_objects` log objects listed from the cursor of the page before, their parts
    published. Part ids and attempt ids only are stored (as maps: Firestore has no nested arrays); the file lists
    travel in the messages, so a page stays small however many logs the run has. `only`: publish just those parts
    (a re-drive of lost members); a cut file's later segment carries the scan state of the one before it, so only
    a first segment can be published again (a lost later one is left to the sweep, which names it)."""
    if before is None:
        dest_root, cursor = capture_step.preserved_root(msg.preserve_root, msg.run_id, pass_id(scope)), None
    else:
        dest_root, cursor = before.dest_root, logscan.LogPlanCursor.model_validate(before.next)
    layout = run_layout(p, msg.run_id, msg.run_uri, scope)
    planned = logscan.plan_log_scan_page(p.storage, layout, cursor, p.capture_page_objects)
    for part in logscan.first_parts(planned.parts):  # a cut file's later segments: each published by the one before
        if only is not None and part.part_id not in only:
            continue
        part_msg = LogScanPartMessage(run_id=msg.run_id, scope=scope, dest_root=dest_root, part=part)
        publish(p, p.topology.fan_out(FAN_OUT).topic, part_msg)
    parts = [LogScanPlanEntry(part_id=part.part_id, attempt_id=part.attempt_id) for part in planned.parts]
    return paged_plan.new_page(Page, parts, dest_root, msg, planned.listed, planned.next)


def _join(p: Ports, last: Page, pages: list[Page]) -> LogScanPlan:
    parts = [part for stored in pages for part in stored.parts]
    return LogScanPlan(parts=parts, dest_root=last.dest_root, run=last.run, pages=len(pages))


PLAN = paged_plan.PagedPlan(FAN_OUT, LogScanPlanPageMessage, Page, plan_page=_plan_one_page, join=_join)
establish_terminal_state = paged_plan.first_page_handler(PLAN)  # the planner's handler (run-classified)


def scan_log_part(p: Ports, delivery: LogScanPartsMessage, attributes: dict[str, str]) -> str:
    msg = delivery.root
    if isinstance(msg, LogScanPlanPageMessage):  # a paged log-scan plan's continuation shares the log-scan-parts topic
        return paged_plan.plan_later_page(p, PLAN, msg, attributes)

    def work() -> LogScanOutcome:
        uri, problems, after = logscan.scan_part(p.storage, msg.dest_root, msg.part)
        if after is not None:  # the next segment of a cut file, with the scanner state it starts from
            publish(p, p.topology.fan_out(FAN_OUT).topic, msg.model_copy(update={"part": after}))
        return LogScanOutcome(uri=uri, files=len(msg.part.uris), bytes=msg.part.bytes, problems=len(problems))

    once(p, msg.run_id, member_key(p, msg.scope, FAN_OUT, msg.part.part_id), work, model=LogScanOutcome)
    return advance(p, msg.run_id, msg.scope, FAN_OUT)


@barrier_work("terminal")
def settle(p: Ports, run_id: str, scope: str, gathered: Gathered) -> TerminalSettled:
    """Every log-scan part is stored: settle the terminal state from the parts that were read, and say which
    files were not."""
    plan = gathered.member_set(FAN_OUT, LogScanPlan)
    outcomes = gathered.member_outcomes(FAN_OUT, LogScanOutcome)
    msg = plan.run
    layout = run_layout(p, run_id, msg.run_uri, scope)
    unread = {part_id: outcome.unread for part_id, outcome in outcomes.items() if not outcome.ok}
    parts = [(part.part_id, part.attempt_id) for part in plan.parts]
    scans = logscan.assemble(p.storage, plan.dest_root, parts, unread)
    p.records.add_errors(run_id, run_errors("terminal_state", _unread_logs(outcomes)))
    existing = p.records.get(run_id)
    fields, errors = settle_terminal_state(
        p.storage,
        layout,
        scans,
        plan.dest_root,
        event_state=msg.event_state,
        event_source=msg.event_source,
        controller_absent=msg.controller_absent,
        pre_cancel=existing is not None and existing.pre_cancel is not None,
        now=p.clock.now(),
        screen_command=screen_command,
    )
    p.records.update(run_id, fields)
    p.records.add_errors(run_id, run_errors("terminal_state", errors))
    return TerminalSettled(terminal_state=fields.get("terminal_state"))


def _unread_logs(outcomes: dict[str, LogScanOutcome]) -> list[str]:
    return [
        f"unreadable_log: {uri} was not scanned (log-scan part {part_id} failed: {outcome.error.code})"
        for part_id, outcome in outcomes.items()
        if not outcome.ok and outcome.error
        for uri in outcome.unread
    ]


def failed_scan(
    p: Ports, key: str, delivery: LogScanPartsMessage, error: PermanentError
) -> list[tuple[str, LogScanOutcome]]:
    """What a log-scan part that failed stores: its files unread. A failed segment of a cut log also completes
    the segments after it (each is published by the one before, so none will run): the barrier counts them and
    the record names the file unread."""
    failure = MemberError(code=error.code, message=str(error)[:2000])
    assert isinstance(delivery.root, LogScanPartMessage)  # only a part is a member (a continuation is the plan's)
    part = delivery.root.part
    own = LogScanOutcome(ok=False, error=failure, files=len(part.uris), bytes=part.bytes, unread=list(part.uris))
    if part.segment is None:
        return [(key, own)]
    prefix = key[: len(key) - len(part.part_id)]
    later = MemberError(
        code=error.code, message=f"not scanned: segment {part.segment.index + 1} of {part.segment.count} failed first"
    )
    skipped = LogScanOutcome(ok=False, error=later, files=1, unread=[])
    return [(key, own)] + [(f"{prefix}{part_id}", skipped) for part_id in part.later_segment_ids()]
