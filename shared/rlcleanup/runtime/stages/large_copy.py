"""A capture part too large for one function invocation, copied by the `large-copy` job (docs/runtime.md
"Inline or job").

capture-part estimates the part's copy before any of it starts (the bytes its plan lists). Over
`copy_job_threshold_bytes`, and with a large-copy job configured, it hands the part off instead of copying it:
  1. the part's message is filed as the job's ticket (claim `large-copy/<member key>/job-ticket`: the job's claims
     live outside the fan-out's member prefix, which the barrier counts), with the task count
     (about one task per threshold's worth of bytes, at most `copy_job_max_tasks`, at most one per object);
  2. one execution is started, once (claim `large-copy/<member key>/job-start`, whose result names the execution);
  3. each task copies its slice of the part's objects (objects balanced by bytes over the tasks, by
     CLOUD_RUN_TASK_INDEX / CLOUD_RUN_TASK_COUNT) and files the slice's result (claim `large-copy/<member key>/task-<i>-of-<n>`);
     a retried task redoes only what is not stored: write-once copies already done are seen as done, and the
     adapters resume a copy interrupted half way (adapters/s3_copy.py's recorded parts, GCS rewrite tokens);
  4. the task that finds every slice filed files the part's outcome under the member key itself, as the inline
     path would (same errors, same part manifest), and publishes the part's message again: capture-part, seeing
     the outcome stored, advances the barrier as after an inline copy.
A task's last attempt that still fails files its objects as not preserved (`copy_failed`), so a part never stays
handed off forever.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from rlcleanup.errors import RetryLater, TransientError
from rlcleanup.models.events import CapturePartMessage
from rlcleanup.models.outcomes import CapturePartOutcome
from rlcleanup.models.parts import CaptureItem, CapturePart
from rlcleanup.models.record import PreservedObject
from rlcleanup.runtime.claims import once, stored, stored_under
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stages.common import publish, run_errors
from rlcleanup.steps import capture as capture_step
from rlcleanup.steps.expiry import stamp

FAN_OUT = "capture"  # topology.yaml fan_outs[].name: a finished job's part goes back on its topic
JOB_CLAIMS = "large-copy/"  # the prefix of the job's own claims (never under a fan-out's member prefix)
COPY_RUN_VAR, COPY_TICKET_VAR = "RLCLEANUP_COPY_RUN_ID", "RLCLEANUP_COPY_TICKET"  # settings.CopyJobSettings


class CopyJobTicket(BaseModel):
    """What the job is to copy: the part's message as capture-part received it, and the claim its outcome goes
    under (the inline path's)."""

    member_key: str
    tasks: int
    message: CapturePartMessage


class CopyJobStart(BaseModel):
    execution: str


class CopySlice(BaseModel):
    """One task's slice of the part, copied."""

    objects: list[PreservedObject] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)  # sources the task's last attempt could not copy
    cause: str = ""


def planned_bytes(part: CapturePart) -> int:
    return sum(item.size for item in part.items)


def goes_to_job(p: Ports, part: CapturePart) -> bool:
    """The estimate made before the copy starts: more bytes than one invocation should copy, and a job to give
    them to (none configured: inline, as before)."""
    return p.large_copy_job is not None and planned_bytes(part) > p.copy_job_threshold_bytes


def task_count(p: Ports, part: CapturePart) -> int:
    per_task = max(p.copy_job_threshold_bytes, 1)
    return max(1, min(p.copy_job_max_tasks, len(part.items), math.ceil(planned_bytes(part) / per_task)))


def slice_items(items: list[CaptureItem], index: int, count: int) -> list[CaptureItem]:
    """Task `index`'s objects: largest first, each to the task with the fewest bytes so far (ties: the lowest
    index), so every task computes the same split; returned in the part's order."""
    loads = [0] * count
    owner: dict[int, int] = {}
    for position in sorted(range(len(items)), key=lambda i: (-items[i].size, i)):
        task = min(range(count), key=lambda t: (loads[t], t))
        loads[task] += items[position].size
        owner[position] = task
    return [item for position, item in enumerate(items) if owner[position] == index]


