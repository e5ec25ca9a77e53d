"""A plan stored in pages (the log-scan and capture plans): what a page stores, how a continuation finds the page
before it, and how the last page joins them.

A page lists at most `RLCLEANUP_CAPTURE_PAGE_OBJECTS` objects, publishes its parts and stores itself under
`<plan>-page:<n>` (part ids, the cursor). A page that stops short publishes a continuation naming only the next page
number; that page reads where to resume from the page before it in the claim store, never from the message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from rlcleanup.errors import PermanentError, RetryLater
from rlcleanup.models.events import CapturePlanPageMessage, RunMessage
from rlcleanup.models.plans import MemberSet, PlanPage
from rlcleanup.runtime.attempt_scope import scoped
from rlcleanup.runtime.claims import once, stored
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages.barrier import advance, member_key, member_prefix, member_set_key

P = TypeVar("P", bound=PlanPage[Any])
S = TypeVar("S", bound=MemberSet)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PagedPlan(Generic[P, S]):
    """One paged plan: the fan-out whose member set it stores, and the two things a stage supplies: how to plan one
    page (list it, publish its parts) and how the pages join into the member set."""

    fan_out: str  # topology.yaml fan_outs[].name: the whole plan is its member set, its parts go on its topic
    continuation: type[CapturePlanPageMessage]  # a page that names only the next page number (on the same topic)
    page_model: type[P]
    # (ports, run, the page before this one or None for the first, page number, only) -> this page, its parts
    # published (`only`: publish just the parts with these ids, record nothing else: a re-drive of lost members)
    plan_page: Callable[[Ports, str, RunMessage, P | None, int, frozenset[str] | None], P]
    # (ports, the last page, every page in order) -> the member set
    join: Callable[[Ports, P, list[P]], S]


REDRIVE = "redrive"  # the attribute a re-drive's messages carry (the sweep's, a re-emitted job event's)


def plan_page(
    p: Ports,
    plan: PagedPlan[P, S],
    run_id: str,
    scope: str,
    page: int,
    first: RunMessage | None,
    redrive: str | None = None,
) -> str:
    """One page of `plan`: planned once (a redelivery reads the stored page). A page that stops short queues the
    next (after its own result is stored, so the next page always finds its cursor); the last page joins every
    page into the member set the barrier waits for, then tries the barrier (the plan may be the last piece).
    Pages are stored under `<member set>-page:<n>` ("capture-plan-page:0")."""
    fan = p.topology.fan_out(plan.fan_out)
    name, page_key = f"{fan.name} plan", f"{fan.member_set}-page"
    _within_ceiling(p, run_id, name, page * p.capture_page_objects, more=True)  # the pages before were full

    planned_now = False

    def work() -> P:
        nonlocal planned_now
        planned_now = True
        if page == 0 and first is not None:
            return plan.plan_page(p, scope, first, None, page, None)
        before = page_before(p, run_id, scope, name, page_key, page, plan.page_model)
        return plan.plan_page(p, scope, before.run, before, page, None)

    done = stored_page(p, run_id, scoped(scope, f"{page_key}:{page}"), work, plan.page_model)
    if redrive and not planned_now:  # a re-drive (the sweep, a re-emitted event): members may have been lost
        republish_lost_members(p, plan, run_id, scope, page, done)
    _within_ceiling(p, run_id, name, page * p.capture_page_objects + done.listed, more=done.next is not None)
    if done.next is not None:
        nxt = plan.continuation(run_id=run_id, scope=scope, plan_page=page + 1)
        return queue_next(p, fan.topic, nxt, f"{name} page {page}", done, redrive)

    def whole() -> S:
        return plan.join(p, done, every_page(p, run_id, scope, name, page_key, page, plan.page_model))

    once(p, run_id, member_set_key(p, scope, plan.fan_out), whole, model=fan.set_model)
    return advance(p, run_id, scope, plan.fan_out)


def republish_lost_members(p: Ports, plan: PagedPlan[P, S], run_id: str, scope: str, page: int, done: P) -> int:
    """Publish again the parts of a planned page that have no outcome stored yet (on a re-drive only: an ordinary
    redelivery is no sign of loss, and its parts may just be queued). A part message can be lost for
    good (Pub/Sub dead-letters it after `max_delivery_attempts`, e.g. while its function was down), and a part's
    file list travels only in its message: the page is listed again from its stored cursor (a terminal run's
    objects do not change) and only the parts still missing are published. A part that is merely slow is
    harmless to publish twice: its claim makes the copy run once. Returns how many were published."""
    outcomes = p.claims.done_keys(run_id, member_prefix(p, scope, plan.fan_out))
    ids = [part if isinstance(part, str) else str(getattr(part, "part_id", "")) for part in done.parts]
    lost = frozenset(i for i in ids if i and member_key(p, scope, plan.fan_out, i) not in outcomes)
    if not lost:
        return 0
    before = None
    if page > 0:
        name, page_key = f"{plan.fan_out} plan", f"{p.topology.fan_out(plan.fan_out).member_set}-page"
        before = page_before(p, run_id, scope, name, page_key, page, plan.page_model)
    plan.plan_page(p, scope, done.run, before, page, lost)
    log.warning(
        "re-published %d %s part(s) of %s page %d with no outcome: %s",
        len(lost),
        plan.fan_out,
        run_id,
        page,
        sorted(lost)[:10],
    )
    return len(lost)


def _within_ceiling(p: Ports, run_id: str, plan: str, listed: int, *, more: bool) -> None:
    """Refuse a run holding more objects than the deployment's ceiling, as soon as a plan has listed that many:
    nothing further is planned, and no whole-run step (the listing join, the sealed manifest) ever holds them."""
    if listed > p.max_run_objects or (more and listed >= p.max_run_objects):
        raise PermanentError(
            "run_too_large",
            f"{run_id}: the {plan} listed {listed} objects{' and more remain' if more else ''}: over the "
            f"deployment's ceiling of {p.max_run_objects} objects per run (RLCLEANUP_MAX_RUN_OBJECTS; Terraform "
            "max_run_objects). Refused: nothing further is planned; raise the ceiling or remove the run's stray "
            "files, then run it again",
        )


def page_before(p: Ports, run_id: str, scope: str, plan: str, key: str, page: int, model: type[P]) -> P:
    """The stored page a continuation resumes from (where to read comes from here, never from the message)."""
    before = stored(p, run_id, scoped(scope, f"{key}:{page - 1}"), model)
    if before is None:
        # Not yet, rather than bad input: a continuation from before a record-store loss can arrive before the
        # re-emitted run stores its page 0 again (test_faults' Firestore restart). Retried with backoff; one that
        # never finds its page is dead-lettered by Pub/Sub.
        raise RetryLater(f"{plan} page {page} of {run_id}: page {page - 1} is not stored yet")
    if before.next is None:
        raise PermanentError("bad_input", f"{plan} page {page} of {run_id}: the plan ended before it")
    return before


def stored_page(p: Ports, run_id: str, key: str, work: Callable[[], P], model: type[P]) -> P:
    """This page's result: planned now, or stored by an earlier delivery."""
    return once(p, run_id, key, work, model=model)  # planned before: the page stored then


