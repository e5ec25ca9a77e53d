"""Pre-cancel capture: what a cancellation would destroy, copied into the preserved location first.

- controller job/task state (the `JobController` port's snapshot, read-only) and its driver log tail;
- per-rank device utilization from `T/attempts/<id>/telemetry/*.jsonl`, normalized to a 0..1 fraction per rank;
- in-flight outputs: checkpoint dirs newer than the commit marker (partial saves) and the latest attempt's log tails;
- the run's last sync (authority/precancel_sync.py): a bounded wait for every node's final `sync-manifest.json`,
  then what was not synced;
- reproducing failures: the same error signature in >= 2 attempts. Without a recorded cause
  (`runs/{run_id}/causes/{signature_id}`) the cancel clearance is withheld.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlcleanup.authority.precancel_sync import wait_for_final_sync
from rlcleanup.formats.weight_files import is_bulk_weight
from rlcleanup.models.claims import PreCancelCaptured, ReproducingFailure
from rlcleanup.models.record import CompletionRecord
from rlcleanup.parsing.attempt_logs import attempt_log_objects, scan_attempt
from rlcleanup.ports.collections import CAUSES, Documents
from rlcleanup.ports.controllers import ControllerError, JobController
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import Storage, WriteOutcome
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import basename, join, relative_to

TAIL_BYTES = 256 * 1024
_UTIL_KEYS = ("gpu_util", "utilization", "device_util", "util", "gpu_utilization")
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{8,}\b|\d+")


class CauseNote(BaseModel):
    """runs/{run_id}/causes/{signature id}: a person's note on why a reproducing failure happens."""

    model_config = ConfigDict(extra="forbid")
    note: str
    recorded_by: str
    at: datetime


def causes(records: RunRecords, run_id: str) -> Documents[CauseNote]:
    """The run's recorded causes, bound once to their model."""
    return CAUSES.bind(records, run_id, CauseNote)


def signature_id(signature: str) -> str:
    return hashlib.sha256(signature.encode()).hexdigest()[:16]


@dataclass
class RankUtilization:
    rank: int
    samples: int
    mean: float
    last: float


@dataclass
class Reproducing:
    signature: str
    signature_id: str
    attempts: list[str]
    cause_recorded: bool


@dataclass
class CaptureResult:
    capture_uri: str
    controller_state: str | None = None
    ranks: list[RankUtilization] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)
    listed_weights: int = 0
    reproducing: list[Reproducing] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    final_sync: bool | None = None  # every node's last sync-manifest.json is final (None: no rendezvous artifacts)
    not_synced: list[str] = field(default_factory=list)  # what the bounded wait left unsynced

    def to_doc(self) -> dict[str, Any]:
        return asdict(self)


def _fraction(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) / 100.0 if value > 1.0 else float(value)  # percent or fraction, normalized to 0..1


def utilization(storage: Storage, layout: RunLayout) -> tuple[list[RankUtilization], list[str]]:
    per_rank: dict[int, list[float]] = {}
    problems: list[str] = []
    if layout.temp_root is None:
        return [], ["no temp root: no telemetry files to read"]
    for attempt in layout.attempts:
        for info in storage.list(join(layout.temp_root, "attempts", attempt.attempt_id, "telemetry")):
            if not info.uri.endswith(".jsonl"):
                continue
            for n, line in enumerate(storage.iter_lines(info.uri), start=1):
                try:
                    row = json.loads(line)
                except ValueError:
                    problems.append(f"{info.uri}:{n}: not JSON")
                    continue
                rank = row.get("rank") if isinstance(row, dict) else None
                value = (
                    next((_fraction(row[k]) for k in _UTIL_KEYS if k in row), None) if isinstance(row, dict) else None
                )
                if isinstance(rank, int) and value is not None:
                    per_rank.setdefault(rank, []).append(value)
    ranks = [
        RankUtilization(rank=r, samples=len(v), mean=round(sum(v) / len(v), 4), last=round(v[-1], 4))
        for r, v in sorted(per_rank.items())
    ]
    return ranks, problems


def normalize_signature(error_type: str, message: str) -> str:
    return f"{error_type}: {_VOLATILE.sub('N', message.strip())[:200]}"


def reproducing_failures(storage: Storage, records: RunRecords, layout: RunLayout, run_id: str) -> list[Reproducing]:
    seen: dict[str, list[str]] = {}
    for attempt in layout.attempts:
        scan = scan_attempt(storage, attempt)
        for sig in {normalize_signature(e.error_type, e.message) for e in scan.errors if e.causal and not e.noise}:
            seen.setdefault(sig, []).append(attempt.attempt_id)
    return [
        Reproducing(
            signature=sig,
            signature_id=signature_id(sig),
            attempts=attempts,
            cause_recorded=causes(records, run_id).get(signature_id(sig)) is not None,
        )
        for sig, attempts in sorted(seen.items())
        if len(attempts) >= 2
    ]


def unexplained(records: RunRecords, run_id: str, found: list[ReproducingFailure]) -> list[str]:
    """Signatures still without a cause, checked now (a cause may have been recorded since the capture)."""
    recorded = causes(records, run_id)
    return [r.signature for r in found if recorded.get(r.signature_id) is None]


