"""A log-scan plan in pages (issue 17 goal 3: work per invocation stays bounded as runs grow).

establish-terminal-state lists at most `capture_page_objects` log objects per invocation; an attempt's logs over
that are planned in pages, each a continuation message on log-scan-parts that names only its page (where to
resume is in the claim store; a continuation that comes too early or past the end: test_capture_pages.py). Run
end to end on the embedded stack, a paged plan must reach exactly the verdict a one-page plan does, from the same
files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcleanup.models.events import LogScanPlanPageMessage
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event, resolve_run_id
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.settings import DeploymentSettings


@pytest.fixture(autouse=True)
def _no_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)  # charts are not under test here


def _run(tmp_path: Path, page_objects: int) -> tuple[EmbeddedStack, str]:
    run_uri = str(write_sample_run(tmp_path / "runs", "completed-resumed"))
    settings = DeploymentSettings(capture_page_objects=page_objects)
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"), settings=settings)
    event = manual_event(run_uri)
    stack.emit(event)
    return stack, resolve_run_id(stack.ports, event)


def test_a_paged_log_scan_plan_reaches_the_verdict_one_page_does(tmp_path: Path) -> None:
    one, run_id = _run(tmp_path / "whole", 100_000)  # same-length dirs: the reasoning quotes log paths
    paged, paged_id = _run(tmp_path / "paged", 2)
    assert run_id == paged_id
    a, b = one.ports.records.get(run_id), paged.ports.records.get(run_id)
    assert a is not None and b is not None
    assert a.status is b.status is RecordStatus.awaiting_authority
    assert a.terminal_state == b.terminal_state
    assert a.first_failure_cause == b.first_failure_cause
    assert [r.replace("/paged/", "/whole/") for r in b.terminal_reasoning] == a.terminal_reasoning
    assert any("Training done!" in r for r in a.terminal_reasoning)  # the verdict read the logs

    whole = one.ports.claims.result(run_id, "terminal-plan")
    paged_plan = paged.ports.claims.result(run_id, "terminal-plan")
    assert whole is not None and paged_plan is not None
    assert whole["pages"] == 1 and paged_plan["pages"] > 2  # two attempts, several logs each: pages of 2
    pages = paged.ports.claims.results(run_id, "terminal-plan-page:")
    assert len(pages) == paged_plan["pages"]
    assert all(page["listed"] <= 2 for page in pages.values())  # no invocation listed more than its page
    ids = [part["part_id"] for part in paged_plan["parts"]]
    assert len(set(ids)) == len(ids)  # no two pages name the same part
    scans = paged.ports.claims.results(run_id, "log-scan:")
    assert len(scans) >= len(ids)  # every planned part was scanned (a cut file adds segments)
    files = lambda stack: sum(s["files"] for s in stack.ports.claims.results(run_id, "log-scan:").values())  # noqa: E731
    assert files(one) == files(paged) > 2  # the same log files were read, whatever the page size


def test_a_log_scan_continuation_carries_no_location() -> None:
    # `origin` (the run's starting event) is for recovery only (runtime/recovery.py): never where a page works.
    assert set(LogScanPlanPageMessage.model_fields) == {"run_id", "scope", "plan_page", "origin"}
    forged = LogScanPlanPageMessage.model_validate_json(json.dumps({"run_id": "r", "plan_page": 1, "dest_root": "/x"}))
    assert forged.model_dump() == {"run_id": "r", "scope": "", "plan_page": 1, "origin": None}
