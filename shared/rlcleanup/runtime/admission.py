"""Admission: what on-job-event (and the pre-cancel capture) check before a run is read or written at all.

Below every handler that admits a run (runtime/stages/classify.py, runtime/authority_handlers.py), so neither
reaches into the other: the run's config-named roots stay inside the run buckets, a run id stays bound to the run
URI it was first seen at, and where evidence goes is the deployment's choice, never an event's.
"""

from __future__ import annotations

from rlcleanup.authority.grants import real_location
from rlcleanup.errors import PermanentError
from rlcleanup.models.events import JobEvent
from rlcleanup.models.record import UNKNOWN_RUN_URI, RunError
from rlcleanup.runtime.ports import Ports
from rlcleanup.settings import in_run_buckets
from rlcleanup.steps.layout import RunLayout


def bind_run_identity(p: Ports, run_id: str, run_uri: str) -> None:
    """A run's identity is bound to its run URI: another run whose files claim the same run id (copied records,
    a hostile attempt record) is a recorded conflict on the existing record and is refused, never merged into it
    (nor allowed to make the real run's event a "duplicate")."""
    existing = p.records.get(run_id)
    if existing is None or existing.run_uri == UNKNOWN_RUN_URI or _same_location(existing.run_uri, run_uri):
        return
    msg = f"{run_uri[:300]} claims run id {run_id!r}, which is bound to {existing.run_uri[:300]}: not merged"
    p.records.add_errors(run_id, [RunError(step="identity", code="run_id_conflict", message=msg)])
    raise PermanentError("run_id_conflict", msg)


def check_run_roots(layout: RunLayout, run_buckets: tuple[str, ...] | None) -> None:
    """A run's config names where its checkpoints, temp area, exports and attempts live; none may point outside
    the buckets this deployment reads runs from (capture would copy someone else's files into evidence, publish
    would ship them). Refused as root_outside_allowed before any byte is copied."""
    roots = {
        "temp_root": layout.temp_root,
        "checkpoints_root": layout.checkpoints_root,
        "exports_root": layout.exports_root,
        "attempts_root": layout.attempts_root,
    }
    outside = {name: root for name, root in roots.items() if root and not in_run_buckets(root, run_buckets)}
    if outside:
        raise PermanentError(
            "root_outside_allowed",
            f"{layout.run_uri[:200]}: {outside} outside this deployment's run buckets {list(run_buckets or ())}",
        )


def _same_location(a: str, b: str) -> bool:
    return real_location(a).rstrip("/") == real_location(b).rstrip("/")


def deployment_preserve_root(p: Ports, event: JobEvent) -> str:
    """Where evidence goes is the deployment's choice (RLCLEANUP_PRESERVE_ROOT), never an event's: a sender must
    not redirect writes to a place of its choosing. An event's preserve_root is honoured only inside it."""
    root = p.preserve_root
    if not root:
        raise PermanentError("no_preserve_root", "no preserve root: set RLCLEANUP_PRESERVE_ROOT")
    if event.preserve_root and not _inside(event.preserve_root, root):
        raise PermanentError(
            "root_outside_allowed", f"the event's preserve_root {event.preserve_root[:200]!r} is outside {root}"
        )
    return event.preserve_root or root


def _inside(uri: str, root: str) -> bool:
    uri, root = real_location(uri).rstrip("/"), real_location(root).rstrip("/")
    return (uri == root or uri.startswith(root + "/")) and ".." not in uri.split("/")
