"""Function handlers: decode → guard idempotency → call a step from `rlcleanup.steps` → persist → publish.

The same handlers run under functions-framework (Pub/Sub + Firestore + GCS) and in the embedded default
(in-process bus + SQLite + local files). Idempotency keys are domain identities (run_id + step + part), so a
publisher retry with a new message id is still a duplicate. Fan-in is a claim on `fanin:<stage>`: exactly one
member wins it, and a redelivered member re-checks, so a crash between finishing and fanning in loses nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from rlcleanup.errors import ErrorKind, PermanentError, RetryLater, defect_message, error_kind
from rlcleanup.models.events import (
    CandidateMessage,
    CapturePartMessage,
    CapturePlanPageMessage,
    JobEvent,
    LogScanPartMessage,
    LogScanPlanPageMessage,
    RunMessage,
    target_step,
)
from rlcleanup.models.outcomes import CapturePartOutcome, LogScanOutcome, ValidationOutcome
from rlcleanup.models.record import UNKNOWN_RUN_URI, Candidate, CompletionRecord, RunError
from rlcleanup.models.vocab import ClassificationKind, RecordStatus
from rlcleanup.runtime import attempt_scope, authority_handlers, source_handlers
from rlcleanup.runtime.attempt_scope import pass_id, scoped
from rlcleanup.runtime.claims import BUSY
from rlcleanup.runtime.claims import once as _once
from rlcleanup.runtime.evidence import finish_evidence
from rlcleanup.runtime.failures import decode, finish_failed, identify, to_permanent
from rlcleanup.runtime.guard import guarded_ports
from rlcleanup.runtime.layouts import CLASSIFY_KEY, run_layout, snapshot_layout
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.topology import load_topology
from rlcleanup.settings import in_run_buckets
from rlcleanup.steps import capture as capture_step
from rlcleanup.steps import logscan
from rlcleanup.steps.classify import classify
from rlcleanup.steps.facts import run_facts, safe_run_id
from rlcleanup.steps.layout import RunLayout, discover
from rlcleanup.steps.metrics_store import load_metric_steps
from rlcleanup.steps.settle import settle_terminal_state
from rlcleanup.steps.validate import (
    CANDIDATES_PER_BATCH,
    check_resume_safety,
    resume_not_applicable,
    validate_candidate,
    validate_many,
)
from rlcleanup.steps.wrapup import finish_record
from rlcleanup.uris import basename, parent

log = logging.getLogger(__name__)

Handler = Callable[[Ports, bytes, dict[str, str]], str]
VALIDATION_TARGETS = "fanout:validate"  # result key: the candidate-validation fan-out set of a run


def _publish(p: Ports, topic: str, message: BaseModel, **attributes: str) -> None:
    p.bus.publish(topic, message.model_dump_json().encode(), attributes)


def _errors(step: str, messages: list[str]) -> list[RunError]:
    return [RunError(step=step, code=m.split(":", 1)[0], message=m) for m in messages]


# ---------------------------------------------------------------- on-job-event (classify and route)


def on_job_event(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    event = decode(JobEvent, data)
    if not in_run_buckets(event.run_uri, p.run_buckets):
        raise PermanentError(
            "run_outside_buckets",
            f"{event.run_uri} is not in the run buckets this deployment reads ({', '.join(p.run_buckets or ())}; "
            "RLCLEANUP_RUN_BUCKETS): refused, nothing read",
        )
    hint = safe_run_id(event.run_id or f"{basename(parent(event.run_uri))}-{basename(event.run_uri)}")
    age = (p.clock.now() - event.observed_at).total_seconds()
    if age > p.max_event_age_seconds:
        p.records.record_event(hint, event.event_key, {"state": event.state, "outcome": f"dropped: {age:.0f}s old"})
        return "dropped: older than the max event age"
    if event.intent == "pre_cancel":
        if p.records.record_event(hint, event.event_key, {"state": event.state, "outcome": "pre_cancel requested"}):
            p.bus.publish("pre-cancel", data, {"run_id": hint})
        return "pre-cancel routed"
    if not event.is_terminal:
        p.records.record_event(hint, event.event_key, {"state": event.state, "outcome": "ignored: non-terminal"})
        return "ignored: non-terminal state"

    layout = discover(p.storage, event.run_uri)
    facts = run_facts(layout)
    run_id = facts.run_id
    authority_handlers.check_run_roots(layout, p.run_buckets)  # config-named roots stay inside the run buckets
    authority_handlers.bind_run_identity(p, run_id, layout.run_uri)  # a second run claiming the id: a conflict
    p.records.record_event(
        run_id, event.event_key, {"state": event.state, "source": event.source, "outcome": "terminal"}
    )
    preserve_root = authority_handlers.deployment_preserve_root(p, event)
    # Which end of the run this is: its first, one already handled, or a resubmitted step's new end.
    marks = attempt_scope.end_marks(p.storage, layout)
    scope = attempt_scope.choose_scope(
        p.claims, run_id, marks, confirm=lambda: attempt_scope.end_marks(p.storage, discover(p.storage, layout.run_uri))
    )
    if scope is None:
        return f"duplicate: {run_id} already classified (no new end: {_marks_text(marks)})"

    def work() -> dict[str, Any]:
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
            launch_command=facts.launch_command,
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
            _publish(p, "agentic-runs", next_msg)
        elif kind is ClassificationKind.standard:
            # Discover once: every later hop reads this snapshot instead of listing the run again.
            snapshot = snapshot_layout(p, run_id, preserve_root, layout, scope)
            _publish(p, "run-classified", next_msg)
        return {"kind": kind.value, **snapshot, "end": marks.model_dump(mode="json")}

    result = _once(p, run_id, scoped(scope, CLASSIFY_KEY), work)
    which = f" (new end, pass {pass_id(scope)})" if scope else ""
    return f"classified {run_id}{which}: {result['kind']}" if result else f"duplicate: {run_id} already classified"


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


# ---------------------------------------------------------------- a plan in pages (the log-scan and capture plans)


def _page_before(p: Ports, run_id: str, scope: str, plan: str, key: str, page: int) -> dict[str, Any]:
    """The stored page a continuation resumes from (where to read comes from here, never from the message)."""
    before = p.claims.result(run_id, scoped(scope, f"{key}:{page - 1}"))
    if before is None:
        # Not yet, rather than bad input: a continuation from before a record-store loss can arrive before the
        # re-emitted run stores its page 0 again (test_faults' Firestore restart). Retried with backoff; one that
        # never finds its page is dead-lettered by Pub/Sub.
        raise RetryLater(f"{plan} page {page} of {run_id}: page {page - 1} is not stored yet")
    if before.get("next") is None:
        raise PermanentError("bad_input", f"{plan} page {page} of {run_id}: the plan ended before it")
    return before


def _stored_page(p: Ports, run_id: str, key: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """This page's result: planned now, or stored by an earlier delivery."""
    done = _once(p, run_id, key, work) or p.claims.result(run_id, key)  # None from _once: planned before
    if done is None:
        raise RetryLater(f"{run_id}/{key}: stored result not readable yet")
    return done


