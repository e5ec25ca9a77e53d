"""The reconciling sweep: level-triggered, so a missed, late or never-sent event still ends in a finished record.

Cloud Scheduler publishes a tick to `sweep`; the tick fans out into bounded continuation messages on the same
topic, each one page of work:
- `SweepPage`: one page of one prefix under a configured run root (a delimiter listing: one request per page).
  Above the run level it publishes a page per child prefix; at the run level it looks at each run root (one
  listing of R's own objects, one read of `.executor_status`) and emits a `JobEvent` (source `sweep`) for a run
  whose durable state is terminal and that has no finished record. A run whose `.executor_status` says RUNNING
  with no fresh `.executor_status.lock` (Marin refreshes it every ~30 s; SIGKILL leaves it stale, Ctrl-C deletes
  it) and nothing written for `lock_stale_seconds` lost its controller: it is emitted as `ABSENT`, settled from
  its artifacts. The next page travels as a continuation (`page_token`).
- `SweepRecords`: records stuck `in_progress` past the stall deadline (default 2 x the slowest function timeout
  after the record's last update) are re-driven by republishing the stage messages that can be rebuilt from
  stored state (the same messages their stages publish; every stage is claim-guarded, so a duplicate is a no-op),
  or marked `stalled` with exactly what is missing when the missing work cannot be rebuilt.
- `SweepController`: one poll of a job-state controller this deployment configures (Iris, Ray: the
  `JobController` port, ports/controllers.py; the wiring builds it from the registry, adapters/controllers/).
Events are hints and claims are the truth: the sweep may emit an event for a run twice; on-job-event's classify
claim makes it one run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlcleanup.models.documents import SourceSeen
from rlcleanup.models.events import JobEvent, RunMessage
from rlcleanup.models.plans import Classified, FanOutKeys, MemberSet, PassMark, PipelineHop, PipelineKeys
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import ClassificationKind, RecordStatus
from rlcleanup.ports.collections import SOURCE_SEEN, Documents
from rlcleanup.ports.records import IdempotencyStore, RunRecords
from rlcleanup.ports.storage import ListsChildren, ObjectInfo
from rlcleanup.settings import DeploymentSettings
from rlcleanup.steps.facts import safe_run_id
from rlcleanup.steps.layout import parse_executor_status
from rlcleanup.uris import basename, parent

SOURCE = "sweep"
STATUS_FILE = ".executor_status"
LOCK_FILE = ".executor_status.lock"
TERMINAL_TOKENS = frozenset({"SUCCESS", "FAILED", "DEP_FAILED", "CANCELLED"})
LAYOUT_C_MARKERS = ("latest_ckpt_global_step.txt", "resolved_config.yaml")
DEFAULT_PAGE_SIZE = 100
DEFAULT_LOCK_STALE_SECONDS = 900.0  # 30 x Marin's refresh: a long GC pause or a slow bucket never looks dead
DEFAULT_QUIESCENT_SECONDS = 24 * 3600.0  # Layout C has no status file: a day with no new object ends it
DEFAULT_RECORD_SCAN_LIMIT = 1000


class ChildLister(ListsChildren, Protocol):
    def stat(self, uri: str) -> ObjectInfo | None: ...

    def read_bytes(self, uri: str, max_bytes: int = ...) -> bytes: ...


# ---------------------------------------------------------------- configuration


class SweepRoot(BaseModel):
    """A run root: Marin output prefixes hold runs at `<prefix>/<name>/<version>` (depth 2), Layout C roots at
    `<root>/<RUN>` (depth 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    uri: str = Field(min_length=1)
    depth: int = Field(default=2, ge=1, le=6)


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    roots: list[SweepRoot] = []
    stall_seconds: float = Field(gt=0)
    page_size: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=1000)
    lock_stale_seconds: float = Field(default=DEFAULT_LOCK_STALE_SECONDS, gt=0)
    quiescent_seconds: float = Field(default=DEFAULT_QUIESCENT_SECONDS, gt=0)
    record_scan_limit: int = Field(default=DEFAULT_RECORD_SCAN_LIMIT, ge=1)
    controllers: list[str] = []  # the controllers to poll, by registry name

    @classmethod
    def from_settings(
        cls, settings: DeploymentSettings, *, slowest_timeout_seconds: float, controllers: Sequence[str] = ()
    ) -> SweepConfig:
        """From the deployment settings (RLCLEANUP_SWEEP_ROOTS: a JSON list of {"uri", "depth"} or comma-separated
        URIs, depth 2; each tunable 0 = its default, the stall deadline 2 x the slowest function timeout) and the
        controllers the deployment polls (the wiring asks the controller registry: RLCLEANUP_IRIS_URL /
        RLCLEANUP_RAY_DASHBOARD switch theirs on). ValueError names what is wrong."""
        raw = settings.sweep_roots.strip()
        try:
            roots: list[Any] = (
                json.loads(raw) if raw.startswith("[") else [{"uri": p.strip()} for p in raw.split(",") if p.strip()]
            )
            fields: dict[str, Any] = {
                "roots": roots,
                "stall_seconds": settings.stall_seconds or 2 * slowest_timeout_seconds,
                "controllers": list(controllers),
            }
            for name, value in (
                ("page_size", settings.sweep_page_size),
                ("lock_stale_seconds", settings.sweep_lock_stale_seconds),
                ("quiescent_seconds", settings.sweep_quiescent_seconds),
            ):
                if value:
                    fields[name] = value
            return cls.model_validate(fields)
        except ValueError as exc:  # JSONDecodeError and ValidationError are ValueErrors
            detail = exc.errors()[0] if isinstance(exc, ValidationError) else None
            where = f"{detail['loc']}: {detail['msg']}" if detail else str(exc)
            raise ValueError(f"sweep configuration (RLCLEANUP_SWEEP_*): {where}") from exc