def hand_off(p: Ports, msg: CapturePartMessage, key: str) -> str:
    """File the ticket and start the job, each once; returns what the capture-part delivery reports."""
    assert p.large_copy_job is not None
    launcher = p.large_copy_job
    ticket_key = f"{JOB_CLAIMS}{key}/job-ticket"
    tasks = task_count(p, msg.part)
    ticket = once(
        p, msg.run_id, ticket_key, lambda: CopyJobTicket(member_key=key, tasks=tasks, message=msg), model=CopyJobTicket
    )

    def start() -> CopyJobStart:
        env = {COPY_RUN_VAR: msg.run_id, COPY_TICKET_VAR: ticket_key}
        return CopyJobStart(execution=launcher.start(env, tasks=ticket.tasks))

    execution = once(p, msg.run_id, f"{JOB_CLAIMS}{key}/job-start", start, model=CopyJobStart).execution
    size = planned_bytes(msg.part)
    return f"capture part {msg.part.part_id} ({size} bytes) handed to the large-copy job: {execution}"


def part_outcome(p: Ports, msg: CapturePartMessage, result: capture_step.PartResult) -> CapturePartOutcome:
    """The part's errors filed on the run and its outcome: one rule for the inline copy and the job."""
    errors = [f"write_once_conflict: {d} exists with different content; not overwritten" for d in result.conflicts]
    now = p.clock.now()
    dead = {i.source: i.expires_at for i in msg.part.items if i.expires_at is not None and i.expires_at <= now}
    errors += [
        f"evidence_expired: {s} was deleted by its temp storage lifecycle (expired {stamp(dead[s])}) before it "
        "was copied"
        if s in dead
        else f"source_vanished: {s} was listed but is gone"
        for s in result.missing
    ]
    p.records.add_errors(msg.run_id, run_errors("capture", errors))
    return CapturePartOutcome(objects=len(result.objects), bytes=sum(o.size for o in result.objects))


def run_task(p: Ports, run_id: str, ticket_key: str, index: int, count: int, *, last_attempt: bool) -> str:
    """One task's attempt: copy its slice (once), then file the part if every slice is in. Raises TransientError
    when this is not the last attempt and a later one may succeed."""
    ticket = stored(p, run_id, ticket_key, CopyJobTicket)
    if ticket is None:
        raise RetryLater(f"{run_id}: no large-copy ticket {ticket_key!r} is filed (yet)")
    msg = ticket.message
    items = slice_items(msg.part.items, index, count)

    def copy() -> CopySlice:
        try:
            done = capture_step.copy_items(p.storage, msg.dest_root, msg.part.part_id, items)
        except TransientError as exc:
            if not last_attempt:
                raise
            cause = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            return CopySlice(failed=[item.source for item in items], cause=cause)
        return CopySlice(objects=done.objects, conflicts=done.conflicts, missing=done.missing)

    once(p, run_id, f"{JOB_CLAIMS}{ticket.member_key}/task-{index}-of-{count}", copy, model=CopySlice)
    return finish(p, ticket, count)


def finish(p: Ports, ticket: CopyJobTicket, count: int) -> str:
    msg, run_id = ticket.message, ticket.message.run_id
    slices = stored_under(p, run_id, f"{JOB_CLAIMS}{ticket.member_key}/task-", CopySlice)
    if len(slices) < count:
        return f"slice filed; {len(slices)} of {count} tasks done"

    def file_part() -> CapturePartOutcome:
        result = capture_step.PartResult(part_id=msg.part.part_id)
        failed, unpreserved = [], []
        for _, piece in sorted(slices.items()):
            result.objects += piece.objects
            result.conflicts += piece.conflicts
            result.missing += piece.missing
            unpreserved += piece.failed
            failed += [f"copy_failed: {s} was not copied by the large-copy job ({piece.cause})" for s in piece.failed]
        order = {item.source: i for i, item in enumerate(msg.part.items)}
        result.objects.sort(key=lambda o: order.get(o.source, len(order)))
        capture_step.write_part_manifest(p.storage, msg.dest_root, result)
        p.records.add_errors(run_id, run_errors("capture", failed))
        outcome = part_outcome(p, msg, result)
        dies = [i.expires_at for i in msg.part.items if i.source in set(unpreserved) and i.expires_at is not None]
        outcome.unpreserved, outcome.unpreserved_expires_at = unpreserved, min(dies, default=None)
        return outcome

    try:
        once(p, run_id, ticket.member_key, file_part, model=CapturePartOutcome)
    except RetryLater:
        return "another task is filing the part"
    publish(p, p.topology.fan_out(FAN_OUT).topic, msg)  # capture-part sees the outcome stored and advances the barrier
    return f"part {msg.part.part_id} filed from {count} task(s)"
