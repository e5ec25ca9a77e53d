"""Admission: what every entry point that admits a run checks before the run is read or written at all.

Below every handler that admits a run (runtime/stages/classify.py, runtime/authority_handlers.py, the CLI's
`run --run-id` through runtime/embedded.py), so none reaches into another: the run lies in the run buckets, its
config-named roots stay inside them, where evidence goes is the deployment's choice, never an event's, and a run's
identity is bound to where it lives.

Identity (docs/authority.md §8, P3). A run's id is the one its own records declare (terminal.json / attempt
records), else the readable `<experiment>-<version>` its location spells; a second root whose readable id is
already another root's gets that id plus 8 hex of its URI's hash (`located_run_id`), so two roots never share a
record. The binding is two write-once documents, created only for a run that passed every other check:
`run_ids/{id}` (the id's location) and `run_locations/{hash}` (the location's id, so a root keeps the id it was
first admitted under, a person's `--run-id` included). A requested id that is bound elsewhere is refused
(`run_id_conflict`) with the fix; a declared one never blocks the run's end (`admit_run`'s `located_on_conflict`):
the run is admitted under its location's id and the conflict is an error on both records.
A refused message never creates or binds an identity (`attachable_run`: errors go only on a record the message's
own location is bound to).
"""

from __future__ import annotations

import hashlib

from rlcleanup.authority.grants import real_location
from rlcleanup.errors import PermanentError, RunErrorCode
from rlcleanup.models.documents import RunIdBinding, RunIdConflictNote, RunLocation
from rlcleanup.models.events import JobEvent
from rlcleanup.models.record import UNKNOWN_RUN_URI, CompletionRecord, RunError
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.collections import RUN_ID_CONFLICTS, RUN_IDS, RUN_LOCATIONS, Documents
from rlcleanup.ports.records import RunRecords
from rlcleanup.runtime.envelope import identify
from rlcleanup.runtime.ports import Ports
from rlcleanup.steps.facts import located_run_id, location_run_id, run_facts, safe_run_id
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.readable_roots import check_readable_roots
from rlcleanup.steps.remaining import NEEDS_PERSON_PREFIX, Remaining
from rlcleanup.uris import in_run_buckets

FINISHED = {RecordStatus.awaiting_authority, RecordStatus.complete, RecordStatus.needs_person}


def _run_ids(records: RunRecords) -> Documents[RunIdBinding]:
    """{id}: where the run holding this id lives."""
    return RUN_IDS.bind(records, RunIdBinding)


def _run_locations(records: RunRecords) -> Documents[RunLocation]:
    """{sha256 of the location}: the id a location holds."""
    return RUN_LOCATIONS.bind(records, RunLocation)


def _conflicts(records: RunRecords) -> Documents[RunIdConflictNote]:
    """{located id}: the id it declared and was not given."""
    return RUN_ID_CONFLICTS.bind(records, RunIdConflictNote)


class RunIdConflict(PermanentError):
    """A run asked for (declared, or was given) an id another run's location holds."""

    def __init__(self, run_id: str, run_uri: str, holder: str) -> None:
        self.run_id, self.run_uri, self.holder = run_id, run_uri, holder
        super().__init__(
            "run_id_conflict",
            f"{run_uri[:300]} claims run id {run_id!r}, which is bound to {holder[:300]}: not merged, this run was "
            f"not processed; fix: give it its own id (`rlcleanup run {run_uri[:300]} --run-id {run_id}-2`), or "
            f"`rlcleanup forget {run_id}` if that record should not exist",
        )


def location_key(run_uri: str) -> str:
    return hashlib.sha256(_location(run_uri).encode("utf-8", "surrogatepass")).hexdigest()[:40]


def bound_run_id(p: Ports, run_uri: str) -> str | None:
    """The id this location was admitted under (None: never admitted)."""
    return location_binding(p.records, run_uri)


def location_binding(records: RunRecords, run_uri: str) -> str | None:
    doc = _run_locations(records).get(location_key(run_uri))
    return doc.run_id if doc else None


def holder_of(p: Ports, run_id: str) -> str | None:
    """Where the run holding `run_id` lives (None: nobody holds it). Records from before the identity documents
    count by their run_uri."""
    doc = _run_ids(p.records).get(run_id)
    if doc is not None:
        return doc.run_uri
    existing = p.records.get(run_id)
    if existing is None or existing.run_uri == UNKNOWN_RUN_URI:
        return None
    return existing.run_uri