def _page_doc(parts: list[Any], dest_root: str, msg: RunMessage, listed: int, nxt: BaseModel | None) -> dict[str, Any]:
    """A stored page: its part ids, where the plan writes, the run, how many objects it listed, and the cursor of
    the next page (None on the last page)."""
    cursor = nxt.model_dump(mode="json") if nxt is not None else None
    return {
        "parts": parts,
        "dest_root": dest_root,
        "run": msg.model_dump(mode="json"),
        "listed": listed,
        "next": cursor,
    }


def _continue(p: Ports, topic: str, nxt: BaseModel, page: str, done: dict[str, Any]) -> str:
    """Queue the next page. Republished on a redelivery: the next page's claim makes it run once."""
    _publish(p, topic, nxt)
    return f"{page}: {len(done['parts'])} parts from {done['listed']} objects; next page queued"


def _every_page(p: Ports, run_id: str, scope: str, plan: str, key: str, last: int) -> list[dict[str, Any]]:
    """Pages 0..last in order, once every one is readable (the last page joins them into the whole plan)."""
    stored = p.claims.results(run_id, scoped(scope, f"{key}:"))
    keys = [scoped(scope, f"{key}:{n}") for n in range(last + 1)]
    missing = [k for k in keys if k not in stored]
    if missing:
        raise RetryLater(f"{run_id}: {plan} pages {missing} not readable yet")
    return [stored[k] for k in keys]