# ---------------------------------------------------------------- messages on the `sweep` topic


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SweepPage(_Msg):
    kind: Literal["page"] = "page"
    root: SweepRoot
    prefix: str  # the prefix whose children this page lists
    level: int = Field(ge=0)  # prefix's depth below the root (0 = the root)
    page_token: str | None = None


class SweepRecords(_Msg):
    kind: Literal["records"] = "records"


class SweepController(_Msg):
    kind: Literal["controller"] = "controller"
    source: str = Field(min_length=1)  # a controller's registry name; an unknown one fails closed when polled
    offset: int = Field(default=0, ge=0)


SweepMessage = SweepPage | SweepRecords | SweepController


def parse_sweep_message(data: bytes) -> SweepMessage | None:
    """A continuation message, or None for a tick (Cloud Scheduler's body is whatever the job says)."""
    try:
        payload = json.loads(data) if data.strip() else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict) or payload.get("kind") not in ("page", "records", "controller"):
        return None
    models: dict[str, type[SweepPage] | type[SweepRecords] | type[SweepController]] = {
        "page": SweepPage,
        "records": SweepRecords,
        "controller": SweepController,
    }
    return models[payload["kind"]].model_validate(payload)  # a malformed continuation: ValidationError


def tick(config: SweepConfig) -> list[SweepMessage]:
    """The fan-out of one scheduler tick: a page per root, the record scan, a poll per controller."""
    pages: list[SweepMessage] = [SweepPage(root=r, prefix=r.uri.rstrip("/"), level=0) for r in config.roots]
    return [*pages, SweepRecords(), *(SweepController(source=c) for c in config.controllers)]


# ---------------------------------------------------------------- run roots


@dataclass(frozen=True)
class RunVerdict:
    run_uri: str
    state: str | None  # the event state to emit (SUCCESS / FAILED / ... / ENDED / ABSENT), None: not terminal
    reason: str
    observed_at: datetime | None = None


