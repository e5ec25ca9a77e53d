"""Issue 35 item 2: every object under `tmp/ttl=<N>d/` knows when it dies (run-layout-v3.md §1), capture copies
the soonest-dying first, an owed export about to die is a person's deadline, and a run first seen after its temp
evidence expired says what is gone.

The runs are the `layout-d` (temp root `tmp/ttl=7d/`) and `deferred-export` (Marin's `tmp/ttl=14d/`) samples; a local object's creation time
is its mtime, set here, and the pipeline's clock is fixed, so "now" moves only when a test moves it."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority.ledger import is_ready
from rlcleanup.errors import PermanentError
from rlcleanup.models.parts import CapturePart
from rlcleanup.models.record import CompletionRecord, ExportRequestState
from rlcleanup.models.vocab import CandidateState, RecordStatus
from rlcleanup.ports.storage import Storage
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.samples.v3 import TTL_DAYS
from rlcleanup.sources.deadlines import recheck
from rlcleanup.steps import capture as capture_step
from rlcleanup.steps.capture import PartResult, capture_roots, plan_capture, plan_capture_page
from rlcleanup.steps.expiry import DEADLINE_PREFIX, expires_at, ttl_days
from rlcleanup.steps.layout import discover

T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)  # when every temp object was written (its creation time)
TTL = timedelta(days=TTL_DAYS)


class _FixedClock:
    def __init__(self, now: datetime) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now


def _age(root: Path, when: datetime) -> None:
    stamp = when.timestamp()
    for path in [root, *root.rglob("*")]:
        os.utime(path, (stamp, stamp))


def _temp_root(durable: Path) -> Path:
    return durable.parents[3] / "tmp" / f"ttl={TTL_DAYS}d" / "skyrl" / "users" / "dlwh" / durable.name


def _run(tmp_path: Path, run: Path, now: datetime, name: str = "r") -> CompletionRecord:
    stack = EmbeddedStack.create(tmp_path / f"{name}.db", str(tmp_path / f"{name}-preserved"))
    stack.ports.clock = _FixedClock(now)
    stack.emit(manual_event(str(run)))
    [record] = list(stack.ports.records.list_runs())
    return record


@pytest.fixture(autouse=True)
def _no_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)


def test_an_object_under_a_ttl_prefix_dies_n_days_after_its_creation(tmp_path: Path) -> None:
    durable = write_sample_run(tmp_path / "runs", "layout-d")
    temp = _temp_root(durable)
    _age(temp, T0)
    _age(durable, T0)
    storage = LocalStorage(checksums=False)
    marker = storage.stat(str(temp / "checkpoints" / "latest_ckpt_global_step.txt"))
    config = storage.stat(str(durable / "resolved-skyrl.json"))
    assert marker is not None and config is not None
    assert (ttl_days(marker.uri), expires_at(marker)) == (TTL_DAYS, T0 + TTL)
    assert (ttl_days(config.uri), expires_at(config)) == (None, None)  # durable storage never expires
    assert ttl_days("gs://b/tmp/ttl=30d/skyrl/users/a/j/x") == 30
    assert ttl_days("gs://b/tmp/ttl=30dx/skyrl") is None


def test_capture_copies_the_soonest_dying_objects_first(tmp_path: Path) -> None:
    durable = write_sample_run(tmp_path / "runs", "layout-d")
    temp = _temp_root(durable)
    _age(temp, T0)
    # One log of the later attempt was written two days before everything else: it dies first.
    [first_dying] = sorted((temp / "attempts").glob("*/logs/finelog.log"))[-1:]
    os.utime(first_dying, ((T0 - timedelta(days=2)).timestamp(),) * 2)
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(durable))

    # The temp root is listed before the durable one (pages are listed in root order).
    assert [label for label, _ in capture_roots(layout)][:2] == ["temp", "run"]

    plan = plan_capture(storage, layout, "run", str(tmp_path / "preserved"))
    items = [item for part in plan.parts for item in part.items]
    assert items[0].source == str(first_dying)
    assert items[0].expires_at == T0 - timedelta(days=2) + TTL
    dying = [item.expires_at for item in items if item.expires_at is not None]
    assert dying == sorted(dying)  # every temp object in expiry order, part by part
    assert all(item.expires_at is None for item in items[len(dying) :])  # durable objects after them
    assert plan.expiry_by_class["log"] == T0 - timedelta(days=2) + TTL
    assert plan.expiry_by_class["checkpoint_metadata"] == T0 + TTL

    # A bounded page lists the temp root first, and its parts are in expiry order too.
    page = plan_capture_page(storage, layout, "run", str(tmp_path / "paged"), page=0, cursor=None, limit=3)
    page_items = [item for part in page.parts for item in part.items]
    assert page_items and all(item.expires_at is not None for item in page_items)
    assert page.next is not None and page.next.root == 0


def _deferred(tmp_path: Path) -> Path:
    """The deferred-export sample: a Marin step whose temp area is `tmp/ttl=14d/skyrl/<job>/<date>`."""
    durable = write_sample_run(tmp_path / "runs", "deferred-export")
    _age(tmp_path / "runs" / "tmp" / "ttl=14d", T0)
    _age(durable, T0)
    return durable


TTL14 = timedelta(days=14)


def test_an_owed_export_dying_within_72_hours_needs_a_person_with_its_deadline(tmp_path: Path) -> None:
    durable = _deferred(tmp_path)

    # A week before the checkpoints die: the owed export is ordinary remaining work.
    early = _run(tmp_path, durable, T0 + timedelta(hours=1), "early")
    convertible = [c for c in early.candidates if c.state is CandidateState.convertible]
    assert convertible and all(c.expires_at == T0 + TTL14 for c in convertible)
    assert early.evidence_expires_at == T0 + TTL14 and early.evidence_expiry["log"] == T0 + TTL14
    assert early.evidence_deadline is None and not early.deadlines
    assert early.status is not RecordStatus.needs_person
    assert not any(item.startswith(DEADLINE_PREFIX) for item in early.remaining_work)

    # The clock moves to 48 h before they die: a person must convert or copy them, and the record says by when.
    now = T0 + TTL14 - timedelta(hours=48)
    late = _run(tmp_path, durable, now, "late")
    assert late.status is RecordStatus.needs_person
    assert late.evidence_deadline == T0 + TTL14
    deadline_items = [item for item in late.remaining_work if item.startswith(DEADLINE_PREFIX)]
    steps = sorted(c.step for c in late.candidates if c.state is CandidateState.convertible)
    assert len(deadline_items) == len(steps) == len(late.deadlines)
    assert all((T0 + TTL14).isoformat(timespec="seconds") in item for item in deadline_items)
    assert all(f"global_step_{step}" in " ".join(deadline_items) for step in steps)
    assert is_ready(late)  # a grant may be what meets the deadline: it still acts on the record

    # The sweep re-checks it: once the deadline has passed it says so, once.
    passed = recheck(late, T0 + TTL14 + timedelta(hours=1), lambda uri: None)
    assert [e.code for e in passed.errors] == ["deadline_passed"] * len(steps)
    assert passed.fields["status"] == RecordStatus.needs_person.value
    assert all("(passed)" in item for item in passed.fields["remaining_work"] if item.startswith(DEADLINE_PREFIX))
    again = CompletionRecord.model_validate({**late.model_dump(mode="json"), **passed.fields})
    assert recheck(again, T0 + TTL14 + timedelta(hours=2), lambda uri: None).fields == {}

    # ...and an export job that ran since closes the deadline: nothing is owed any more.
    def complete(uri: str) -> ExportRequestState:
        return ExportRequestState(uri=f"{uri}/hf_export_request.json", status="complete")

    done = recheck(late, now + timedelta(hours=1), complete)
    assert done.fields["deadlines"] == [] and done.fields["evidence_deadline"] is None
    assert done.fields["status"] != RecordStatus.needs_person.value
    assert not any(item.startswith(DEADLINE_PREFIX) for item in done.fields["remaining_work"])


def test_a_run_first_seen_after_its_temp_evidence_expired_says_what_is_gone(tmp_path: Path) -> None:
    durable = write_sample_run(tmp_path / "runs", "layout-d")
    temp = _temp_root(durable)
    _age(durable, T0)
    shutil.rmtree(temp.parents[3])  # the lifecycle rule deleted the whole temp root (tmp/ttl=7d/...)
    now = T0 + timedelta(days=30)
    record = _run(tmp_path, durable, now)
    [gone] = record.evidence_expired
    assert (gone.uri, gone.ttl_days, gone.expired_after, gone.found_gone_at) == (str(temp), TTL_DAYS, T0 + TTL, now)
    [item] = [item for item in record.remaining_work if item.startswith("evidence expired")]
    assert str(temp) in item and (T0 + TTL).isoformat(timespec="seconds") in item and "tmp/ttl=7d" in item
    assert not any("no evidence" in item.lower() for item in record.remaining_work)
    assert record.evidence_expires_at is None  # nothing left on temp storage to die


def test_a_temp_root_that_still_holds_its_objects_is_not_expired(tmp_path: Path) -> None:
    durable = write_sample_run(tmp_path / "runs", "layout-d")
    _age(_temp_root(durable), T0)
    record = _run(tmp_path, durable, T0 + timedelta(days=1))
    assert record.evidence_expired == []
    assert not any(item.startswith("evidence expired") for item in record.remaining_work)
    assert json.loads(record.model_dump_json())["evidence_expires_at"] is not None


def test_temp_evidence_a_capture_part_could_not_preserve_is_a_deadline_when_it_dies_soon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    durable = write_sample_run(tmp_path / "runs", "layout-d")
    _age(_temp_root(durable), T0)
    original = capture_step.copy_part

    def refuse_temp(storage: Storage, dest_root: str, part: CapturePart, **kwargs: int) -> PartResult:
        if any(item.expires_at is not None for item in part.items):
            raise PermanentError("unsafe_path", f"refused {part.items[0].source}")
        return original(storage, dest_root, part, **kwargs)

    monkeypatch.setattr(capture_step, "copy_part", refuse_temp)
    early = _run(tmp_path, durable, T0 + timedelta(days=1), "early")  # six days left: an error, not a deadline
    assert early.status is not RecordStatus.needs_person and not early.deadlines
    assert any(e.code == "capture_part_failed" for e in early.errors)

    late = _run(tmp_path, durable, T0 + TTL - timedelta(hours=24), "late")  # a day left: a person's deadline
    assert late.status is RecordStatus.needs_person and late.evidence_deadline == T0 + TTL
    assert late.deadlines and all(d.source == "capture" for d in late.deadlines)
    items = [item for item in late.remaining_work if item.startswith(DEADLINE_PREFIX)]
    assert items and all("could not preserve" in item and "unsafe_path" in item for item in items)
