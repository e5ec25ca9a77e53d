"""Issue 40: retention as a plan with reasons (the resume point and an owed export are refused, a candidate left
out of selection is listed), and the storage ledger's figures equal a direct listing of the sample runs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from authority_support import files_under, make_world

from rlcleanup.authority import retention
from rlcleanup.authority.preview import preview_grant
from rlcleanup.authority.reclaim import ReclaimPlan, make_plan
from rlcleanup.authority.storage_ledger import measure
from rlcleanup.cli.preview_text import render_preview
from rlcleanup.models.record import (
    Candidate,
    CompletionRecord,
    ExportRequestState,
    ResumeSafety,
    Selection,
)
from rlcleanup.models.vocab import CandidateState
from rlcleanup.ports.storage import ObjectInfo


def test_an_owed_export_is_refused_with_its_reason_in_the_plan_and_the_preview(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    w.deliver(w.message(w.grant("publish")))
    grant = w.grant("reclaim")
    record = w.record
    owed = record.model_copy(
        update={
            "candidates": [
                c.model_copy(
                    update={
                        "export_request": ExportRequestState(
                            uri=f"{c.uri}/../hf_export_request.json", status="in_progress"
                        )
                    }
                )
                if c.step == grant.step
                else c
                for c in record.candidates
            ]
        }
    )
    plan = make_plan(w.stack.ports.storage, w.stack.ports.records, owed, grant, datetime.now(UTC))
    assert isinstance(plan, ReclaimPlan)
    export = {str(p) for p in files_under(Path(w.candidate(40).uri))}
    assert not plan.delete and {r.uri for r in plan.refused} == export
    assert all("export owed" in r.reason for r in plan.refused)
    preview = preview_grant(w.stack.ports.storage, owed, grant, datetime.now(UTC), w.stack.ports.records)
    text = render_preview(preview)
    assert preview["delete_count"] == 0 and "refused" in text and "export owed" in text
    assert any(line.startswith("  retention: resume point") for line in text.splitlines()), text
    # the record as it is (nothing owed): the same grant's plan deletes the export, with every kept object's reason
    fine = make_plan(w.stack.ports.storage, w.stack.ports.records, record, grant, datetime.now(UTC))
    assert isinstance(fine, ReclaimPlan) and {d.uri for d in fine.delete} == export and not fine.refused
    reasons = {k.reason for k in fine.keep}
    assert any(r.startswith("resume point") for r in reasons), reasons
    assert any(r.startswith("declared selection") or r.startswith("runner-up") for r in reasons), reasons


def _record(**fields: object) -> CompletionRecord:
    base: dict[str, object] = {"run_id": "r", "run_uri": "gs://b/runs/r"}
    base.update(fields)
    return CompletionRecord.model_validate(base)


def _candidate(step: int, uri: str, **kw: object) -> Candidate:
    return Candidate(step=step, uri=uri, state=CandidateState.valid, valid=True, **kw)  # type: ignore[arg-type]


def test_a_best_never_evicts_the_resume_point_even_inside_the_granted_export() -> None:
    # export_path == ckpt_path: the weights of step 40 are written into the resume checkpoint's own directory.
    ckpt = "gs://b/runs/r/ckpts"
    record = _record(
        candidates=[_candidate(30, f"{ckpt}/global_step_30/policy"), _candidate(40, f"{ckpt}/global_step_40/policy")],
        resume_safety=ResumeSafety(safe=True, from_step=40),
        selection=Selection(status="selected", step=30, runner_up=40, candidates_considered=[30, 40]),
    )
    objects = [ObjectInfo(uri=f"{ckpt}/global_step_{s}/policy/model.safetensors", size=1) for s in (10, 20, 30, 40)]
    plan = retention.make_retention(record, retention.checkpoint_steps(objects, record), max_ckpts=2)
    assert plan.resume_steps == [30, 40]
    best = retention.protection(f"{ckpt}/global_step_40/policy/model.safetensors", plan, record, verified_step=40)
    assert best.blocks_reclaim and best.reason.startswith("resume point: checkpoint step 40")
    older = retention.protection(f"{ckpt}/global_step_10/policy/model.safetensors", plan, record, verified_step=10)
    assert not older.blocks_reclaim  # outside max_ckpts_to_keep: a verified publish may let it go


def test_a_candidate_excluded_for_a_missing_metric_is_listed_not_dropped() -> None:
    record = _record(
        candidates=[_candidate(s, f"gs://b/runs/r/exports/global_step_{s}/policy") for s in (10, 20, 30)],
        resume_safety=ResumeSafety(safe=True, from_step=30),
        selection=Selection(status="selected", step=20, runner_up=10, candidates_considered=[10, 20]),
    )
    plan = retention.make_retention(record, [10, 20, 30], max_ckpts=None)
    assert 30 in plan.excluded and any("excluded from selection, listed: step 30" in r for r in plan.reasons())
    why = retention.protection("gs://b/runs/r/exports/global_step_30/policy/a.bin", plan, record, None)
    assert "excluded from selection" in why.reason


def _rendered_by_rlcleanup(path: Path, preserved: Sequence[str]) -> bool:
    """The report and sealed manifest rlcleanup writes into a preserved location: not the run's storage."""
    for root in map(Path, preserved):
        if path.parent == root and path.name.startswith("manifest") and path.suffix == ".json":
            return True
        if path.parent == root / "derived" and path.name.startswith(("report", "timeline")):
            return True
    return False