def look_at_run(storage: ChildLister, run_uri: str, now: datetime, config: SweepConfig) -> RunVerdict:
    """Is this run root's durable state terminal? One listing of R's own objects, at most one small read."""
    page = storage.list_children(run_uri, None, 1000)
    objects = {basename(o.uri): o for o in page.objects}
    status = objects.get(STATUS_FILE)
    if status is not None:
        token = parse_executor_status(storage.read_bytes(status.uri, 1024 * 1024).decode("utf-8", "replace"))
        if token in TERMINAL_TOKENS:
            return RunVerdict(run_uri, token, f"{STATUS_FILE} reads {token}", status.updated)
        lock = objects.get(LOCK_FILE)
        newest = max((t for t in (status.updated, lock.updated if lock else None) if t is not None), default=None)
        if token == "RUNNING" and newest is not None and (now - newest).total_seconds() > config.lock_stale_seconds:
            how = "no lock" if lock is None else f"lock last refreshed {newest.isoformat(timespec='seconds')}"
            return RunVerdict(run_uri, "ABSENT", f"{STATUS_FILE} RUNNING with {how}: its controller vanished", newest)
        return RunVerdict(run_uri, None, f"{STATUS_FILE} reads {token or 'nothing'}: still running")
    if "terminal.json" in objects:
        return RunVerdict(run_uri, "SUCCESS", "terminal.json (written on success)", objects["terminal.json"].updated)
    if any(m in objects for m in LAYOUT_C_MARKERS):
        newest = _newest([*page.objects, *_logs(storage, run_uri)])
        if newest is not None and (now - newest).total_seconds() > config.quiescent_seconds:
            return RunVerdict(
                run_uri, "ABSENT", f"Layout C run quiet since {newest.isoformat(timespec='seconds')}", newest
            )
        return RunVerdict(run_uri, None, "Layout C run still writing")
    return RunVerdict(run_uri, None, "not a run root (no status, terminal.json or Layout C marker)")


def _logs(storage: ChildLister, run_uri: str) -> list[ObjectInfo]:
    return storage.list_children(f"{run_uri}/logs", None, 1000).objects


def _newest(objects: list[ObjectInfo]) -> datetime | None:
    return max((o.updated for o in objects if o.updated is not None), default=None)


def run_id_hint(run_uri: str, depth: int = 2) -> str:
    """The id the pipeline files a run under: Layout A `<name>-<version>` (a run two levels below a Marin prefix,
    run-layout.md), Layout C its directory's name (a run directly below its root)."""
    if depth == 1:
        return safe_run_id(basename(run_uri))
    return safe_run_id(f"{basename(parent(run_uri))}-{basename(run_uri)}")


FINISHED = frozenset(s for s in RecordStatus if s is not RecordStatus.in_progress)


@dataclass
class PageOutcome:
    continuations: list[SweepPage]
    events: list[JobEvent]
    skipped: dict[str, str]  # run URI -> why no event
    seen: list[str] = field(default_factory=list)  # source_seen keys to mark after the events are published


def sweep_page(
    storage: ChildLister, records: RunRecords, msg: SweepPage, now: datetime, config: SweepConfig
) -> PageOutcome:
    page = storage.list_children(msg.prefix, msg.page_token, config.page_size)
    out = PageOutcome([], [], {})
    if page.next_token:
        out.continuations.append(msg.model_copy(update={"page_token": page.next_token}))
    if msg.level + 1 < msg.root.depth:
        out.continuations += [SweepPage(root=msg.root, prefix=p, level=msg.level + 1) for p in page.prefixes]
        return out
    for run_uri in page.prefixes:
        record = records.get(run_id_hint(run_uri, msg.root.depth))
        if record is not None:
            again, seen = ended_again(storage, records, run_uri, record)
            if seen is not None:
                out.seen.append(seen)
            if again is None:
                out.skipped[run_uri] = f"record {record.run_id} is {record.status.value}"
                continue
            verdict = again
        else:
            verdict = look_at_run(storage, run_uri, now, config)
        if verdict.state is None:
            out.skipped[run_uri] = verdict.reason
            continue
        out.events.append(
            JobEvent(
                source=SOURCE,
                job_id=f"sweep:{run_uri}",
                run_uri=run_uri,
                state=verdict.state,
                # The artifact's own time: the same run found by two sweeps is the same event (event_key).
                observed_at=verdict.observed_at or now,
                error=verdict.reason if verdict.state == "ABSENT" else None,
            )
        )
    return out