# ---------------------------------------------------------------- terminal state (log-scan fan-out, fan-in)


def establish_terminal_state(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    msg = decode(RunMessage, data)
    return _plan_log_scan_page(p, msg.run_id, msg.scope, 0, msg)


def _plan_log_scan_page(p: Ports, run_id: str, scope: str, page: int, first: RunMessage | None) -> str:
    """One page of the log-scan plan: at most `p.capture_page_objects` log objects listed, their parts published.
    As with the capture plan, a page that stops short publishes the next page (a continuation on log-scan-parts,
    after its own result is stored), and the last page stores the whole plan (`terminal-plan`: every page's part
    ids), which the terminal fan-in waits for."""
    key = scoped(scope, f"terminal-plan-page:{page}")

    def work() -> dict[str, Any]:
        if page == 0 and first is not None:
            msg, cursor = first, None
            dest_root = capture_step.preserved_root(msg.preserve_root, msg.run_id, pass_id(msg.scope))
        else:
            before = _page_before(p, run_id, scope, "log-scan plan", "terminal-plan-page", page)
            msg, dest_root = RunMessage.model_validate(before["run"]), before["dest_root"]
            cursor = logscan.LogPlanCursor.model_validate(before["next"])
        layout = run_layout(p, run_id, msg.run_uri, scope)
        planned = logscan.plan_log_scan_page(p.storage, layout, cursor, p.capture_page_objects)
        for part in logscan.first_parts(planned.parts):  # a cut file's later segments: each published by the one before
            part_msg = LogScanPartMessage(run_id=run_id, scope=scope, dest_root=dest_root, part=part)
            _publish(p, "log-scan-parts", part_msg)
        # Part ids and attempt ids only (as maps: Firestore has no nested arrays); the file lists travel in the
        # messages, so this result stays small however many logs the run has.
        parts = [{"part_id": part.part_id, "attempt_id": part.attempt_id} for part in planned.parts]
        return _page_doc(parts, dest_root, msg, planned.listed, planned.next)

    done = _stored_page(p, run_id, key, work)
    if done["next"] is not None:
        nxt = LogScanPlanPageMessage(run_id=run_id, scope=scope, plan_page=page + 1)
        return _continue(p, "log-scan-parts", nxt, f"log-scan plan page {page}", done)

    def whole() -> dict[str, Any]:
        pages = _every_page(p, run_id, scope, "log-scan plan", "terminal-plan-page", page)
        return {
            "parts": [part for stored in pages for part in stored["parts"]],
            "dest_root": done["dest_root"],
            "run": done["run"],
            "pages": page + 1,
        }

    _once(p, run_id, scoped(scope, "terminal-plan"), whole)
    return _maybe_fan_in_terminal(p, run_id, scope)


def scan_log_part(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    if _is_plan_page(data):  # a paged log-scan plan's continuation shares the log-scan-parts topic
        page = decode(LogScanPlanPageMessage, data)
        return _plan_log_scan_page(p, page.run_id, page.scope, page.plan_page, None)
    msg = decode(LogScanPartMessage, data)

    def work() -> dict[str, Any]:
        uri, problems, after = logscan.scan_part(p.storage, msg.dest_root, msg.part)
        if after is not None:  # the next segment of a cut file, with the scanner state it starts from
            _publish(p, "log-scan-parts", msg.model_copy(update={"part": after}))
        outcome = LogScanOutcome(uri=uri, files=len(msg.part.uris), bytes=msg.part.bytes, problems=len(problems))
        return outcome.model_dump(mode="json")

    _once(p, msg.run_id, scoped(msg.scope, f"log-scan:{msg.part.part_id}"), work)
    return _maybe_fan_in_terminal(p, msg.run_id, msg.scope)


def _maybe_fan_in_terminal(p: Ports, run_id: str, scope: str) -> str:
    """When every log-scan part is stored: settle the terminal state once, then try the capture fan-in."""
    plan = p.claims.result(run_id, scoped(scope, "terminal-plan"))
    if plan is None:
        return "waiting: log-scan plan"
    parts = [(part["part_id"], part["attempt_id"]) for part in plan["parts"]]
    finished = p.claims.done_count(run_id, scoped(scope, "log-scan:"))  # the cheap gate: no results read
    if finished < len(parts):
        return f"waiting: {len(parts) - finished} log-scan parts"
    done = p.claims.results(run_id, scoped(scope, "log-scan:"))
    pending = [part_id for part_id, _ in parts if scoped(scope, f"log-scan:{part_id}") not in done]
    if pending:
        return f"waiting: {len(pending)} log-scan parts"
    msg = RunMessage.model_validate(plan["run"])
    outcomes = {
        part_id: LogScanOutcome.model_validate(done[scoped(scope, f"log-scan:{part_id}")]) for part_id, _ in parts
    }

    def work() -> dict[str, Any]:
        layout = run_layout(p, msg.run_id, msg.run_uri, scope)
        # A failed part has no stored scan: settle on the parts that were read, and say which files were not.
        unread = {part_id: outcome.unread for part_id, outcome in outcomes.items() if not outcome.ok}
        scans = logscan.assemble(p.storage, plan["dest_root"], parts, unread)
        p.records.add_errors(run_id, _errors("terminal_state", _unread_logs(outcomes)))
        existing = p.records.get(run_id)
        fields, errors = settle_terminal_state(
            p.storage,
            layout,
            scans,
            plan["dest_root"],
            event_state=msg.event_state,
            event_source=msg.event_source,
            controller_absent=msg.controller_absent,
            pre_cancel=existing is not None and existing.pre_cancel is not None,
            now=p.clock.now(),
        )
        p.records.update(run_id, fields)
        p.records.add_errors(run_id, _errors("terminal_state", errors))
        return {"terminal_state": fields.get("terminal_state")}

    result = _once(p, run_id, scoped(scope, "terminal"), work, busy_ok=True)
    if result is BUSY:
        return "terminal fan-in in progress in another delivery"
    return _maybe_fan_in_capture(p, run_id, msg.run_uri, msg.preserve_root, scope)


def _unread_logs(outcomes: dict[str, LogScanOutcome]) -> list[str]:
    return [
        f"unreadable_log: {uri} was not scanned (log-scan part {part_id} failed: {outcome.error.code})"
        for part_id, outcome in outcomes.items()
        if not outcome.ok and outcome.error
        for uri in outcome.unread
    ]


# ---------------------------------------------------------------- capture (plan, parts, fan-in)


def plan_capture(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    msg = decode(RunMessage, data)
    return _plan_capture_page(p, msg.run_id, msg.scope, 0, msg)


def _plan_capture_page(p: Ports, run_id: str, scope: str, page: int, first: RunMessage | None) -> str:
    """One page of the capture plan: at most `p.capture_page_objects` objects listed, their parts published. A
    page that stops short publishes the next page (a continuation on capture-parts, after its own result is
    stored, so the next page always finds its cursor); the last page stores the whole plan (`capture-plan`:
    every page's part ids), which the capture fan-in waits for."""
    key = scoped(scope, f"capture-plan-page:{page}")

    def work() -> dict[str, Any]:
        if page == 0 and first is not None:
            msg, cursor = first, None
        else:
            before = _page_before(p, run_id, scope, "capture plan", "capture-plan-page", page)
            msg = RunMessage.model_validate(before["run"])
            cursor = capture_step.PageCursor.model_validate(before["next"])
        layout = run_layout(p, run_id, msg.run_uri, scope)
        planned = capture_step.plan_capture_page(
            p.storage,
            layout,
            run_id,
            msg.preserve_root,
            pass_id(scope),
            page=page,
            cursor=cursor,
            limit=p.capture_page_objects,
        )
        p.records.add_errors(run_id, _errors("capture", planned.errors))
        for part in planned.parts:
            part_msg = CapturePartMessage(
                run_id=run_id, scope=scope, run_uri=msg.run_uri, dest_root=planned.dest_root, part=part
            )
            _publish(p, "capture-parts", part_msg)
        return _page_doc([part.part_id for part in planned.parts], planned.dest_root, msg, planned.listed, planned.next)

    done = _stored_page(p, run_id, key, work)
    if done["next"] is not None:
        nxt = CapturePlanPageMessage(run_id=run_id, scope=scope, plan_page=page + 1)
        return _continue(p, "capture-parts", nxt, f"capture plan page {page}", done)
    run = RunMessage.model_validate(done["run"])

    def whole() -> dict[str, Any]:
        pages = _every_page(p, run_id, scope, "capture plan", "capture-plan-page", page)
        if page > 0:
            merged = capture_step.merge_listings(p.storage, done["dest_root"], page + 1)
            p.records.add_errors(run_id, _errors("capture", merged))
        return {
            "parts": [part_id for stored in pages for part_id in stored["parts"]],
            "dest_root": done["dest_root"],
            "preserve_root": run.preserve_root,
            "pages": page + 1,
        }

    _once(p, run_id, scoped(scope, "capture-plan"), whole)
    return _maybe_fan_in_capture(p, run_id, run.run_uri, run.preserve_root, scope)


def capture_part(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    if _is_plan_page(data):  # a paged capture plan's continuation shares the capture-parts topic
        page = decode(CapturePlanPageMessage, data)
        return _plan_capture_page(p, page.run_id, page.scope, page.plan_page, None)
    msg = decode(CapturePartMessage, data)

    def work() -> dict[str, Any]:
        result = capture_step.copy_part(p.storage, msg.dest_root, msg.part)
        errors = [f"write_once_conflict: {d} exists with different content; not overwritten" for d in result.conflicts]
        errors += [f"source_vanished: {s} was listed but is gone" for s in result.missing]
        p.records.add_errors(msg.run_id, _errors("capture", errors))
        outcome = CapturePartOutcome(objects=len(result.objects), bytes=sum(o.size for o in result.objects))
        return outcome.model_dump(mode="json")

    _once(p, msg.run_id, scoped(msg.scope, f"capture-part:{msg.part.part_id}"), work)
    plan = p.claims.result(msg.run_id, scoped(msg.scope, "capture-plan")) or {}
    return _maybe_fan_in_capture(p, msg.run_id, msg.run_uri, plan.get("preserve_root", ""), msg.scope)


def _is_plan_page(data: bytes) -> bool:
    try:
        payload = json.loads(data)
    except ValueError:
        return False  # decode() below says what is wrong with it
    return isinstance(payload, dict) and "plan_page" in payload and "part" not in payload


def _maybe_fan_in_capture(p: Ports, run_id: str, run_uri: str, preserve_root: str, scope: str) -> str:
    plan = p.claims.result(run_id, scoped(scope, "capture-plan"))
    if plan is None or p.claims.result(run_id, scoped(scope, "terminal")) is None:
        return "waiting: terminal state and capture plan"
    finished = p.claims.done_count(run_id, scoped(scope, "capture-part:"))  # the cheap gate: no results read
    if finished < len(plan["parts"]):
        return f"waiting: {len(plan['parts']) - finished} capture parts"
    done = p.claims.results(run_id, scoped(scope, "capture-part:"))
    pending = [pid for pid in plan["parts"] if scoped(scope, f"capture-part:{pid}") not in done]
    if pending:
        return f"waiting: {len(pending)} capture parts"

    outcomes = {
        pid: CapturePartOutcome.model_validate(done[scoped(scope, f"capture-part:{pid}")]) for pid in plan["parts"]
    }

    def work() -> dict[str, Any]:
        # A failed part wrote no part manifest: the manifest lists what was preserved; errors[] what was not.
        preserved = [pid for pid, outcome in outcomes.items() if outcome.ok]
        summary = capture_step.finalize_capture(p.storage, plan["dest_root"], run_id, preserved)
        p.records.add_errors(run_id, _errors("capture", _unpreserved(outcomes)))
        earlier = p.records.get(run_id) if scope else None  # a later pass: the newest location first, keep the rest
        older = [loc for loc in (earlier.preserved_locations if earlier else []) if loc != plan["dest_root"]]
        p.records.update(
            run_id,
            {
                "manifest_uri": summary.manifest_uri,
                "preserved_locations": [plan["dest_root"], *older],
                "preserved_object_count": summary.object_count,
                "preserved_bytes": summary.total_bytes,
            },
        )
        p.records.add_errors(run_id, _errors("capture", summary.errors))
        layout = run_layout(p, run_id, run_uri, scope)
        candidates = [f"candidate:{step}" for step in layout.export_steps]
        targets = [*candidates, "resume"]
        # The fan-in set is stored BEFORE the fan-out: a validation that finishes before this claim completes
        # must still know which siblings to wait for (an empty/unknown set would look like "all done").
        p.claims.complete(run_id, scoped(scope, VALIDATION_TARGETS), {"targets": targets})
        # One message per batch of candidates (one invocation validates a batch together), one for resume.
        batches = [candidates[i : i + CANDIDATES_PER_BATCH] for i in range(0, len(candidates), CANDIDATES_PER_BATCH)]
        for batch in batches:
            _publish(p, "candidate-validation", _validation(run_id, scope, run_uri, preserve_root, targets=batch))
        _publish(p, "candidate-validation", _validation(run_id, scope, run_uri, preserve_root, target="resume"))
        return {"targets": targets}

    result = _once(p, run_id, scoped(scope, "fanin:capture"), work, busy_ok=True)
    if result is BUSY:
        return "fan-in in progress in another delivery"
    return f"fan-in: {len(result['targets'])} validations started" if result else "fan-in already done"


def _unpreserved(outcomes: dict[str, CapturePartOutcome]) -> list[str]:
    return [
        f"capture_part_failed: part {pid} could not preserve {len(outcome.unpreserved)} objects"
        f" ({outcome.error.code}: {outcome.error.message}); first: {', '.join(outcome.unpreserved[:3])}"
        for pid, outcome in outcomes.items()
        if not outcome.ok and outcome.error
    ]


# ---------------------------------------------------------------- validation (fan-out per candidate, fan-in)


def _validation(run_id: str, scope: str, run_uri: str, preserve_root: str, **members: Any) -> CandidateMessage:
    return CandidateMessage(run_id=run_id, scope=scope, run_uri=run_uri, preserve_root=preserve_root, **members)


def validate_one(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    msg = decode(CandidateMessage, data)
    if msg.targets:
        _validate_batch(p, msg)
    else:
        _validate_target(p, msg)
    return _validation_fan_in(p, msg)


def _validate_target(p: Ports, msg: CandidateMessage) -> None:
    """One member in its own message: a failure here is the member's (dispatch completes it as failed)."""

    def work() -> dict[str, Any]:
        if msg.step is None:
            layout = run_layout(p, msg.run_id, msg.run_uri, msg.scope)
            return ValidationOutcome(resume_safety=check_resume_safety(p.storage, layout)).model_dump(mode="json")
        inputs = _validation_inputs(p, msg)
        candidate = validate_candidate(
            p.storage, inputs.layout, msg.step, metric_steps=inputs.metric_steps, step_budget=inputs.step_budget
        )
        return ValidationOutcome(candidate=candidate).model_dump(mode="json")

    _once(p, msg.run_id, scoped(msg.scope, f"validate:{msg.target}"), work)


def _validate_batch(p: Ports, msg: CandidateMessage) -> None:
    """Several members in one invocation, validated together. Each still completes its own claim. A member whose
    validation fails (anything but a transient error) is sent on as a message of its own and fails there exactly
    as a lone member would, so a batch never decides a sibling's outcome. A transient error: the members that
    succeeded are completed, then it is raised and the redelivery redoes only the rest."""
    run_id, scope = msg.run_id, msg.scope
    todo = list(msg.targets)
    results: dict[str, Candidate | Exception]
    try:
        done = p.claims.results(run_id, scoped(scope, "validate:"))  # a redelivery redoes only the rest
        todo = [t for t in todo if scoped(scope, f"validate:{t}") not in done]
        inputs = _validation_inputs(p, msg)
        target_of = {step: t for t in todo if (step := target_step(t)) is not None}
        by_step = validate_many(
            p.storage,
            inputs.layout,
            list(target_of),
            metric_steps=inputs.metric_steps,
            step_budget=inputs.step_budget,
            validate=validate_candidate,
        )
        results = {target_of[step]: outcome for step, outcome in by_step.items()}
    except Exception as exc:  # what the whole batch needs failed: every member goes on alone
        results = dict.fromkeys(todo, exc)
    transient: Exception | None = None
    for target, outcome in results.items():
        if isinstance(outcome, Candidate):
            doc = ValidationOutcome(candidate=outcome).model_dump(mode="json")
            _once(p, run_id, scoped(scope, f"validate:{target}"), _returning(doc))
        elif error_kind(outcome) is ErrorKind.transient:
            transient = transient or outcome
        else:
            log.warning(
                "validation of %s in a batch of run %s failed (%s): sent on as its own message",
                target,
                run_id,
                defect_message(outcome),
                extra={"run_id": run_id},
            )
            _publish(
                p, "candidate-validation", _validation(run_id, scope, msg.run_uri, msg.preserve_root, target=target)
            )
    if transient is not None:
        raise transient


@dataclass(frozen=True)
class _ValidationInputs:
    layout: RunLayout
    metric_steps: set[int] | None
    step_budget: int | None


def _validation_inputs(p: Ports, msg: CandidateMessage) -> _ValidationInputs:
    """What validating any candidate of the run needs: the stored layout, the steps the metrics cover, the budget."""
    layout = run_layout(p, msg.run_id, msg.run_uri, msg.scope)
    record = p.records.get(msg.run_id)
    metric_steps = load_metric_steps(p.storage, record.metrics_uri) if record and record.metrics_uri else None
    return _ValidationInputs(layout, metric_steps, record.step_budget if record else None)


def _returning(doc: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    return lambda: doc


def _validation_fan_in(p: Ports, msg: CandidateMessage) -> str:
    scope = msg.scope
    fanout = p.claims.result(msg.run_id, scoped(scope, VALIDATION_TARGETS))
    if fanout is None:  # cannot happen for messages the fan-in published (it stores the set first)
        raise RetryLater(f"{msg.run_id}: validation targets not stored yet")
    targets: list[str] = fanout["targets"]
    # The cheap gate first (a count, no results read): only the last validations to finish read every result.
    if p.claims.done_count(msg.run_id, scoped(scope, "validate:")) < len(targets):
        return "waiting: other candidates"
    done = p.claims.results(msg.run_id, scoped(scope, "validate:"))
    if any(scoped(scope, f"validate:{t}") not in done for t in targets):
        return "waiting: other candidates"

    def start_selection() -> dict[str, Any]:
        selection = RunMessage(run_id=msg.run_id, scope=scope, run_uri=msg.run_uri, preserve_root=msg.preserve_root)
        _publish(p, "run-selection", selection)
        return {}

    started = _once(p, msg.run_id, scoped(scope, "fanin:validate"), start_selection, busy_ok=True)
    if started is BUSY:
        return "fan-in in progress in another delivery"
    return "selection started" if started is not None else "fan-in already done"


# ---------------------------------------------------------------- selection and the finished record


def select_candidate(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    msg = decode(RunMessage, data)

    def work() -> dict[str, Any]:
        results = p.claims.results(msg.run_id, scoped(msg.scope, "validate:")).values()
        outcomes = [ValidationOutcome.model_validate(r) for r in results]
        candidates = sorted((o.candidate for o in outcomes if o.candidate), key=lambda c: c.step)
        resume = next((o.resume_safety for o in outcomes if o.resume_safety), None)
        layout = run_layout(p, msg.run_id, msg.run_uri, msg.scope)
        record = p.records.get(msg.run_id)
        if record is None:
            raise PermanentError("no_record", f"run {msg.run_id} has no record to finish")
        fields = finish_record(p.storage, layout, record, candidates, resume)
        p.records.update(msg.run_id, fields)
        finish_evidence(p, msg.run_id)  # report.md/.html beside the evidence, then manifest.json listing them
        p.bus.publish(
            "record-ready",
            json.dumps({"run_id": msg.run_id, "status": fields["status"]}).encode(),
            {"run_id": msg.run_id},
        )
        return {"status": fields["status"]}

    result = _once(p, msg.run_id, scoped(msg.scope, "select"), work)
    return f"record {result['status']}" if result else "duplicate: record already finished"


HANDLERS: dict[str, Handler] = {
    "on_job_event": on_job_event,
    "establish_terminal_state": establish_terminal_state,
    "scan_log_part": scan_log_part,
    "plan_capture": plan_capture,
    "capture_part": capture_part,
    "validate_candidate": validate_one,
    "select_candidate": select_candidate,
    "apply_grant": authority_handlers.apply_grant,
    "capture_pre_cancel": authority_handlers.capture_pre_cancel,
    "retry_waiting_grants": authority_handlers.retry_waiting_grants,
    "on_storage_event": source_handlers.on_storage_event,
    "sweep": source_handlers.sweep,
    "on_k8s_log_entry": source_handlers.on_k8s_log_entry,
}


def dispatch(
    p: Ports,
    entry_point: str,
    dead_letter_topic: str,
    data: bytes,
    attributes: dict[str, str],
    *,
    message_id: str | None = None,
) -> str:
    """Run a handler. Transient errors (and defects within their retry budget) raise: the delivery is retried.
    Permanent ones are recorded and dead-lettered, the failed step is completed as failed, and the message acked."""
    handler = HANDLERS[entry_point]
    p = guarded_ports(p, load_topology().function(entry_point))  # publishes only what topology.yaml declares
    p = replace(p, delivery_id=message_id)  # this delivery's own copy: claims name it as their lease owner
    try:
        return handler(p, data, attributes)
    except Exception as exc:
        permanent = to_permanent(p, entry_point, data, message_id, exc)  # re-raises what should be retried
        record_poison(p, entry_point, dead_letter_topic, data, attributes, permanent)
        return finish_failed(p, entry_point, data, exc, permanent, lambda: handler(p, data, attributes))


def record_poison(
    p: Ports, step: str, dead_letter_topic: str, data: bytes, attributes: dict[str, str], error: PermanentError
) -> None:
    """Attach the error to the run when the payload names one; always park a copy on the dead-letter topic."""
    run_id, run_uri = _identify(data)
    message = f"{error}"[:2000]
    if run_id:
        if p.records.get(run_id) is None:
            p.records.create_if_absent(
                CompletionRecord(run_id=run_id, run_uri=run_uri or UNKNOWN_RUN_URI, status=RecordStatus.failed)
            )
        p.records.add_errors(run_id, [RunError(step=step, code=error.code, message=message)])
    else:
        import hashlib

        key = hashlib.sha256(data).hexdigest()[:32]
        p.records.put_doc(
            "poison_messages", key, {"step": step, "code": error.code, "message": message, "size": len(data)}
        )
    p.bus.publish(dead_letter_topic, data, {**attributes, "rlcleanup_error": error.code, "rlcleanup_step": step})
    log.warning("permanent error in %s for run %s: %s: %s", step, run_id or "?", error.code, message)


def resolve_run_id(p: Ports, event: JobEvent) -> str:
    """The run id the pipeline files a run under: from its own records, else from its path (as errors are)."""
    try:
        return run_facts(discover(p.storage, event.run_uri)).run_id
    except Exception:
        return _identify(event.model_dump_json().encode())[0] or "unnamed-run"


_identify = identify  # the name the hostile-input tests use
