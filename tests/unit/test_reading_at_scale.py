"""Issue 38 item 11, reading at scale: a 40-candidate run's verdict line summarises its steps as ranges, reasoning
is one line per finding with the rest folded, cuts fall at word boundaries with "…", the record cites only docs that
ship in this repo, and `status` fits an 80-column terminal without cutting a key column."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from rlcleanup.cli.operator import status_table
from rlcleanup.cli.render import summary
from rlcleanup.models.record import CompletionRecord
from rlcleanup.report.build import build_document
from rlcleanup.report.document import Bullets
from rlcleanup.report.fold import ELLIPSIS, HEADLINE_CHARS, clip
from rlcleanup.report.html import render_html
from rlcleanup.report.inputs import ReportInputs
from rlcleanup.report.verdict import build_verdict, summarise_step_lists, summarise_steps
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = ("many-candidates", "failed-first-link", "metrics-mode", "layout-d")


@pytest.fixture(autouse=True)
def _sqlite_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CompletionRecord]:
    base = tmp_path_factory.mktemp("scale")
    out = {}
    for scenario in SCENARIOS:
        record = run_embedded(
            str(write_sample_run(base / "src", scenario)), db_path=base / "r.db", preserve_root=str(base / "p")
        )
        assert record is not None
        out[scenario] = record
    return out


# ------------------------------------------------------------------ step ranges


def test_steps_are_listed_when_few_and_summarised_as_ranges_when_many() -> None:
    assert summarise_steps([15, 5, 10]) == "5, 10, 15"
    assert summarise_steps(list(range(5, 201, 5))) == "5-200 every 5"
    assert summarise_steps([5, 10, 15, 20, 25, 30, 40, 45, 50]) == "5-30, 40-50 every 5"
    assert summarise_steps([1, 2, 3, 4, 5, 6, 7, 9]) == "1-7, 9"
    assert summarise_steps([1, 3, 4, 8, 20, 33, 40, 41]) == "1-41 (8 steps)"  # no pattern: the span and the count
    assert summarise_step_lists("choose among valid candidates [5, 10, 15, 20, 25, 30, 35] (x)") == (
        "choose among valid candidates (5-35 every 5) (x)"
    )


def test_a_40_candidate_verdict_line_names_each_step_at_most_once(runs: dict[str, CompletionRecord]) -> None:
    r = runs["many-candidates"]
    assert sum(c.valid for c in r.candidates) == 40
    line = build_verdict(r).line
    assert "40 valid candidates (5-200 every 5)" in line
    assert len(line.removeprefix(f"{r.run_id}: ")) <= 160, line  # was ~600: every step twice
    assert "95" not in line and line.count("5-200") == 1
    assert summary(r).splitlines()[0] == line  # `run` and `show` print the same line


# ------------------------------------------------------------------ cutting text


def test_clip_cuts_at_a_word_boundary_with_an_ellipsis() -> None:
    text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert clip(text, 200) == text
    assert clip(text, 40) == "torch.OutOfMemoryError: CUDA out of…"
    assert clip("a\n  b", 10) == "a b"  # one line
    assert clip("x" * 50, 10) == "x" * 9 + ELLIPSIS  # one word longer than the line: still marked
    for width in range(len("torch.OutOfMemoryError: ") + 1, len(text)):  # past the first word
        cut = clip(text, width)
        assert len(cut) <= width and cut.endswith(ELLIPSIS)
        assert text.startswith(cut[:-1].rstrip(" ,;:.-("))
        assert text[len(cut[:-1].rstrip(" ,;:.-(")) :][:1] in (" ", ".", ":", ",", ""), (width, cut)


def test_show_never_cuts_a_cause_or_failure_mid_word(runs: dict[str, CompletionRecord]) -> None:
    r = runs["failed-first-link"]
    text = summary(r)
    cause = next(line for line in text.splitlines() if line.startswith("first cause"))
    assert cause.endswith(ELLIPSIS) and len(cause) <= len("first cause    ") + 300
    words = set(re.findall(r"\S+", r.first_failure_cause.message if r.first_failure_cause else ""))
    assert cause.removesuffix(ELLIPSIS).split()[-1] in words  # the last word shown is a whole word of the message


# ------------------------------------------------------------------ reasoning


@pytest.mark.parametrize("scenario", ["many-candidates", "failed-first-link"])
def test_reasoning_is_one_line_per_finding_with_the_rest_folded(
    runs: dict[str, CompletionRecord], scenario: str
) -> None:
    r = runs[scenario]
    assert max(len(x) for x in r.terminal_reasoning) > 300  # the record keeps every finding whole
    doc = build_document(ReportInputs(r))
    (bullets,) = [b for s in doc.sections if s.anchor == "terminal" for b in s.blocks if isinstance(b, Bullets)]
    assert all(len(item) <= HEADLINE_CHARS and "\n" not in item for item in bullets.items)
    folded = [full for _, full in bullets.folded() if full]
    assert folded and all(len(full) > HEADLINE_CHARS for full in folded)
    html = render_html(doc)
    assert html.count("<li><details><summary>") >= len(folded)
    reasons = [line for line in summary(r).splitlines() if line.startswith("  - ")]
    assert reasons and all(len(line) <= 4 + HEADLINE_CHARS for line in reasons)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_record_cites_only_docs_that_ship(runs: dict[str, CompletionRecord], scenario: str) -> None:
    """A reader has docs/*.md, not the design references the code was written from (`run-layout-v2.md §6`)."""
    r = runs[scenario]
    candidates = [n for c in r.candidates for n in c.problems + c.warnings]
    resume = r.resume_safety.reasons if r.resume_safety else []
    text = "\n".join([*r.terminal_reasoning, *r.remaining_work, *candidates, *resume, build_verdict(r).line])
    cited = set(re.findall(r"[\w./-]+\.md\b", text))
    assert all(c.startswith("docs/") and (REPO / c).is_file() for c in cited), cited
    if scenario == "many-candidates":
        assert "docs/run-layouts.md" in cited  # the terminal-state rule says where it is written down


# ------------------------------------------------------------------ status at 80 columns


def test_status_fits_80_columns_and_never_wraps_a_run_id(runs: dict[str, CompletionRecord]) -> None:
    """Issue 47: a run id is what a person copies into the next command, so it is never split across lines; on a
    narrow terminal the other columns give way (cut with an ellipsis)."""
    records = list(runs.values())
    console = Console(width=80, record=True, color_system=None, highlight=False)
    console.print(status_table(records, "runs in SQLite r.db", console.width))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    header = next(line for line in lines if line.startswith("run id"))
    body = lines[lines.index(header) + 2 :]
    assert len(body) == len(records)  # one line per run: nothing wrapped
    assert [line.split()[0] for line in body] == [r.run_id for r in records]  # each id whole, on its own line
    for line, r in zip(body, records, strict=True):
        cells = line.split()[1:]
        assert cells and r.status.value.startswith(cells[0].rstrip(ELLIPSIS)), line  # whole, or cut visibly


# ------------------------------------------------------------------ the candidates table at scale


def test_identical_candidate_rows_fold_into_ranges_and_all_lists_every_one(runs: dict[str, CompletionRecord]) -> None:
    """Issue 47: the 40-candidate report listed 40 identical rows; identical consecutive rows are one range (their
    common directory as the uri), the selected step keeps its own row, and `--all` lists every candidate."""
    from rlcleanup.report.document import Para, Table

    r = runs["many-candidates"]
    inputs = ReportInputs(record=r)

    def table(every_row: bool) -> tuple[Table, list[str]]:
        [section] = [s for s in build_document(inputs, with_figure=False, every_row=every_row).sections
                     if s.anchor == "candidates"]  # fmt: skip
        [t] = [b for b in section.blocks if isinstance(b, Table)]
        return t, [b.text for b in section.blocks if isinstance(b, Para)]

    folded, notes = table(every_row=False)
    step = folded.headers.index("step")
    assert len(folded.rows) < 10 < len(r.candidates), folded.rows
    assert any(" steps)" in row[step] or " every 5 (" in row[step] for row in folded.rows), folded.rows

    def count(cell: str) -> int:
        return int(cell.rsplit("(", 1)[1].split()[0].rstrip(")")) if "(" in cell else 1

    assert sum(count(row[step]) for row in folded.rows) == len(r.candidates)  # each candidate in exactly one row
    assert all(row[-1].endswith("/exports") for row in folded.rows if "(" in row[step])  # their common directory
    assert any("--all" in note for note in notes)
    if r.selection is not None and r.selection.step is not None:
        assert str(r.selection.step) in [row[step] for row in folded.rows]  # the selected step keeps its row
    every, notes = table(every_row=True)
    assert sorted(int(row[step]) for row in every.rows) == sorted(c.step for c in r.candidates)
    assert not any("--all" in note for note in notes)


# ------------------------------------------------------------------ one candidates table, best first, on the chart


def test_one_candidates_table_sorted_best_first_with_the_best_marked_and_on_the_chart(
    runs: dict[str, CompletionRecord],
) -> None:
    """Issue 47: the 40-candidate report had a candidates list and a separate unsorted score table, the best step a
    note in row 36. Now one table with the score column, best first by the score the suggestion uses (no policy is
    declared), the best row marked and highlighted, the rest folded into ranges; the chart marks the best step."""
    from rlcleanup.report.candidates import MARK
    from rlcleanup.report.document import Table
    from rlcleanup.report.markdown import render_markdown
    from rlcleanup.report.timeline import render_timeline

    r = runs["many-candidates"]
    assert r.selection is not None and r.selection.candidate_metrics is not None
    cm = r.selection.candidate_metrics
    scores = {m.step: m.value for m in cm.candidates if m.value is not None}
    best = max(scores, key=lambda s: (scores[s], s))
    assert cm.best == best
    doc = build_document(ReportInputs(r), with_figure=False)
    assert [s.anchor for s in doc.sections].count("candidates") == 1 and "which" not in [s.anchor for s in doc.sections]
    tables = [(s.anchor, b) for s in doc.sections for b in s.blocks if isinstance(b, Table)]
    assert [anchor for anchor, t in tables if "score" in t.headers] == ["candidates"]  # one score table
    [table] = [t for anchor, t in tables if anchor == "candidates"]
    step, score = table.headers.index("step"), table.headers.index("score")
    assert table.rows[0][step] == str(best) and table.rows[0][0] == f"{MARK} best (suggestion)"
    assert table.highlight == 0
    top = [float(row[score]) for row in table.rows if row[step].isdigit()]
    assert top == sorted(top, reverse=True) and len(top) >= 2  # best first
    assert len(table.rows) < 10, table.rows  # not 40 identical lines
    assert sum(1 for row in table.rows if row[0].startswith(MARK)) == 1
    html = render_html(doc)
    assert html.count('<tr class="chosen">') == 1
    chosen_row = html.split('<tr class="chosen">', 1)[1].split("</tr>", 1)[0]
    assert f"<td>{MARK} best (suggestion)</td>" in chosen_row and f">{best}</td>" in chosen_row
    markdown = render_markdown(doc)
    assert f"| {MARK} best (suggestion) | {best} | {scores[best]:.4f} |" in markdown

    image = render_timeline(ReportInputs(r))
    assert image is not None and "marked" in image.probes
    assert f"best (suggestion) {best}" in image.svg  # the label beside the star on the exports row


def test_a_declared_policy_orders_the_table_and_its_selection_is_the_marked_first_row(
    runs: dict[str, CompletionRecord], tmp_path: Path
) -> None:
    from rlcleanup.report.candidates import MARK
    from rlcleanup.report.document import Table
    from rlcleanup.steps.select import ranked_steps

    record = run_embedded(
        str(write_sample_run(tmp_path / "src", "selection-policy")), db_path=tmp_path / "r.db",
        preserve_root=str(tmp_path / "p"),
    )  # fmt: skip
    assert record is not None and record.selection is not None and record.selection.status == "selected"
    ranked = ranked_steps({int(k): v for k, v in record.selection.scores.items()}, "max")
    doc = build_document(ReportInputs(record), with_figure=False)
    [table] = [b for s in doc.sections if s.anchor == "candidates" for b in s.blocks if isinstance(b, Table)]
    steps = [row[1] for row in table.rows]
    assert steps[: len(ranked)] == [str(s) for s in ranked] and steps[0] == str(record.selection.step)
    assert table.rows[0][0] == f"{MARK} selected" and table.highlight == 0


# ------------------------------------------------------------------ the banner's links and costs


def test_the_banner_links_the_runs_files_and_its_firestore_record_and_invents_no_cost(
    runs: dict[str, CompletionRecord],
) -> None:
    """Issue 47: the banner links the run's bucket (a gs:// run opens in the Cloud Console's storage browser, a local
    one is its path) and, where the store is Firestore, the record's console page. Given no compute facts (the record
    alone: tests/unit/test_report_compute.py reads them from the resolved config) no GPU-hours nor compute cost is
    stated; storage cost only where the ledger measured it."""
    from rlcleanup.adapters.firestore_records import FirestoreRunRecords
    from rlcleanup.report.build import banner_facts
    from rlcleanup.report.markdown import render_markdown

    local = runs["failed-first-link"]
    facts = banner_facts(local)
    assert f"files: {local.run_uri}" in facts
    assert not any("GPU-hour" in f or "compute cost" in f for f in facts)  # not known, so not said
    assert any(f.startswith("storage ") and "/month" in f for f in facts) == (local.storage_ledger is not None)
    gs = local.model_copy(update={"run_uri": "gs://marin-us-central2/math rl/2026.11.30"})
    console = FirestoreRunRecords(project="hai-gcp-models", client=object()).console_url(gs.run_id)
    assert console == (
        "https://console.cloud.google.com/firestore/databases/-default-/data/panel/runs/"
        f"{gs.run_id}?project=hai-gcp-models"
    )
    doc = build_document(ReportInputs(gs, record_console=console), with_figure=False)
    browser = "https://console.cloud.google.com/storage/browser/marin-us-central2/math%20rl/2026.11.30"
    assert f"files: {browser}" in doc.facts and f"record: {console}" in doc.facts
    html = render_html(doc)
    banner = html[html.index('<header class="verdict') : html.index("</header>")]
    assert f'<a href="{browser}" rel="noreferrer">' in banner
    assert f'<a href="{console.replace("&", "&amp;")}" rel="noreferrer">' in banner
    assert browser in render_markdown(doc)