def ended_again(
    storage: ChildLister, records: RunRecords, run_uri: str, record: CompletionRecord
) -> tuple[RunVerdict | None, str | None]:
    """A finished run whose status token was rewritten after its record last changed, and reads terminal: maybe a
    resubmitted step's new end (runs without storage notifications learn of it here). One stat per recorded run;
    the token is read only when the stat says rewritten. on-job-event decides from the run's end marks whether
    it is a new end (runtime/attempt_scope.py). Returns the verdict and the `source_seen` key to mark once the hint is
    handled: each status version is looked at once, so a rewrite that was no new end costs one stat later on."""
    if record.status is RecordStatus.in_progress:
        return None, None  # the stalled-record scan owns it
    status = storage.stat(f"{run_uri}/{STATUS_FILE}")
    if status is None or status.updated is None or status.updated <= record.updated_at:
        return None, None
    version = status.fingerprint or str(status.generation or status.updated.isoformat())
    seen = safe_run_id(f"ended-again-{record.run_id}-{version}")
    if seen_hints(records).get(seen) is not None:
        return None, None
    token = parse_executor_status(storage.read_bytes(status.uri, 1024 * 1024).decode("utf-8", "replace"))
    if token not in TERMINAL_TOKENS:
        return None, seen  # RUNNING again: its terminal token (a later version) is hinted by a later sweep
    reason = f"{STATUS_FILE} rewritten after the record ({token}): the run may have ended again"
    return RunVerdict(run_uri, token, reason, status.updated), seen


SWEPT = SourceSeen(source="sweep")  # a hint the sweep gave


def seen_hints(records: RunRecords) -> Documents[SourceSeen]:
    """Hints already given (runtime/source_handlers.py keeps controller jobs there too)."""
    return SOURCE_SEEN.bind(records, SourceSeen)


# ---------------------------------------------------------------- stalled records

# The stage claim keys (what each stage stores when it is done) and the pipeline's hops come from topology.yaml as
# `PipelineKeys` (runtime/topology.py `Topology.pipeline_keys`), never spelled here.


@dataclass(frozen=True)
class Redrive:
    """What to do about one stalled run: messages to republish (topic, payload), and what is missing. Both: lost
    fan-out members, which the republished message asks their planner to publish again (once; a run still
    missing them at the next sweep is marked stalled). Only `missing`: nothing can redo it."""

    run_id: str
    republish: list[tuple[str, dict[str, Any]]]
    missing: list[str]


@dataclass(frozen=True)
class Stalled:
    """A run whose pass of the pipeline stopped short: scope "" is its first end, `<hex>/` a later end."""

    record: CompletionRecord
    scope: str = ""


def stalled_records(
    records: RunRecords, claims: IdempotencyStore, now: datetime, config: SweepConfig, keys: PipelineKeys
) -> list[Stalled]:
    """Records untouched past the stall deadline whose work is unfinished: an `in_progress` record (its first
    pass), or a finished record whose latest later pass (a resubmitted step's end) never reached selection. A
    later pass leaves the record's status as it was, so the status alone cannot find it."""
    limit = timedelta(seconds=config.stall_seconds)
    found = []
    for record in records.list_runs(limit=config.record_scan_limit):
        if now - record.updated_at <= limit:
            continue
        if record.status is RecordStatus.in_progress:
            found.append(Stalled(record))
        elif (scope := open_later_pass(claims, record.run_id, keys)) is not None:
            found.append(Stalled(record, scope))
    return found


def open_later_pass(claims: IdempotencyStore, run_id: str, keys: PipelineKeys) -> str | None:
    """The scope of the run's latest later pass when it is unfinished (classified standard, not finished yet,
    or not classified at all), else None."""
    passes = claims.results_as(run_id, keys.pass_prefix, PassMark)
    if not passes:
        return None
    latest = max(passes.items(), key=lambda kv: kv[1].n)[0]
    scope = f"{latest.removeprefix(keys.pass_prefix)}/"
    classified = claims.result_as(run_id, f"{scope}{keys.classify}", Classified)
    if classified is not None and classified.kind != ClassificationKind.standard.value:
        return None  # routed or left to a person at classification: nothing more runs in this pass
    if f"{scope}{keys.finish}" in claims.done_keys(run_id, f"{scope}{keys.finish}"):
        return None
    return scope


