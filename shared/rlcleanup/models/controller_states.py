"""The one table of controller state spellings, per source, with what each means.

Routing (is a job-state event terminal, so cleanup may start?) and verdict normalisation (what did the controller
say: succeeded / failed / cancelled, or not finished) are both derived from `SOURCES` below; nothing else spells a
controller state. Names and numbers are the sources' own (../shared/reference/run-layout.md "Job-state-change
events", run-layout-v2.md §4 and §6, domain.md §7): Iris `JobState`/`TaskState` (lib/iris/src/iris/rpc/job.proto),
Ray `JobStatus`, SkyPilot `ManagedJobStatus` (sky/jobs/state.py), Kubernetes Job conditions and pod phases,
Marin `.executor_status` (marin/execution/step_status.py), the MarinSkyRL artifact protocol's `response.state`,
and Slurm job states (squeue/sacct).

Failing closed:
- an unknown *source* is an error (`UnknownStateSource`): an event from it is rejected as invalid, because nothing
  about its states can be trusted;
- an unknown *state* of a known source reads as `Verdict.unknown`, which is not terminal: an event in it does not
  start cleanup (a job that may still be running is never cleaned up on a guess; the event is recorded, and the
  next known state routes it), and a file spelling it gives no verdict (the run is settled from its artifacts and
  the reasoning quotes the spelling).
Adding a source is one `StateSource` entry here (+ its caller, e.g. an event emitter, if it is new).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Verdict(StrEnum):
    """A controller state, normalised across sources."""

    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    ended = "ended"  # finished, but the source gives no verdict (an operator's manual run)
    running = "running"
    pending = "pending"
    unknown = "unknown"  # a spelling the table does not know, or a state that says nothing (UNSPECIFIED)

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def has_outcome(self) -> bool:
        """succeeded / failed / cancelled: the controller said how the job ended."""
        return self in _OUTCOMES


_OUTCOMES = frozenset({Verdict.succeeded, Verdict.failed, Verdict.cancelled})
_TERMINAL = _OUTCOMES | {Verdict.ended}

# Any source: the controller no longer knows the job (row pruned, 0 pods). Terminal without a verdict: the run is
# settled from its durable artifacts (run-layout.md).
ABSENT_SPELLINGS = frozenset({"ABSENT", "VANISHED", "GONE"})

V = Verdict


@dataclass(frozen=True)
class StateSource:
    name: str
    states: Mapping[str, Verdict]  # upper-case spelling -> verdict
    numbers: Mapping[int, str] = field(default_factory=dict)  # wire enum numbers -> spelling (Iris only)
    prefixes: tuple[str, ...] = ()  # enum-qualified spellings, e.g. JOB_STATE_KILLED, JobStatus.STOPPED

    def spell(self, raw: str | int) -> str:
        """The canonical upper-case spelling: `6` / "6" / `JOB_STATE_KILLED` / "killed" -> "KILLED"."""
        text = str(raw).strip()
        if self.numbers and text.lstrip("-").isdigit():
            text = self.numbers.get(int(text), text)
        spelled = text.upper().replace("-", "_").replace(" ", "_")
        for prefix in self.prefixes:
            spelled = spelled.removeprefix(prefix)
        return spelled

    def verdict(self, raw: str | int) -> Verdict:
        return self.states.get(self.spell(raw), Verdict.unknown)


_IRIS_NUMBERS = {
    0: "UNSPECIFIED",
    1: "PENDING",
    2: "BUILDING",
    3: "RUNNING",
    4: "SUCCEEDED",
    5: "FAILED",
    6: "KILLED",
    7: "WORKER_FAILED",
    8: "UNSCHEDULABLE",
    # TaskState only (a task's state; its job's state is what decides a run)
    9: "ASSIGNED",
    10: "PREEMPTED",
    11: "COSCHED_FAILED",
    12: "MISSING",
}
IRIS = StateSource(
    "iris",
    {
        "UNSPECIFIED": V.unknown,
        "PENDING": V.pending,
        "BUILDING": V.pending,
        "RUNNING": V.running,
        "SUCCEEDED": V.succeeded,
        "FAILED": V.failed,
        "KILLED": V.cancelled,  # also what a launcher's SIGTERM leaves (run-layout-v2.md §6)
        "WORKER_FAILED": V.failed,
        "UNSCHEDULABLE": V.failed,
        "ASSIGNED": V.pending,
        "PREEMPTED": V.pending,  # the task is rescheduled; if it cannot be, the job ends FAILED
        "COSCHED_FAILED": V.failed,
        "MISSING": V.unknown,  # the task's worker lost it: the job state decides
    },
    numbers=_IRIS_NUMBERS,
    prefixes=("JOB_STATE_", "TASK_STATE_", "JOBSTATE.", "TASKSTATE."),
)
RAY = StateSource(
    "ray",
    {
        "PENDING": V.pending,
        "RUNNING": V.running,
        "STOPPED": V.cancelled,
        "SUCCEEDED": V.succeeded,
        "FAILED": V.failed,
    },
    prefixes=("JOBSTATUS.",),
)
SKYPILOT = StateSource(
    "skypilot",
    {
        "PENDING": V.pending,
        "SUBMITTED": V.pending,  # older SkyPilot
        "STARTING": V.pending,
        "RUNNING": V.running,
        "RECOVERING": V.running,
        "WINDING_DOWN": V.running,
        "CANCELLING": V.running,
        "SUCCEEDED": V.succeeded,
        "CANCELLED": V.cancelled,
        "FAILED": V.failed,
        "FAILED_SETUP": V.failed,
        "FAILED_PRECHECKS": V.failed,
        "FAILED_NO_RESOURCE": V.failed,
        "FAILED_CONTROLLER": V.failed,
    },
    prefixes=("MANAGEDJOBSTATUS.",),
)
KUBERNETES = StateSource(
    "k8s",
    {
        # Job conditions (the terminal ones are Complete and Failed; the others precede them)
        "COMPLETE": V.succeeded,
        "FAILED": V.failed,
        "SUSPENDED": V.pending,
        "FAILURETARGET": V.running,  # pods still terminating; Failed follows
        "SUCCESSCRITERIAMET": V.running,  # Complete follows
        # pod phases
        "PENDING": V.pending,
        "RUNNING": V.running,
        "SUCCEEDED": V.succeeded,
        "UNKNOWN": V.unknown,
    },
)
MARIN = StateSource(
    "marin",
    {
        "RUNNING": V.running,
        "SUCCESS": V.succeeded,
        "FAILED": V.failed,
        "DEP_FAILED": V.failed,
        # legacy JSON-lines statuses
        "WAITING": V.pending,
        "UNKNOWN": V.unknown,
        "CANCELLED": V.cancelled,
    },
)
# terminal.json / attempt records `response.state` (MarinSkyRL artifact protocol).
PROTOCOL = StateSource(
    "protocol",
    {"PREPARED": V.pending, "SUBMITTED": V.pending, "SUCCEEDED": V.succeeded, "FAILED": V.failed},
)
SLURM = StateSource(
    "slurm",
    {
        "PENDING": V.pending,
        "CONFIGURING": V.pending,
        "REQUEUED": V.pending,
        "REQUEUE_HOLD": V.pending,
        "RUNNING": V.running,
        "COMPLETING": V.running,
        "RESIZING": V.running,
        "SUSPENDED": V.running,
        "STOPPED": V.running,  # SIGSTOP'd with its resources kept: not finished
        "COMPLETED": V.succeeded,
        "FAILED": V.failed,
        "NODE_FAIL": V.failed,
        "OUT_OF_MEMORY": V.failed,
        "BOOT_FAIL": V.failed,
        "SPECIAL_EXIT": V.failed,
        "TIMEOUT": V.failed,  # the job's time limit; a chained successor may resume it (artifacts decide the run)
        "DEADLINE": V.failed,
        "CANCELLED": V.cancelled,
        "PREEMPTED": V.cancelled,
        "REVOKED": V.cancelled,
    },
)
# An operator ran rlcleanup by hand: ENDED says only that the run is over; `--state` may add a verdict.
MANUAL = StateSource(
    "manual",
    {"ENDED": V.ended, "SUCCEEDED": V.succeeded, "FAILED": V.failed, "CANCELLED": V.cancelled},
)

# Hints read off a run's own artifacts: a Cloud Storage notification of a run-end marker (sources/
# gcs_notifications.py) and the reconciling sweep (sources/sweep.py). They spell the token or marker that ended the
# run, but every terminal spelling is `ended`: the artifact itself is the evidence (the terminal step reads it),
# so the event must not count a second time as a controller's word.
_ARTIFACT_HINT = {
    "SUCCESS": V.ended,
    "FAILED": V.ended,
    "DEP_FAILED": V.ended,
    "CANCELLED": V.ended,
    "ENDED": V.ended,
    "RUNNING": V.running,
}
GCS = StateSource("gcs", _ARTIFACT_HINT)
SWEEP = StateSource("sweep", _ARTIFACT_HINT)

SOURCES: Mapping[str, StateSource] = {
    s.name: s for s in (IRIS, RAY, SKYPILOT, KUBERNETES, MARIN, PROTOCOL, SLURM, MANUAL, GCS, SWEEP)
}


class UnknownStateSource(ValueError):
    """A job-state source the table does not know: its states cannot be read, so nothing is routed on them."""

    code = "unknown_state_source"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown job-state source {name!r}; known sources: {', '.join(sorted(SOURCES))}")


def source(name: str) -> StateSource:
    found = SOURCES.get(name.strip().lower())
    if found is None:
        raise UnknownStateSource(name)
    return found


def is_absent(raw: str | int) -> bool:
    return str(raw).strip().upper() in ABSENT_SPELLINGS
