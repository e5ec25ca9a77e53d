"""A capture plan in pages (issue 17 goal 3: work per invocation stays bounded as runs grow).

plan-capture lists at most `capture_page_objects` objects per invocation; a run over that is planned in pages,
each a continuation message on capture-parts that names only its page (where to resume is in the claim store).
Run end to end on the embedded stack (the same handlers as a deployment), a paged plan must preserve exactly what
a one-page plan does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcleanup.errors import PermanentError, RetryLater
from rlcleanup.models.events import CapturePlanPageMessage, LogScanPlanPageMessage
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event, resolve_run_id
from rlcleanup.runtime.stage_table import stage_table
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.settings import DeploymentSettings


@pytest.fixture(autouse=True)
def _no_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)  # charts are not under test here


def _run(tmp_path: Path, page_objects: int) -> tuple[EmbeddedStack, str, Path]:
    run_uri = str(write_sample_run(tmp_path / "runs", "completed-resumed"))
    settings = DeploymentSettings(capture_page_objects=page_objects)
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"), settings=settings)
    event = manual_event(run_uri)
    stack.emit(event)
    run_id = resolve_run_id(stack.ports, event)
    return stack, run_id, tmp_path / "preserved" / run_id


def _preserved(root: Path) -> set[str]:
    """What capture preserved (names under the run's location), without the plan's own working files (listing
    pages, per-part manifests named by part id; the joined manifest is compared)."""
    names = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    return {n for n in names if not n.startswith(("derived/pages/", "_parts/"))}


def _listing(root: Path, name: str) -> list[dict[str, object]]:
    lines = (root / "derived" / f"{name}-listing.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "uri"} | {"uri": _rel(line)} for line in lines]


def _rel(line: str) -> str:
    return str(json.loads(line)["uri"]).split("/runs/", 1)[1]


def test_a_paged_plan_preserves_what_one_page_does(tmp_path: Path) -> None:
    one, one_id, one_root = _run(tmp_path / "whole", 100_000)  # same-length dirs: listings name the URIs
    paged, paged_id, paged_root = _run(tmp_path / "paged", 7)
    assert one_id == paged_id
    a, b = one.ports.records.get(one_id), paged.ports.records.get(paged_id)
    assert a is not None and b is not None
    assert a.status is b.status is RecordStatus.awaiting_authority
    assert [(c.step, c.valid) for c in a.candidates] == [(c.step, c.valid) for c in b.candidates]
    assert a.errors == b.errors == []

    whole = paged.ports.claims.result(paged_id, "capture-plan")
    assert whole is not None and whole["pages"] > 3  # the sample has ~40 objects: several pages of 7
    pages = paged.ports.claims.results(paged_id, "capture-plan-page:")
    assert len(pages) == whole["pages"]
    assert all(page["listed"] <= 7 for page in pages.values())
    assert len(set(whole["parts"])) == len(whole["parts"])  # no two pages name the same part
    assert one.ports.claims.result(one_id, "capture-plan")["pages"] == 1  # type: ignore[index]

    assert _preserved(one_root) == _preserved(paged_root)  # the same evidence, under the same names
    manifests = [json.loads((r / "_parts" / "capture-manifest.json").read_text()) for r in (one_root, paged_root)]
    assert manifests[0]["object_count"] == manifests[1]["object_count"] > 40
    assert manifests[0]["total_bytes"] == manifests[1]["total_bytes"]
    rows = [
        sorted((o["destination"].removeprefix(str(r)), o["size"], o["kind"]) for o in m["objects"])
        for r, m in zip((one_root, paged_root), manifests, strict=True)
    ]
    assert rows[0] == rows[1]
    assert any(n.startswith("derived/pages/") for n in {str(p.relative_to(paged_root)) for p in paged_root.rglob("*")})
    for name in ("checkpoints", "exports"):  # the joined listing is the one-page listing (name order both)
        assert _listing(one_root, name) == _listing(paged_root, name)
        assert _listing(one_root, name)


@pytest.mark.parametrize(
    ("message", "entry_point", "key"),
    [
        (CapturePlanPageMessage, "capture_part", "capture-plan-page"),
        (LogScanPlanPageMessage, "scan_log_part", "terminal-plan-page"),  # tests/unit/test_logscan_pages.py
    ],
    ids=["capture", "log-scan"],
)
def test_a_page_without_the_page_before_it_waits_and_one_past_the_end_is_refused(
    tmp_path: Path, message: type[CapturePlanPageMessage], entry_point: str, key: str
) -> None:
    """A continuation only names its page. With no stored page before it there is nowhere to resume from yet:
    it is retried (a continuation from before a record-store loss can arrive before the re-emitted run stores
    its page 0 again). After a page that ended the plan it is bad input."""
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    row = stage_table().row(entry_point)  # its handler on the payload as the row decodes it, as dispatch runs it
    data = message(run_id="never-planned", plan_page=2).model_dump_json().encode()
    with pytest.raises(RetryLater) as waiting:
        row.run(stack.ports, data, {})
    assert "page 1 is not stored yet" in str(waiting.value)
    stack.ports.claims.claim("ended", f"{key}:0", 60, stack.ports.clock.now(), owner="t")
    run = {"run_id": "ended", "run_uri": "/runs/ended", "preserve_root": "/p"}
    last_page = {"parts": [], "dest_root": "/p/ended", "run": run, "listed": 0, "next": None}
    stack.ports.claims.complete("ended", f"{key}:0", last_page)
    past_end = message(run_id="ended", plan_page=1).model_dump_json().encode()
    with pytest.raises(PermanentError) as refused:
        row.run(stack.ports, past_end, {})
    assert refused.value.code == "bad_input" and "the plan ended before it" in str(refused.value)


def test_a_continuation_carries_no_location() -> None:
    """Where a page reads and writes comes from the page before it in the claim store; a forged continuation
    can name only a run and a page number (extra fields are dropped)."""
    # `origin` (the run's starting event) is for recovery only (runtime/recovery.py): never where a page works.
    assert set(CapturePlanPageMessage.model_fields) == {"run_id", "scope", "plan_page", "origin"}
    forged = CapturePlanPageMessage.model_validate_json(
        json.dumps({"run_id": "r", "plan_page": 1, "run_uri": "/etc", "preserve_root": "/tmp/x"})
    )
    assert forged.model_dump() == {"run_id": "r", "scope": "", "plan_page": 1, "origin": None}
