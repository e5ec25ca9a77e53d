"""Reports rendered from real pipeline runs of the sample scenarios: verdict text, evidence, the timeline's pixels,
a self-contained HTML page, and write-once publication into the preserved location."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.models.record import ChainCoverage, CompletionRecord
from rlcleanup.report import ReportInputs, load_inputs, publish_report, render_report, timeline
from rlcleanup.report.timeline import GAP_RED, STATE_COLOURS
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

SCENARIOS = ["failed-first-link", "selection-policy", "missing-shard", "completed-resumed"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CompletionRecord]:
    base = tmp_path_factory.mktemp("report")
    out = {}
    for scenario in SCENARIOS:
        root = write_sample_run(base / "src", scenario)
        record = run_embedded(str(root), db_path=base / "r.db", preserve_root=str(base / "p"))
        assert record is not None
        out[scenario] = record
    return out


@pytest.fixture(scope="module")
def db(runs: dict[str, CompletionRecord]) -> SqliteRunRecords:
    first = next(iter(runs.values()))
    return SqliteRunRecords(Path(first.preserved_locations[0]).parents[1] / "r.db")


def _render(record: CompletionRecord, timeline: bool = False):  # type: ignore[no-untyped-def]
    return render_report(load_inputs(LocalStorage(), record), with_timeline=timeline)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def _close(pixel: tuple[int, ...], colour: str, tol: int = 12) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(pixel[:3], _rgb(colour), strict=True))


# ------------------------------------------------------------------ verdict and evidence


def test_verdict_line_of_a_failed_run(runs: dict[str, CompletionRecord]) -> None:
    r = runs["failed-first-link"]
    line = _render(r).document.verdict.line
    assert r.first_failure_cause is not None
    assert line == (
        f"{r.run_id}: failed · first cause torch.OutOfMemoryError in attempt {r.first_failure_cause.attempt_id} · "
        "selection unresolved among 1 valid candidate (5) · resume safe from step 5 · "
        "a person must: diagnose the first causal error before any relaunch (+4 more)"
    )
    assert _render(r).document.verdict.tone == "bad"


def test_verdict_line_of_a_selected_run(runs: dict[str, CompletionRecord]) -> None:
    r = runs["selection-policy"]
    assert _render(r).document.verdict.line.startswith(
        f"{r.run_id}: completed · selected step 30 · resume safe from step 40 · a person must: hand off / publish"
    )


def test_markdown_opens_with_the_verdict_then_the_evidence(runs: dict[str, CompletionRecord]) -> None:
    r = runs["failed-first-link"]
    md = _render(r).markdown()
    lines = md.splitlines()
    assert lines[0] == f"# rlcleanup report: {r.run_id}"
    assert lines[2].startswith(f"**Verdict:** {r.run_id}: failed · first cause torch.OutOfMemoryError")
    headings = [line[3:] for line in lines if line.startswith("## ")]
    assert headings[:2] == ["What needs a person", "Chain"]
    assert {"First failure cause", "Candidates", "Preserved evidence", "Configuration and revision"} <= set(headings)
    assert "- diagnose the first causal error before any relaunch" in md
    assert "Traceback (most recent call last):" in md  # the whole traceback, fenced
    assert r.manifest_uri and r.manifest_uri in md
    assert r.resolved_config and r.resolved_config.sha256 in md


def test_attempt_times_read_as_rfc3339(runs: dict[str, CompletionRecord]) -> None:
    r = runs["failed-first-link"]
    md = _render(r).markdown()
    for attempt in r.chain.attempts:
        assert attempt.started_at is not None and attempt.started_at.utcoffset() is not None
        stamp = attempt.started_at.isoformat(timespec="seconds").replace("+00:00", "Z")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
        assert stamp in md
    assert "+00:00" not in md.split("## Chain", 1)[1].split("\n## ", 1)[0]  # no Python str() form in the chain table


def test_candidates_with_problems_are_listed(runs: dict[str, CompletionRecord]) -> None:
    rendered = _render(runs["missing-shard"])
    md, html = rendered.markdown(), rendered.html()
    row = next(line for line in md.splitlines() if line.startswith("|  | 10 |"))
    assert "| INVALID |" in row and "| 1 |" in row  # one problem
    assert re.search(r"^- missing_shard: model-00002-of-00003\.safetensors is named by", md, re.M)
    assert "<li>missing_shard: model-00002-of-00003.safetensors is named by" in html
    assert "selection unresolved among 3 valid candidates (5, 15, 20) · 1 invalid export (10) · " in (
        rendered.document.verdict.line
    )


def test_selection_scores_and_policy(runs: dict[str, CompletionRecord]) -> None:
    r = runs["selection-policy"]
    s = r.selection
    assert s is not None and s.step == 30
    md = _render(r).markdown()
    assert f"selected: step 30 (runner-up {s.runner_up}, metric window {s.metric_window})" in md
    assert '"metric": "reward/avg_raw_reward"' in md  # the declared policy, verbatim
    # the score is in the one candidates table, the selected step first and marked (issue 47)
    assert re.search(r"^\| ▶ selected \| 30 \| 0\.\d+ \|", md, re.M)


def test_a_bare_record_renders_without_a_timeline() -> None:
    r = CompletionRecord(run_id="bare", run_uri="/nowhere")
    rendered = render_report(ReportInputs(record=r))
    assert rendered.timeline is None
    assert rendered.document.verdict.line == "bare: terminal state not established (in_progress) · still in progress"
    assert "No timeline picture" not in rendered.html()  # no figure block at all without a chain
    assert "![chain timeline]" not in rendered.markdown("timeline.png")


def test_unreadable_metrics_are_noted_not_fatal(runs: dict[str, CompletionRecord], tmp_path: Path) -> None:
    record = runs["failed-first-link"].model_copy(update={"metrics_uri": str(tmp_path / "gone.jsonl")})
    rendered = render_report(load_inputs(LocalStorage(), record))
    assert rendered.timeline is not None  # bars and marks still come from the record
    assert re.search(r"^- metrics not loaded from .*gone\.jsonl: FileNotFoundError", rendered.markdown(), re.M)


def test_markdown_is_not_html_escaped(runs: dict[str, CompletionRecord]) -> None:
    """Issue 38: report.md said `FAILED -&gt; failed`. Markdown escapes with backslashes, only where it must."""
    md = _render(runs["failed-first-link"]).markdown()
    assert ".executor_status: FAILED -> failed" in md
    assert not re.search(r"&(?:gt|lt|amp|quot);", md)
    from rlcleanup.report.markdown import escape

    assert escape("a -> b, 1 < 2") == "a -> b, 1 < 2"  # nothing that renders differently
    assert escape("<frozen importlib._bootstrap>") == "\\<frozen importlib.\\_bootstrap>"  # never a tag
    assert escape("> quoted\n  > again") == "\\> quoted\n  \\> again"  # never a block quote
    assert escape("</details><script>") == "\\</details>\\<script>"


def test_report_and_show_word_the_terminal_reasoning_alike(runs: dict[str, CompletionRecord]) -> None:
    """Issue 38: `show` said "no failure" where the report said "No causal error was found" (one function now)."""
    from rlcleanup.cli.render import summary
    from rlcleanup.report.reasons import NO_FAILURE

    r = runs["completed-resumed"]
    assert any(x.startswith("No causal error was found") for x in r.terminal_reasoning)  # the record keeps it
    md, html, shown = _render(r).markdown(), _render(r).html(), summary(r)
    for surface in (md, html, shown):
        assert "No causal error was found" not in surface
    assert f"- {NO_FAILURE}" in md and NO_FAILURE in html and f"  - {NO_FAILURE}" in shown


# ------------------------------------------------------------------ HTML is self-contained


def test_html_is_self_contained(runs: dict[str, CompletionRecord]) -> None:
    html = _render(runs["failed-first-link"], timeline=True).html()
    assert html.startswith("<!doctype html>")
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert not re.search(r"url\(\s*['\"]?(?:https?:)?//|@import", html, re.I)
    assert html.count("<svg") == 1 and "<?xml" not in html and "<!DOCTYPE svg" not in html
    assert "<script" not in html.lower()
    # Text from the run that looks like markup is escaped, never interpreted.
    assert "<frozen" not in html


# ------------------------------------------------------------------ the timeline picture


def _gap_inputs(record: CompletionRecord) -> ReportInputs:
    """The selection-policy run with steps 14..17 missing from the metrics: a real coverage gap."""
    inputs = load_inputs(LocalStorage(), record)
    assert inputs.metrics is not None
    for step in range(14, 18):
        del inputs.metrics.train[step]
    coverage = ChainCoverage(first_step=1, last_step=40, gaps=[(14, 17)])
    gapped = record.model_copy(update={"chain": record.chain.model_copy(update={"coverage": coverage})})
    return replace(inputs, record=gapped)


def _row_colours(png: bytes, y: int) -> list[tuple[int, ...]]:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return [image.getpixel((x, y)) for x in range(image.width)]  # type: ignore[misc]


def test_timeline_draws_the_gap_in_red_inside_the_attempt_bar(runs: dict[str, CompletionRecord]) -> None:
    inputs = _gap_inputs(runs["selection-policy"])
    attempt = inputs.record.chain.attempts[0]
    image = render_report(inputs).timeline
    assert image is not None
    gap_x, gap_y = image.probes[f"gap:{attempt.attempt_id}"]
    bar_x, bar_y = image.probes[f"attempt:{attempt.attempt_id}"]
    pixels = Image.open(io.BytesIO(image.png)).convert("RGB")
    assert _close(pixels.getpixel((gap_x, gap_y)), GAP_RED)  # type: ignore[arg-type]
    assert _close(pixels.getpixel((bar_x, bar_y)), STATE_COLOURS["succeeded"])  # type: ignore[arg-type]
    # Independently of the probes: along the bar's row, red covers 4 of the bar's 40 steps, in one run.
    row = _row_colours(image.png, gap_y)
    red = [x for x, p in enumerate(row) if _close(p, GAP_RED)]
    green = [x for x, p in enumerate(row) if _close(p, STATE_COLOURS["succeeded"])]
    assert red == list(range(red[0], red[-1] + 1))
    assert 0.08 < len(red) / (len(red) + len(green)) < 0.12
    assert min(green) < red[0] and red[-1] < max(green)


def test_timeline_without_gaps_has_no_red_on_the_bar(runs: dict[str, CompletionRecord]) -> None:
    record = runs["selection-policy"]
    image = _render(record, timeline=True).timeline
    assert image is not None
    assert not any(k.startswith("gap:") for k in image.probes)
    _, y = image.probes[f"attempt:{record.chain.attempts[0].attempt_id}"]
    assert not any(_close(p, GAP_RED, tol=40) for p in _row_colours(image.png, y))


def test_timeline_svg_carries_the_metric_window_and_selection(runs: dict[str, CompletionRecord]) -> None:
    image = _render(runs["selection-policy"], timeline=True).timeline
    assert image is not None and image.metric == "reward/avg_raw_reward"
    for text in ("reward/avg_raw_reward", "metric window", "selected step 30", "budget 40"):
        assert text in image.svg
    assert image.svg.startswith("<svg")


def test_rendering_is_deterministic(runs: dict[str, CompletionRecord]) -> None:
    timeline._DRAWN.clear()
    a = _render(runs["failed-first-link"], timeline=True)
    timeline._DRAWN.clear()  # drawn again, not the picture kept from the first render
    b = _render(runs["failed-first-link"], timeline=True)
    assert a.timeline and b.timeline
    assert a.timeline.png == b.timeline.png and a.timeline.svg == b.timeline.svg
    assert a.html() == b.html() and a.markdown("timeline.png") == b.markdown("timeline.png")


def test_a_picture_already_drawn_is_reused_and_one_that_shows_something_else_is_drawn(
    runs: dict[str, CompletionRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grant refreshes the report of a record whose picture did not change: it is not drawn again. Whatever the
    picture shows (here the budget line, a coverage gap) changing draws it again."""
    drawn: list[str] = []
    draw = timeline._draw
    monkeypatch.setattr(timeline, "_draw", lambda inputs, *a: (drawn.append(inputs.record.run_id), draw(inputs, *a))[1])
    timeline._DRAWN.clear()
    record = runs["selection-policy"]
    first = _render(record, timeline=True).timeline
    assert first is not None and len(drawn) == 1
    first.probes.clear()  # the caller's copy: the kept picture keeps its probes
    unshown = record.model_copy(update={"remaining_work": [*record.remaining_work, "something the picture omits"]})
    again = _render(unshown, timeline=True).timeline
    assert again is not None and len(drawn) == 1 and again.probes
    assert (again.png, again.svg) == (_render(record, timeline=True).timeline.png, first.svg)  # type: ignore[union-attr]
    budget = _render(record.model_copy(update={"step_budget": 35}), timeline=True).timeline
    assert budget is not None and len(drawn) == 2 and "budget 35" in budget.svg and budget.png != again.png
    gapped = render_report(_gap_inputs(record)).timeline
    assert gapped is not None and len(drawn) == 3 and any(k.startswith("gap:") for k in gapped.probes)