def run_has_ended(record: CompletionRecord | None) -> bool:
    """Whether the run's end was observed: a terminal job event was classified (only an end is classified) or its
    terminal state established. A cancel applies only to a live run, so a cancel grant for such a run is refused."""
    return record is not None and (record.classification is not None or record.terminal_state is not None)


def observed_signature_ids(captures: list[PreCancelCaptured]) -> set[str]:
    """The reproducing-failure signature ids the run's own pre-cancel captures saw: the only ids a cause may name."""
    return {sig.signature_id for c in captures for sig in c.reproducing}


def clearance(
    records: RunRecords, run_id: str, run_uri: str | None, captures: list[PreCancelCaptured]
) -> tuple[PreCancelCaptured | None, str, str]:
    """Whether a cancel may be cleared: (the capture it rests on, "", "") or (None, why it waits, the state shown).

    Only a capture that read *this* run's files counts: an event naming the run id with an unreadable (or another)
    run URI captured nothing of it and must not clear anything. Every reproducing failure any capture of the run
    saw needs its cause recorded, not just the latest's."""
    own = [c for c in captures if c.layout_read and (run_uri is None or c.run_uri == run_uri)]
    if not own:
        return None, "waiting for a pre-cancel capture of the run's own files", "pending"
    open_sigs = unexplained(records, run_id, [sig for c in captures for sig in c.reproducing])
    if open_sigs:
        return None, f"withheld: reproducing failure without a recorded cause: {open_sigs[:3]}", "withheld"
    return max(own, key=lambda c: c.captured_at), "", ""


def _copy_inflight(storage: Storage, layout: RunLayout, dest: str, result: CaptureResult) -> None:
    marker = layout.marker_step
    partial = [s for s in layout.checkpoint_steps if marker is None or s > marker]
    for step in partial:
        root = layout.checkpoint_uri(step)
        listing: list[dict[str, Any]] = []
        for info in storage.list(root):
            rel = relative_to(info.uri, root)
            listing.append({"uri": info.uri, "size": info.size, "crc32c": info.crc32c})
            if is_bulk_weight(info.uri):
                result.listed_weights += 1
                continue
            target = join(dest, "inflight", f"global_step_{step}", rel)
            if storage.copy_if_absent(info.uri, target) is not WriteOutcome.conflict:
                result.copied.append(target)
        lines = "".join(json.dumps(o, sort_keys=True) + "\n" for o in listing).encode()
        storage.write_if_absent(join(dest, "inflight", f"global_step_{step}.listing.jsonl"), lines)
    if layout.attempts:
        latest = layout.attempts[-1]
        for info in attempt_log_objects(storage, latest):  # listed now: a live run is still writing them
            start = max(0, info.size - TAIL_BYTES)
            tail = storage.read_range(info.uri, start, info.size - start)
            target = join(dest, "log-tails", latest.attempt_id, f"{basename(info.uri)}.tail")
            if storage.write_if_absent(target, tail) is not WriteOutcome.conflict:
                result.copied.append(target)


def capture(
    storage: Storage,
    records: RunRecords,
    layout: RunLayout | None,
    run_id: str,
    dest: str,
    controller: JobController | None,
    job_id: str,
    sync_wait_seconds: float = 0.0,
    sync_clock: tuple[Callable[[], float], Callable[[float], None]] | None = None,
) -> CaptureResult:
    """Copy live state into `dest` (write-once) and write `capture.json` there last. First, wait (at most
    `sync_wait_seconds`; `sync_clock` = (monotonic, sleep) for tests) for every node's final sync manifest."""
    result = CaptureResult(capture_uri=join(dest, "capture.json"))
    if layout is not None:
        monotonic, sleep = sync_clock or (time.monotonic, time.sleep)
        waited = wait_for_final_sync(storage, layout, sync_wait_seconds, monotonic=monotonic, sleep=sleep)
        result.final_sync, result.not_synced = waited.final, waited.not_synced
        result.problems += waited.problems
        if waited.final is False:
            result.problems.append(
                f"the final sync did not arrive within {sync_wait_seconds:.0f}s: {len(waited.not_synced)} "
                "item(s) not synced (not_synced)"
            )
    if controller is None:
        result.problems.append("no controller adapter configured for this source: state from files only")
    else:
        try:
            snap = controller.snapshot(job_id)
            result.controller_state = f"{snap.source}:{snap.state}"
            doc = snap.model_dump(mode="json", exclude={"logs"})  # the log tail goes to a file of its own
            storage.write_if_absent(join(dest, "controller.json"), json.dumps(doc, indent=1, sort_keys=True).encode())
            if snap.logs:
                storage.write_if_absent(join(dest, "controller-driver.log.tail"), snap.logs.encode())
        except ControllerError as exc:
            result.problems.append(f"controller unreadable: {exc}")
    if layout is None:
        result.problems.append("run layout unreadable: no telemetry, in-flight outputs or failure signatures")
    else:
        result.ranks, problems = utilization(storage, layout)
        result.problems += problems
        _copy_inflight(storage, layout, dest, result)  # a storage fault raises: retried, never half-cleared
        result.reproducing = reproducing_failures(storage, records, layout, run_id)
    storage.write_if_absent(result.capture_uri, json.dumps(result.to_doc(), indent=1, sort_keys=True).encode())
    return result
