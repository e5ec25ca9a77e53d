"""When a run's evidence dies (run-layout-v3.md §1): every object under a `tmp/ttl=<N>d/` prefix is deleted by the
bucket's lifecycle rule N days after its creation (MarinSkyRL `cloud/iris/storage_policy.py`: ALLOWED_STORAGE_TTL_DAYS,
default 14), computable from the listing alone (GCS timeCreated, S3 Last-Modified, a local file's mtime:
ports.storage.ObjectInfo.created) and the rule the listing backend declares (`ObjectInfo.lifecycle`,
ports/lifecycle.py): GCS's Age condition at created + N days, AWS S3 rounded up to the next midnight UTC, CoreWeave
and other S3-compatible stores at created + N days (assumed).

What this module decides:
- an object's expiry, and the earliest of a group (a capture part, an evidence class, a candidate);
- the deadlines a person must meet (`needs person by <time>: ...` remaining-work items): an owed export (a
  convertible candidate: its `hf_export_request.json` is not complete) whose checkpoint dies within
  DEADLINE_HORIZON, and temp evidence a capture part could not preserve that dies within it;
- what was already gone when rlcleanup first looked: a `tmp/ttl=<N>d/` root the layout names (the temp root, its
  checkpoints, an attempt's logs) that lists nothing, said as expired evidence (what, since when), never as a run
  without evidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from rlcleanup.formats.export_request import COMPLETE, describe
from rlcleanup.models.record import Candidate, ExpiredEvidence
from rlcleanup.models.vocab import CandidateState
from rlcleanup.ports.lifecycle import GCS_AGE, LifecycleRule
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.steps import layout_d
from rlcleanup.steps.deferred_export import EXPORT_TOOL, export_grant_command, preserve_grant_command
from rlcleanup.steps.layout_model import RunLayout

_TTL = re.compile(r"/tmp/ttl=(\d+)d(?:/|$)")
# An owed export whose checkpoint dies sooner, or temp evidence a capture part could not preserve that dies sooner,
# is a person's deadline (needs_person); later, it is ordinary remaining work or a recorded error.
DEADLINE_HORIZON = timedelta(hours=72)
DEADLINE_PREFIX = "needs person by "  # a remaining-work item with a deadline (steps/remaining.py: needs_person)


def ttl_days(uri: str) -> int | None:
    """N of the `tmp/ttl=<N>d/` prefix `uri` lies under (a bucket-root relative path too), else None."""
    found = _TTL.search(uri if uri.startswith("/") else f"/{uri}")
    return int(found[1]) if found else None


def lifecycle_of(info: ObjectInfo) -> LifecycleRule:
    """The lifecycle rule the object's backend declared when it listed it; an object built by hand (no backend
    listed it) is dated by the Age rule, created + N days."""
    return info.lifecycle or GCS_AGE


def expires_at(info: ObjectInfo) -> datetime | None:
    """When the lifecycle rule deletes an object under `tmp/ttl=<N>d/`, by its backend's own rule (ports/lifecycle.py:
    GCS's Age condition created + N days; AWS S3 created + N days rounded up to the next midnight UTC; CoreWeave and
    other S3-compatible stores created + N days, a stated assumption); None on durable storage or without a creation
    time."""
    days = ttl_days(info.uri)
    born = info.created or info.updated
    return lifecycle_of(info).expires(born, days) if days is not None and born is not None else None


def earliest(stamps: Iterable[datetime | None]) -> datetime | None:
    return min((s for s in stamps if s is not None), default=None)


def earliest_of(objects: Iterable[ObjectInfo]) -> datetime | None:
    return earliest(expires_at(o) for o in objects)


def merge_by_class(*maps: Mapping[str, datetime]) -> dict[str, datetime]:
    """Per evidence class, the earliest expiry any of the maps gives (pages of a plan, an earlier pass)."""
    merged: dict[str, datetime] = {}
    for mapping in maps:
        for kind, stamp in mapping.items():
            merged[kind] = min(stamp, merged.get(kind, stamp))
    return dict(sorted(merged.items()))


def stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def deadline_item(deadline: datetime, what: str) -> str:
    return f"{DEADLINE_PREFIX}{stamp(deadline)}: {what}"


def has_deadline(items: Iterable[str]) -> bool:
    return any(item.startswith(DEADLINE_PREFIX) for item in items)


def owed_export_deadlines(
    candidates: Iterable[Candidate], now: datetime, run_id: str | None = None
) -> list[tuple[datetime, str, str]]:
    """(deadline, item, checkpoint uri) for each owed export whose checkpoint dies within DEADLINE_HORIZON of `now` (or already
    died: then the item says so, and the deadline is past)."""
    found: list[tuple[datetime, str, str]] = []
    for c in candidates:
        request = c.export_request
        if c.state is not CandidateState.convertible or request is None or request.status == COMPLETE:
            continue
        if c.expires_at is None or c.expires_at - now >= DEADLINE_HORIZON:
            continue
        dies = "expired" if c.expires_at <= now else "expires"
        what = (
            f"global_step_{c.step}'s HF export is owed ({describe(request)}) and its checkpoint {c.uri} {dies} at "
            f"{stamp(c.expires_at)} (temp storage, tmp/ttl={ttl_days(c.uri)}d): convert it ({EXPORT_TOOL}) or copy "
            "the checkpoint to durable storage before then"
        ) + (
            f"; grant the export: `{export_grant_command(run_id, c.step)}`, or preserve the checkpoint first: "
            f"`{preserve_grant_command(run_id, c.step)}`"
            if run_id is not None
            else ""
        )
        found.append((c.expires_at, deadline_item(c.expires_at, what), c.uri))
    return sorted(found)


def unpreserved_deadline(part_id: str, count: int, reason: str, deadline: datetime, now: datetime) -> str:
    """The item for a capture part that could not preserve temp evidence: it dies at `deadline`."""
    dies = "died" if deadline <= now else "die"
    what = (
        f"capture part {part_id} could not preserve {count} object(s) on temp storage ({reason}); the first "
        f"{dies} at {stamp(deadline)}: fix the cause and re-emit the run's terminal event before then"
    )
    return deadline_item(deadline, what)


def configured_temp_root(layout: RunLayout) -> str | None:
    """A Layout D run whose temp root lists nothing has none in its layout (discovery keeps a root only when it
    holds objects): its temp root is then the storage policy's candidate for the durable root (steps/layout_d.py)
    that the run's own resolved configuration names (trials_dir, trajectory output, checkpoint paths lie under
    it). Only a computed candidate is ever returned; the configuration merely picks among them."""
    pair = layout_d.roots(layout.config_root or layout.run_uri)
    if pair is None:
        return None
    named = set(_strings(layout.config)) | set(_strings(layout.skyrl))
    for candidate in pair.temp_candidates:
        if any(value == candidate or value.startswith(candidate + "/") for value in named):
            return candidate
    return None


def _listed_temp_root(layout: RunLayout) -> str | None:
    """The layout's temp root when it lies on temp storage (a run without one has its run root there)."""
    return layout.temp_root if layout.temp_root and ttl_days(layout.temp_root) is not None else None


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _temp_places(layout: RunLayout) -> list[tuple[str, str]]:
    """(evidence class, prefix) the layout names on temp storage, each once, temp root first."""
    places: list[tuple[str, str]] = []
    temp_root = _listed_temp_root(layout) or configured_temp_root(layout)
    if temp_root:
        places.append(("temp root (checkpoints, attempt logs, trajectories, rendezvous)", temp_root))
    places.append(("checkpoints", layout.checkpoints_root))
    places += [(f"logs of attempt {a.attempt_id}", a.log_prefix) for a in layout.attempts if a.log_prefix]
    places += [("rendezvous evidence", root.uri) for root in layout.evidence_roots]
    seen: set[str] = set()
    unique: list[tuple[str, str]] = []
    for what, uri in places:
        key = uri.rstrip("/")
        if ttl_days(key) is None or key in seen or any(key.startswith(s + "/") for s in seen):
            continue
        seen.add(key)
        unique.append((what, key))
    return unique