# ------------------------------------------------------------------ publication into the preserved location


def test_pipeline_writes_the_report_beside_the_evidence(runs: dict[str, CompletionRecord]) -> None:
    r = runs["failed-first-link"]
    derived = Path(r.preserved_locations[0]) / "derived"
    md = (derived / "report.md").read_text()
    assert md.splitlines()[2].startswith(f"**Verdict:** {r.run_id}: failed")
    assert "![chain timeline](timeline.png)" in md
    assert (derived / "report.html").read_text().count("<svg") == 1
    assert (derived / "timeline.png").read_bytes().startswith(b"\x89PNG")


def test_republish_is_identical_and_a_changed_record_gets_a_new_name(
    runs: dict[str, CompletionRecord], db: SqliteRunRecords
) -> None:
    r = runs["completed-resumed"]
    derived = Path(r.preserved_locations[0]) / "derived"
    before = (derived / "report.md").read_bytes()
    assert publish_report(LocalStorage(), db, r.run_id)["md"].endswith("/derived/report.md")  # a replay
    assert (derived / "report.md").read_bytes() == before
    db.update(r.run_id, {"remaining_work": ["a person must look at this"]})
    written = publish_report(LocalStorage(), db, r.run_id)
    assert re.search(r"/derived/report-[0-9a-f]{12}\.md$", written["md"])
    assert (derived / "report.md").read_bytes() == before  # never overwritten
    assert "a person must look at this" in Path(written["md"]).read_text()
    assert written["png"].endswith("/derived/timeline.png")  # the picture did not change


