"""A plan stored in pages (the log-scan and capture plans): what a page stores, how a continuation finds the page
before it, and how the last page joins them.

A page lists at most `RLCLEANUP_CAPTURE_PAGE_OBJECTS` objects, publishes its parts and stores itself under
`<plan>-page:<n>` (part ids, the cursor). A page that stops short publishes a continuation naming only the next page
number; that page reads where to resume from the page before it in the claim store, never from the message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from rlcleanup.errors import PermanentError, RetryLater
from rlcleanup.models.events import RunMessage
from rlcleanup.models.plans import PlanPage
from rlcleanup.runtime.attempt_scope import scoped
from rlcleanup.runtime.claims import once, stored
from rlcleanup.runtime.ports import Ports

P = TypeVar("P", bound=PlanPage[Any])


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
    done = once(p, run_id, key, work, model=model) or stored(p, run_id, key, model)  # None from once: planned before
    if done is None:
        raise RetryLater(f"{run_id}/{key}: stored result not readable yet")
    return done


def new_page(
    model: type[P], parts: list[Any], dest_root: str, msg: RunMessage, listed: int, nxt: BaseModel | None
) -> P:
    """A page: its part ids, where the plan writes, the run, how many objects it listed, and the cursor of the
    next page (None on the last page)."""
    cursor = nxt.model_dump(mode="json") if nxt is not None else None
    return model(parts=parts, dest_root=dest_root, run=msg, listed=listed, next=cursor)


def queue_next(p: Ports, topic: str, nxt: BaseModel, page: str, done: PlanPage[Any]) -> str:
    """Queue the next page. Republished on a redelivery: the next page's claim makes it run once."""
    p.bus.publish(topic, nxt.model_dump_json().encode(), {})
    return f"{page}: {len(done.parts)} parts from {done.listed} objects; next page queued"


def every_page(p: Ports, run_id: str, scope: str, plan: str, key: str, last: int, model: type[P]) -> list[P]:
    """Pages 0..last in order, once every one is readable (the last page joins them into the whole plan)."""
    found = p.claims.results(run_id, scoped(scope, f"{key}:"))
    keys = [scoped(scope, f"{key}:{n}") for n in range(last + 1)]
    missing = [k for k in keys if k not in found]
    if missing:
        raise RetryLater(f"{run_id}: {plan} pages {missing} not readable yet")
    return [model.model_validate(found[k]) for k in keys]


def is_plan_page(data: bytes) -> bool:
    """Whether a payload on a parts topic is a plan's continuation (it names a page, not a part)."""
    try:
        payload = json.loads(data)
    except ValueError:
        return False  # decoding it as a part says what is wrong with it
    return isinstance(payload, dict) and "plan_page" in payload and "part" not in payload