def plan_redrive(
    claims: IdempotencyStore, record: CompletionRecord, preserve_root: str | None, keys: PipelineKeys, scope: str = ""
) -> Redrive:
    """Rebuild the message of the first hop of the pipeline (`keys.hops`, topology.yaml's order) that did not
    finish, from what the stages stored; list what nothing can redo."""
    run_id = record.run_id
    # A later pass's keys carry its scope; without it, the first pass's keys (other passes' never match them).
    done = {k.removeprefix(scope) for k in claims.done_keys(run_id, scope)}
    sets = {
        fan.name: stored_set
        for hop in keys.hops
        for fan in (*hop.plans, *([hop.members] if hop.members else []))
        if fan.member_set in done
        and (stored_set := claims.result_as(run_id, f"{scope}{fan.member_set}", fan.set_model)) is not None
    }
    preserve = next((kept for s in sets.values() if (kept := s.kept_preserve_root)), None) or preserve_root
    if preserve is None:
        return Redrive(run_id, [], ["a preserve root (none configured and no plan stored)"])
    for index, hop in enumerate(keys.hops):
        if hop.event:
            if not hop.done(done):  # on-job-event finds the same end marks again and classifies under this scope
                return Redrive(run_id, [(hop.topic, _event_payload(record))], [])
            continue
        if hop.done(done):
            continue
        run = RunMessage(run_id=run_id, scope=scope, run_uri=record.run_uri, preserve_root=preserve)
        source, _, state = (record.controller_state or "").partition(":")
        if state and keys.hops[index - 1].event:  # classify's "<source>:<state>", for the hop it sends the run to
            run = run.model_copy(update={"event_source": source, "event_state": state})
        if hop.members is not None:
            return _redrive_members(run, hop, hop.members, sets.get(hop.members.name), done)
        missing = [
            f"{fan.member_noun} {member}"
            for fan in hop.plans
            if fan.name in sets and not all(claim in done for claim in fan.fan_ins)
            for member in sets[fan.name].member_ids
            if f"{fan.member_prefix}{member}" not in done
        ]
        # Lost members' messages carry file lists nobody stored, but each plan lists its page again from the stored
        # cursor and re-publishes the parts with no outcome when its run message comes again (stages/paged_plan.py);
        # every stage re-checks its own claim and re-tries its fan-ins. `missing` says what to mark if that fails.
        return Redrive(run_id, [(hop.topic, _payload(run))], missing)
    return Redrive(run_id, [], ["nothing: every stage is done, yet the record is in_progress"])


def _redrive_members(
    run: RunMessage, hop: PipelineHop, fan: FanOutKeys, member_set: MemberSet | None, done: set[str]
) -> Redrive:
    """A fan-out a barrier planned: one message per member with no outcome (a member's message names only its id),
    or, when every member is in, one of them again, which re-tries the fan-in its delivery missed."""
    if member_set is None:
        return Redrive(run.run_id, [], [f"the {fan.member_noun} plan"])
    ids = member_set.member_ids
    pending = [member for member in ids if f"{fan.member_prefix}{member}" not in done] or ids[-1:]
    base = _payload(run, include={"run_id", "scope", "run_uri", "preserve_root"})
    return Redrive(run.run_id, [(hop.topic, {**base, fan.member_field: member}) for member in pending], [])


def _payload(run: RunMessage, include: set[str] | None = None) -> dict[str, Any]:
    return run.model_dump(mode="json", include=include, exclude_defaults=True)


def _event_payload(record: CompletionRecord) -> dict[str, Any]:
    event = JobEvent(
        source=SOURCE,
        job_id=f"sweep:{record.run_uri}",
        run_uri=record.run_uri,
        state="ENDED",
        observed_at=record.created_at,
    )
    return event.model_dump(mode="json")


def stalled_fields(missing: list[str], now: datetime) -> dict[str, Any]:
    return {
        "status": RecordStatus.stalled.value,
        "remaining_work": [
            f"stalled (sweep {now.isoformat(timespec='seconds')}): missing {', '.join(missing)}; "
            "re-emit the run's terminal event to redo it"
        ],
    }
