"""Which pass of the pipeline an event belongs to: a run can end more than once (a resubmitted step).

Marin overwrites a finished step's `.executor_status` with RUNNING when the step is resubmitted, then writes a new
terminal token (run-layout-v2.md §4). That later end must re-drive the pipeline (the record's chain gains the new
attempt), while a duplicate of an end already handled must not. The identity of an end is taken from the run's
durable state when the event is handled, never from the event alone (sources disagree on what an attempt is):
its **end marks** are each step's `.executor_status` token and object version (GCS generation, S3 ETag +
Last-Modified, local stat fingerprint) and the attempt ids on record.

- The first end of a run is scope "": its claims are the keys the pipeline always used (`classify`, ...), and its
  marks are stored in the `classify` result.
- A later end gets scope `<12 hex of its marks>/`, ledgered as claim `pass:<hex>` (its marks and its ordinal);
  every stage's claim key carries the prefix, so the new pass runs every stage once more, and only once.
- An end is new only when every status token is terminal again and one of them was rewritten over a terminal
  token (or, for runs without status files, a new attempt id appeared; or a non-terminal token of the previous
  pass turned terminal together with a new attempt). A step still RUNNING again means the new attempt has not
  ended: events about the old end are duplicates, the finished record stays as it is.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlcleanup.errors import RetryLater
from rlcleanup.models.plans import Classified, PassMark
from rlcleanup.ports.records import IdempotencyStore
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import join

CLASSIFY_KEY = "classify"
PASS_PREFIX = "pass:"
STATUS_FILE = ".executor_status"
TERMINAL_TOKENS = frozenset({"SUCCESS", "FAILED", "DEP_FAILED", "CANCELLED"})
_SCOPED = re.compile(r"^[0-9a-f]{12}/")


def scoped(scope: str, key: str) -> str:
    return f"{scope}{key}"


def unscoped(key: str) -> str:
    """The stage key without its pass prefix (`3f2a.../log-scan:p1` -> `log-scan:p1`)."""
    return _SCOPED.sub("", key, count=1)


def pass_id(scope: str) -> str:
    return scope.rstrip("/")


class StatusMark(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    uri: str
    token: str | None
    version: str


class EndMarks(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    statuses: list[StatusMark] = []
    attempts: list[str] = []

    @property
    def key(self) -> str:
        raw = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:12]

    @property
    def all_terminal(self) -> bool:
        return all(s.token in TERMINAL_TOKENS for s in self.statuses)


def _version(info: ObjectInfo) -> str:
    if info.fingerprint:
        return info.fingerprint
    if info.generation is not None:
        return f"gen:{info.generation}"
    return f"{info.etag}@{info.updated.isoformat() if info.updated else ''}"


def end_marks(storage: Storage, layout: RunLayout) -> EndMarks:
    """The run's end as its durable state shows it now: one stat per step status file, no reads."""
    steps = [(s.uri, s.executor_status) for s in layout.steps] or [(layout.run_uri, layout.executor_status)]
    statuses = []
    for root, token in steps:
        info = storage.stat(join(root, STATUS_FILE))
        if info is not None:
            statuses.append(StatusMark(uri=info.uri, token=token, version=_version(info)))
    attempts = {a.attempt_id for a in layout.attempts} | {a.attempt_id for s in layout.steps for a in s.attempts}
    return EndMarks(statuses=statuses, attempts=sorted(attempts))


def is_new_end(previous: EndMarks, now: EndMarks) -> bool:
    if not now.all_terminal:
        return False  # a resubmitted step still runs: its terminal token will start the new pass
    new_attempts = bool(set(now.attempts) - set(previous.attempts))
    if not now.statuses:
        return new_attempts
    before = {s.uri: s for s in previous.statuses}
    for mark in now.statuses:
        old = before.get(mark.uri)
        if old is None or old.version == mark.version:
            continue
        if old.token in TERMINAL_TOKENS or new_attempts:
            return True
    return False


def choose_scope(
    claims: IdempotencyStore, run_id: str, marks: EndMarks, confirm: Callable[[], EndMarks] | None = None
) -> str | None:
    """The scope to classify this end under: "" (first end, or the first pass still being classified), an
    existing pass whose marks match (its claims make the event a duplicate), a new pass, or None: no new end
    (a duplicate, late or early event of the latest end).

    `confirm` observes the marks again (a fresh discovery and stat) before a new pass is created: the token and
    attempts come from discovery and the version from a later stat, so a status rewritten between the two (a
    resubmission's RUNNING over FAILED) would otherwise pair the old token with the new version and open a pass
    for an end that has not happened. Two observations that differ mean the run is changing: retried later."""
    first = claims.result_as(run_id, CLASSIFY_KEY, Classified)
    if first is None:
        return ""
    later = sorted(claims.results_as(run_id, PASS_PREFIX, PassMark).items(), key=lambda kv: kv[1].n)
    passes: list[tuple[str, dict[str, Any] | None]] = [("", first.end or None)]
    passes += [(f"{key.removeprefix(PASS_PREFIX)}/", value.end) for key, value in later]
    for scope, end in passes:
        if end is not None and EndMarks.model_validate(end).key == marks.key:
            return scope
    latest = passes[-1][1]
    if latest is None or not is_new_end(EndMarks.model_validate(latest), marks):
        return None  # a run classified before marks were kept is never re-driven by a guess
    if confirm is not None and confirm() != marks:
        raise RetryLater(f"{run_id}: the run's status files or attempts changed while its end was read")
    claims.complete_as(run_id, f"{PASS_PREFIX}{marks.key}", PassMark(end=marks.model_dump(mode="json"), n=len(passes)))
    return f"{marks.key}/"
