"""Capture parts too large for one function invocation go to the large-copy job (runtime/stages/large_copy.py,
runtime/copy_job.py): the split across tasks, and on the embedded default (the local jobs adapter: one child
process per task) the same record as the inline copy, the outcome filed under the inline path's claim key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from record_support import comparable

from rlcleanup.models.outcomes import CapturePartOutcome
from rlcleanup.models.parts import CaptureItem, CapturePart
from rlcleanup.runtime import evidence
from rlcleanup.runtime.claims import stored
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event, resolve_run_id
from rlcleanup.runtime.stages import large_copy
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.settings import load_settings


def _stack(root: Path, *, threshold: int | None = None, max_tasks: int = 16) -> EmbeddedStack:
    """An embedded stack; with a threshold, parts over it go to the large-copy job (local: child processes)."""
    update: dict[str, Any] = {"copy_job_max_tasks": max_tasks}
    if threshold is not None:
        update |= {"large_copy_job": "local", "copy_job_threshold_bytes": threshold}
    settings = load_settings().model_copy(update=update)
    return EmbeddedStack.create(root / "records.db", str(root / "preserved"), settings=settings)


def _items(*sizes: int) -> list[CaptureItem]:
    return [
        CaptureItem(source=f"gs://b/o{i}", dest_rel=f"o{i}", size=s, kind="checkpoint") for i, s in enumerate(sizes)
    ]


def test_every_object_goes_to_exactly_one_task_balanced_by_bytes() -> None:
    items = _items(90, 10, 50, 40, 30, 30, 5)
    slices = [large_copy.slice_items(items, i, 3) for i in range(3)]
    assert sorted(it.source for s in slices for it in s) == sorted(it.source for it in items)
    loads = sorted(sum(it.size for it in s) for s in slices)
    assert loads == [80, 85, 90]  # largest first, each to the lightest task
    assert all(s == sorted(s, key=items.index) for s in slices)  # in the part's order


def test_task_count_is_one_per_threshold_bounded_by_objects_and_the_maximum(tmp_path: Path) -> None:
    p = _stack(tmp_path, threshold=100, max_tasks=4).ports
    part = CapturePart(part_id="x", items=_items(150, 150, 150, 150, 150, 150))
    assert large_copy.task_count(p, part) == 4  # 900 bytes: 9 tasks' worth, the maximum is 4
    assert large_copy.task_count(p, CapturePart(part_id="y", items=_items(250))) == 1  # one object, one task
    assert large_copy.goes_to_job(p, CapturePart(part_id="z", items=_items(100))) is False  # not over: inline
    assert large_copy.goes_to_job(p, CapturePart(part_id="z", items=_items(101))) is True


def test_parts_over_the_threshold_are_copied_by_the_job_with_the_inline_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)  # a chart per run, not compared
    run_uri = str(write_sample_run(tmp_path / "runs", "completed-resumed"))
    event = manual_event(run_uri)

    inline = _stack(tmp_path / "inline")
    inline.emit(event)
    run_id = resolve_run_id(inline.ports, event)
    parts = inline.ports.claims.results(run_id, "capture-part:")
    sizes = sorted(int(v["bytes"]) for v in parts.values())
    assert len(sizes) >= 2 and sizes[-1] > sizes[-2]
    threshold = sizes[-1] - 1  # the largest part goes to the job; the others stay inline

    jobbed = _stack(tmp_path / "job", threshold=threshold, max_tasks=3)
    jobbed.emit(event)
    assert resolve_run_id(jobbed.ports, event) == run_id
    job_record, inline_record = (
        comparable(jobbed.ports.records.get(run_id), tmp_path / "job"),
        comparable(inline.ports.records.get(run_id), tmp_path / "inline"),
    )
    # The storage ledger counts the preserved location's working files too (_parts/: a job's part outcome is
    # worded otherwise than an inline one): every other class, and every other field, is the same.
    ledgers = [
        {c["name"]: c for c in r.pop("storage_ledger")["classes"] if c["name"] != "preserved_evidence"}
        for r in (job_record, inline_record)
    ]
    assert ledgers[0] == ledgers[1] and ledgers[0]["exports"]["bytes"] > 0
    for storage_total in ("storage_bytes", "storage_monthly_usd"):
        job_record.pop(storage_total), inline_record.pop(storage_total)
    assert job_record == inline_record

    claims = jobbed.ports.claims.results(run_id, "")
    starts = {k: v for k, v in claims.items() if k.endswith("/job-start")}
    assert len(starts) == 1  # one part over the threshold, one execution
    ((start_key, start),) = starts.items()
    assert "local pid" in start["execution"]
    key = start_key.removeprefix(large_copy.JOB_CLAIMS).removesuffix("/job-start")
    assert key.startswith("capture-part:")
    tasks = [k for k in claims if k.startswith(f"{large_copy.JOB_CLAIMS}{key}/task-")]
    assert len(tasks) >= 2 and all(k.endswith(f"-of-{len(tasks)}") for k in tasks)  # split across its tasks
    outcome = stored(jobbed.ports, run_id, key, CapturePartOutcome)  # under the inline path's own claim key
    assert outcome is not None and outcome.bytes == sizes[-1]
    assert stored(inline.ports, run_id, key, CapturePartOutcome) == outcome