def expired_evidence(storage: Storage, layout: RunLayout, now: datetime) -> list[ExpiredEvidence]:
    """The temp places the layout names that list nothing, when the run's own records say it wrote there: an
    attempt's record names its logs in one, or (Layout D) the resolved configuration names the temp root that
    discovery found empty. That is evidence the lifecycle rule already deleted, never a run without evidence. One
    request per place (the first object or none). `expired_after` is the earliest it can have died: the run's
    durable configuration's creation + N days (everything on temp storage was written after the run started)."""
    empty = [(what, uri) for what, uri in _temp_places(layout) if next(iter(storage.list(uri)), None) is None]
    logs_gone = any(
        a.log_prefix and any(f"{a.log_prefix.rstrip('/')}/".startswith(uri + "/") for _, uri in empty)
        for a in layout.attempts
    )
    configured = None if _listed_temp_root(layout) else configured_temp_root(layout)
    configured_gone = configured is not None and any(uri == configured for _, uri in empty)
    if not (logs_gone or configured_gone):
        return []
    config = storage.stat(layout.config_uri) if layout.config_uri and ttl_days(layout.config_uri) is None else None
    born = (config.created or config.updated) if config is not None else None
    gone: list[ExpiredEvidence] = []
    for what, uri in empty:
        days = ttl_days(uri) or 0
        # The temp area lies in the run's bucket (or its store's): dated by the rule of the backend the config is on.
        after = lifecycle_of(config).expires(born, days) if config is not None and born is not None else None
        gone.append(ExpiredEvidence(what=what, uri=uri, ttl_days=days, expired_after=after, found_gone_at=now))
    return gone


def expired_item(gone: ExpiredEvidence) -> str:
    since = f"expired after {stamp(gone.expired_after)}, " if gone.expired_after else ""
    if gone.expired_after is not None and gone.expired_after > gone.found_gone_at:
        since = f"before its lifecycle could delete it (not before {stamp(gone.expired_after)}): deleted otherwise, "
    return (
        f"evidence expired before rlcleanup could preserve it: {gone.what} at {gone.uri} (temp storage, "
        f"tmp/ttl={gone.ttl_days}d) is gone ({since}found gone at {stamp(gone.found_gone_at)}); what the durable "
        "root holds (and any earlier pass's copy in preserved_locations) is all the evidence left"
    )
