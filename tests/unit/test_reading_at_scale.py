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
    assert len(folded.rows) < 10 < len(r.candidates), folded.rows
    assert any(" every 5 (" in row[0] for row in folded.rows), folded.rows
    assert sum(int(row[0].rsplit("(", 1)[1].rstrip(")")) if "(" in row[0] else 1 for row in folded.rows) == len(
        r.candidates
    )  # every candidate is in exactly one row
    assert any("--all" in note for note in notes)
    if r.selection is not None and r.selection.step is not None:
        assert [str(r.selection.step)] in [row[:1] for row in folded.rows]  # the selected step keeps its row
    every, notes = table(every_row=True)
    assert [row[0] for row in every.rows] == [str(c.step) for c in r.candidates] and not notes
