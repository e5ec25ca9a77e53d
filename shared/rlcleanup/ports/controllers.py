"""The job-state controller port: what the sweep's poll and the pre-cancel capture ask of a controller (Iris, Ray).

A controller is read, never driven: rlcleanup never stops, kills or cancels a job (a cancel grant only publishes
`cancel-cleared`, and the controller or a person cancels; docs/authority.md), so the port has no cancel. What the
cancel flow needs from a controller is the live state its pre-cancel capture records: `snapshot`.

Adapters live in adapters/controllers/ (one module per controller, one HTTP client module), and
adapters/controllers/registry.py builds them by name from the settings; the wiring hands them to policy.

Errors: `ControllerError` is anything that kept the controller from answering; the pre-cancel capture records it
and goes on from files. Its two kinds carry the runtime's reading (rlcleanup/errors.py): `ControllerUnavailable`
(transient: unreachable, timed out, overloaded; the sweep's poll is redelivered) and `ControllerRefused`
(permanent: the controller said no, or answered something that is not its API; a job id outside the controller's
grammar is refused before anything is sent).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from rlcleanup.errors import PermanentError, TransientError
from rlcleanup.models.events import JobEvent


class ControllerError(Exception):
    """The controller could not be read; the pre-cancel capture records it and goes on with files."""


class ControllerUnavailable(TransientError, ControllerError):
    """Unreachable, timed out or overloaded after the client's retries: trying again later may work."""

    def __init__(self, controller: str, detail: str) -> None:
        super().__init__(f"{controller} unavailable: {detail}")
        self.controller = controller


class ControllerRefused(PermanentError, ControllerError):
    """The controller refused the call or answered something that is not its API; retrying cannot fix it."""

    def __init__(self, controller: str, detail: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__("controller_refused", f"{controller}: {detail}")
        self.controller, self.status, self.reason = controller, status, reason


class UnknownControllerError(PermanentError):
    """A controller name nobody registered (a sweep message, a settings group): fail closed, naming the known."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__("unknown_controller", f"no job-state controller {name!r} (known: {', '.join(known)})")
        self.name, self.known = name, known


class FinishedJob(BaseModel):
    """One finished job a poll reports: its event, or why there is none (a job that names no run)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str  # dedupe key in the sweep's `source_seen` documents: a hash of (cluster, the job's identity)
    event: JobEvent | None
    reason: str


class ControllerSnapshot(BaseModel):
    """What a controller says of a live job, written verbatim into the pre-cancel capture."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    job_id: str
    state: str
    message: str | None = None
    tasks: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}  # what the controller said, kept verbatim in the capture
    logs: str | None = None


Seen = Callable[[str], bool]  # has this dedupe key been handled by an earlier sweep?


class JobController(Protocol):
    """One controller of one deployment. `polls` says whether `list_finished` can run here: a controller may be
    configured for snapshots only (Iris with its CLI but no controller URL)."""

    @property
    def name(self) -> str:
        """The `JobEvent` source it serves (models/controller_states.py)."""

    @property
    def polls(self) -> bool: ...

    def list_finished(self, seen: Seen, now: datetime) -> list[FinishedJob]:
        """Finished jobs not `seen` before, as events (or why not), bounded per call."""

    def snapshot(self, job_id: str) -> ControllerSnapshot:
        """The job's live state; `ControllerError` when it cannot be read."""


def checked_job_id(grammar: re.Pattern[str], source: str, job_id: str) -> str:
    """A job id comes from an event (anyone who can publish one chooses it): checked against the controller's
    grammar, then passed as data (a quoted path segment, one argv element), never starting with "-"."""
    if not isinstance(job_id, str) or not grammar.fullmatch(job_id) or ".." in job_id.split("/"):
        shown = job_id[:80] if isinstance(job_id, str) else type(job_id).__name__
        raise ControllerRefused(source, f"job id {shown!r} is not a {source} job id; not sent to the controller")
    return job_id


# ---------------------------------------------------------------- submitting an export job (export grants)


class ExportJobSpec(BaseModel):
    """One export job to submit (authority/export.py builds it; docs/authority.md §9). `argv` is the command as a
    list (the deployment's converter, then the request's validated fields): an adapter that needs one string joins
    it with `shlex.join`, never a shell string taken from the run. `submission_id` is derived from the grant, so a
    redelivered grant names the same job and a controller that refuses a duplicate id is read as "already
    submitted". `metadata` says which run and step the job exports for (never a credential: the job gets the run's
    paths through its argv and nothing of rlcleanup's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    submission_id: str
    argv: tuple[str, ...]
    metadata: dict[str, str] = {}


class SubmittedJob(BaseModel):
    """A submitted job as its controller reports it: `already` when an earlier delivery had submitted it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    controller: str
    job_id: str
    state: str
    already: bool = False
    exit_code: int | None = None
    message: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


@runtime_checkable
class ExportSubmitter(Protocol):
    """A controller that can run an export job: the one capability beyond reading that the port offers, used only
    by an export grant (the command is the deployment's converter, never the run's)."""

    @property
    def name(self) -> str: ...

    def submit(self, job: ExportJobSpec) -> SubmittedJob:
        """Submit once: a duplicate `submission_id` returns the existing job with `already=True`."""

    def job_state(self, job_id: str) -> SubmittedJob:
        """The job's state now; `ControllerError` when it cannot be read."""

    def job_log_tail(self, job_id: str, max_bytes: int) -> str | None:
        """The last `max_bytes` of the job's log (None: the controller keeps none); `ControllerError` when it
        cannot be read. The sweep records it for a job that did not succeed (authority/export_follow.py)."""