def choose_run_id(p: Ports, layout: RunLayout, requested: str | None = None) -> str:
    """The id this run is (or would be) recorded under; read-only. A location keeps the id it was admitted under;
    else a requested id, else the declared one, else the location's readable id (hashed when another root holds
    it)."""
    bound = bound_run_id(p, layout.run_uri)
    if bound is not None:
        if requested is not None and safe_run_id(requested) != bound:
            raise PermanentError(
                "run_id_conflict",
                f"{layout.run_uri[:300]} is already recorded as {bound!r}: drop --run-id (or `rlcleanup forget "
                f"{bound}` first to record it under another id)",
            )
        return bound
    if requested is not None:
        return safe_run_id(requested)
    facts = run_facts(layout)
    if facts.declared:
        return facts.run_id
    return location_id(p, layout.run_uri, layout.kind)


def location_id(p: Ports, run_uri: str, kind: str = "A") -> str:
    """The id a location spells, set apart by its hash when another root holds the readable one."""
    bound = bound_run_id(p, run_uri)
    if bound is not None:
        return bound
    readable = location_run_id(run_uri, kind)
    holder = holder_of(p, readable)
    if holder is None or same_location(holder, run_uri):
        return readable
    return located_run_id(readable, _location(run_uri))


def admit_unreadable_run(p: Ports, run_uri: str, error: PermanentError) -> None:
    """A run inside the run buckets whose layout cannot be read (no or a hostile config): it is recorded failed
    under `<readable id>-<8 hex of its location>` (never one a payload names, nor a readable id a real run may
    declare), so a person sees it; then `error` goes on."""
    check_in_run_buckets(p, run_uri)
    # Always the hashed form: a readable id it took could be the one a real run declares (a squat).
    run_id = bound_run_id(p, run_uri) or located_run_id(location_run_id(run_uri), _location(run_uri))
    bind_run_identity(p, run_id, run_uri)
    p.records.create_if_absent(CompletionRecord(run_id=run_id, run_uri=run_uri, status=RecordStatus.failed))
    raise error


def bind_run_identity(p: Ports, run_id: str, run_uri: str) -> None:
    """Bind `run_id` to the run at `run_uri` (write-once, both ways), or refuse the run that asked for it
    (RunIdConflict): another run whose files claim the same id (copied records, a hostile attempt record) is never
    merged into the holder's record, nor allowed to make the real run's event a "duplicate". Called only once every
    other admission check has passed."""
    holder = holder_of(p, run_id)
    if holder is not None and not same_location(holder, run_uri):
        raise RunIdConflict(run_id, run_uri, holder)
    if not _run_ids(p.records).put(run_id, RunIdBinding(run_uri=run_uri), only_if_absent=True):
        holder = holder_of(p, run_id)  # another delivery bound it first: the same run, or a conflict
        if holder is not None and not same_location(holder, run_uri):
            raise RunIdConflict(run_id, run_uri, holder)
    key = location_key(run_uri)
    if not _run_locations(p.records).put(key, RunLocation(run_id=run_id, run_uri=run_uri), only_if_absent=True):
        bound = bound_run_id(p, run_uri)
        if bound is not None and bound != run_id:
            raise PermanentError("run_id_conflict", f"{run_uri[:300]} is already recorded as {bound!r}")


def admit_run(p: Ports, layout: RunLayout, requested: str | None = None, *, located_on_conflict: bool = False) -> str:
    """Every admission check for a discovered run, identity last: in the run buckets, config-named roots inside
    them (or, with no run buckets, inside the local run's own storage root: steps/readable_roots.py), then the id
    chosen and bound. Returns the run id.

    `located_on_conflict` (a run's end, on the event path or `run` without `--run-id`): a conflict never blocks
    preservation. When the id the run declares is another location's (a squatter that ended first, or the real
    run this one copies), this run is admitted under the id its own location spells (`location_id`: hashed when
    that is held too), the conflict goes on both records as a `run_id_conflict` error with a person's item, and the
    holder's record is announced again once this run's is ready (record-ready: its notification). An id a person asked for (`--run-id`)
    is still refused: the person is there to choose another."""
    check_in_run_buckets(p, layout.run_uri)
    check_run_roots(layout, p.run_buckets)
    check_readable_roots(p.storage, layout, p.run_buckets, p.readable_roots)
    run_id = choose_run_id(p, layout, requested)
    try:
        bind_run_identity(p, run_id, layout.run_uri)
    except RunIdConflict as conflict:
        if requested is not None or not located_on_conflict:
            raise
        run_id = location_id(p, layout.run_uri, layout.kind)
        record_conflict(p, conflict, run_id)  # before the binding: a redelivery after it sees no conflict
        bind_run_identity(p, run_id, layout.run_uri)
    return run_id