def _direct(paths: list[str], preserved: Sequence[str] = ()) -> tuple[int, int]:
    files = [p for root in paths for p in files_under(Path(root)) if not _rendered_by_rlcleanup(Path(p), preserved)]
    return sum(os.path.getsize(p) for p in files), len(files)


@pytest.mark.parametrize("scenario", ["selection-policy", "deferred-export"])
def test_the_ledger_matches_a_direct_listing_of_the_sample_run(tmp_path: Path, scenario: str) -> None:
    w = make_world(tmp_path, scenario)
    record = w.record
    ledger = measure(w.stack.ports.storage, record, "test", datetime.now(UTC))
    roots = [record.run_uri, *([record.temp_root] if record.temp_root else []), *record.preserved_locations]
    size, count = _direct(roots, record.preserved_locations)
    assert (ledger.bytes, ledger.objects) == (size, count)
    # The pipeline measured it when the record completed: the same figures, on the record, its report and `show`.
    assert record.storage_ledger is not None and record.storage_ledger.label == "at completion"
    assert (record.storage_ledger.bytes, record.storage_ledger.objects, record.storage_bytes) == (size, count, size)
    assert record.storage_ledger_note is None
    report = (Path(record.preserved_locations[0]) / "derived" / "report.md").read_text()
    assert "## Storage" in report and f"{size} bytes in {count} objects" in report
    assert sum(c.bytes for c in ledger.classes) == ledger.bytes
    by_class = {c.name: c for c in ledger.classes}
    exports = [c.uri.removesuffix("/policy") for c in record.candidates if Path(c.uri).exists()]
    staging = [o for o in files_under(Path(record.run_uri)) if retention.STAGING.search(str(o))]
    if scenario == "deferred-export":  # an export job's staging: invisible to the record so far, in the ledger now
        assert staging and by_class["export_staging"].bytes == sum(os.path.getsize(p) for p in staging)
    assert by_class["exports"].bytes == _direct(exports)[0] - sum(
        os.path.getsize(p) for p in staging if any(str(p).startswith(e + "/") for e in exports)
    )
    assert by_class["preserved_evidence"].objects == _direct(record.preserved_locations, record.preserved_locations)[1]
    assert ledger.listings == len(roots) + 1  # one listing per root and one of the run's quarantine, none per object
    assert ledger.monthly_usd == 0.0  # local files cost nothing at list price