class _BrokenStorage(LocalStorage):
    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream"):  # type: ignore[no-untyped-def]
        raise OSError("disk full")


def test_a_failed_report_is_recorded_not_raised(runs: dict[str, CompletionRecord], db: SqliteRunRecords) -> None:
    r = runs["missing-shard"]
    assert publish_report(_BrokenStorage(), db, r.run_id) == {}
    errors = [e for e in (db.get(r.run_id) or r).errors if e.step == "report"]
    assert len(errors) == 1 and errors[0].code == "report_failed"
    assert "disk full" in errors[0].message and f"rlcleanup report {r.run_id} --out DIR" in errors[0].message


def test_the_banner_carries_the_cause_message_end_and_duration_and_the_html_no_backticks(
    runs: dict[str, CompletionRecord],
) -> None:
    """Issue 47: the banner names the cause's message (the verdict names only its type), when the run ended and
    how long it ran; code spans in prose are <code> in the HTML, never raw Markdown backticks."""
    import re

    r = runs["failed-first-link"]
    rendered = _render(r)
    cause = r.first_failure_cause
    assert cause is not None and r.ended_at is not None
    facts = rendered.document.facts
    assert facts[0].startswith(f"cause: {cause.error_type}: {' '.join(cause.message.split())[:60]}")
    assert f"ended {r.ended_at:%Y-%m-%d %H:%M} UTC" in facts and any(f.startswith("ran ") for f in facts)
    html = rendered.html()
    header = html[html.index('<header class="verdict') : html.index("</header>")]
    assert 'id="facts"' in header and "ended " in header
    assert f"ended {r.ended_at:%Y-%m-%d %H:%M} UTC" in rendered.markdown(None).split("## ")[0]
    for record in runs.values():
        body = re.sub(r"<style>.*?</style>", "", _render(record).html(), flags=re.S)
        assert "`" not in body, body[max(0, body.index("`") - 200) : body.index("`") + 200]
    assert "<code>rlcleanup grant" in _render(runs["completed-resumed"]).html()