CONFLICT_STEP = "admission"


def conflict_message(conflict: RunIdConflict, located: str) -> str:
    return (
        f"run id {conflict.run_id!r} is declared by two runs: {conflict.holder[:300]} (recorded first, under that id) "
        f"and {conflict.run_uri[:300]} (recorded as {located!r}, the id its location spells); neither was merged "
        f"into the other. A person must decide which run the id belongs to (one of them declares an id that is not "
        f"its own: a copied run, or a squatter); `rlcleanup forget` removes a record that should not exist"
    )


def conflict_items(record: CompletionRecord) -> list[str]:
    """The person's item a run-id conflict on this record asks for (wrap-up lists it: needs_person, notified)."""
    return [
        f"{NEEDS_PERSON_PREFIX}{e.message}"
        for e in record.errors
        if e.code == "run_id_conflict" and e.step == CONFLICT_STEP
    ]


def record_conflict(p: Ports, conflict: RunIdConflict, located: str) -> None:
    """The conflict as an error on both records (never a merge, never a refusal of either run's evidence), and the
    holder's finished record needs a person now: its person's item, its status, record-ready again (notify)."""
    message = conflict_message(conflict, located)
    error = RunError(step=CONFLICT_STEP, code=RunErrorCode.run_id_conflict, message=message)
    p.records.create_if_absent(CompletionRecord(run_id=located, run_uri=conflict.run_uri))
    p.records.add_errors(located, [error])
    _conflicts(p.records).put(located, RunIdConflictNote(holder=conflict.run_id, run_uri=conflict.run_uri))
    holder = p.records.get(conflict.run_id)
    if holder is None:
        return
    p.records.add_errors(conflict.run_id, [error])
    if holder.status not in FINISHED:
        return  # its own wrap-up lists the item (conflict_items)
    item = f"{NEEDS_PERSON_PREFIX}{message}"
    items = [*holder.remaining_work, item] if item not in holder.remaining_work else holder.remaining_work
    p.records.update(conflict.run_id, {"remaining_work": items, "status": Remaining(items).status.value})


def conflict_holders(p: Ports, run_id: str) -> list[str]:
    """The runs whose id this run declared (admitted under its location's id instead): wrap-up announces their
    records again once this one is ready (record-ready: each is notified of the conflict)."""
    doc = _conflicts(p.records).get(run_id)
    return [doc.holder] if doc else []


def check_in_run_buckets(p: Ports, run_uri: str) -> None:
    if not in_run_buckets(run_uri, p.run_buckets):
        raise PermanentError(
            "run_outside_buckets",
            f"{run_uri[:300]} is not in the run buckets this deployment reads ({', '.join(p.run_buckets or ())}; "
            "RLCLEANUP_RUN_BUCKETS): refused, nothing read",
        )


def attachable_run(p: Ports, data: bytes) -> str | None:
    """The run a refused or failed message's error may be written on: a record that exists and that the message's
    own location is bound to (or, for our own stage messages naming no location, the record it names). Never one
    a payload merely names: a refusal must not create, bind or touch another run's identity."""
    run_id, run_uri = identify(data)
    if run_uri is not None:
        bound = bound_run_id(p, run_uri)
        if bound is not None:
            return bound
        record = p.records.get(run_id) if run_id else None
        if record is not None and same_location(record.run_uri, run_uri):
            return run_id  # a record from before the identity documents
        return None
    return run_id if run_id and p.records.get(run_id) is not None else None


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


def _location(uri: str) -> str:
    try:
        return real_location(uri).rstrip("/")
    except (ValueError, OSError):  # a NUL in a hostile path: it names no real location, compare it as written
        return uri.rstrip("/")


def same_location(a: str, b: str) -> bool:
    return _location(a) == _location(b)


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