def new_page(
    model: type[P], parts: list[Any], dest_root: str, msg: RunMessage, listed: int, nxt: BaseModel | None
) -> P:
    """A page: its part ids, where the plan writes, the run, how many objects it listed, and the cursor of the
    next page (None on the last page)."""
    cursor = nxt.model_dump(mode="json") if nxt is not None else None
    return model(parts=parts, dest_root=dest_root, run=msg, listed=listed, next=cursor)


def queue_next(p: Ports, topic: str, nxt: BaseModel, page: str, done: PlanPage[Any], redrive: str | None) -> str:
    """Queue the next page. Republished on a redelivery: the next page's claim makes it run once. A re-drive
    travels on, so every page of the plan re-publishes its lost members."""
    p.bus.publish(topic, nxt.model_dump_json().encode(), {REDRIVE: redrive} if redrive else {})
    return f"{page}: {len(done.parts)} parts from {done.listed} objects; next page queued"


def every_page(p: Ports, run_id: str, scope: str, plan: str, key: str, last: int, model: type[P]) -> list[P]:
    """Pages 0..last in order, once every one is readable (the last page joins them into the whole plan)."""
    found = p.claims.results_as(run_id, scoped(scope, f"{key}:"), model)
    keys = [scoped(scope, f"{key}:{n}") for n in range(last + 1)]
    missing = [k for k in keys if k not in found]
    if missing:
        raise RetryLater(f"{run_id}: {plan} pages {missing} not readable yet")
    return [found[k] for k in keys]


def first_page_handler(plan: PagedPlan[P, S]) -> Callable[[Ports, RunMessage, dict[str, str]], str]:
    """The planner's handler: a run message starts the plan at page 0."""

    def plan_first_page(p: Ports, msg: RunMessage, attributes: dict[str, str]) -> str:
        return plan_page(p, plan, msg.run_id, msg.scope, 0, msg, attributes.get(REDRIVE))

    return plan_first_page


def plan_later_page(p: Ports, plan: PagedPlan[P, S], page: CapturePlanPageMessage, attributes: dict[str, str]) -> str:
    """A continuation on the parts topic: plan the page it names (where to resume comes from the page before)."""
    return plan_page(p, plan, page.run_id, page.scope, page.plan_page, None, attributes.get(REDRIVE))
