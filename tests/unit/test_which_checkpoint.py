"""Issue 38 item 8, "Which checkpoint?": with no declared policy, `show`, `show --json` and the report list every
valid candidate's metric (the selection policy's own score) with its window and coverage, a candidate with no
metric says so, and remaining work gives the exact `grant --dry-run` command, which previews when pasted."""

from __future__ import annotations

import shlex
from pathlib import Path

from test_cli_operator_day import COMPLETED, _approver, _invoke, _json, _sample, _xdg  # noqa: F401 - fixture

from rlcleanup.models.record import Candidate
from rlcleanup.steps.candidate_metrics import REFERENCE_POLICY, candidate_metrics
from rlcleanup.steps.remaining import DESTINATION_PLACEHOLDER, KEY_PLACEHOLDER, PREVIEW_PREFIX
from rlcleanup.steps.select import SelectionPolicy, select

LATE = "math-rl-metrics-late-2026.11.30"


def _candidate(step: int) -> Candidate:
    return Candidate(step=step, uri=f"/r/exports/global_step_{step}/policy", valid=True)


def _metrics(run_id: str) -> dict[str, dict[str, object]]:
    record = _json("show", run_id)
    cm = record["selection"]["candidate_metrics"]
    assert cm["metric"] == "reward/avg_raw_reward" and cm["basis"] == "reference"
    return {str(row["step"]): row for row in cm["candidates"]} | {"best": {"step": cm["best"]}}


def test_no_policy_run_shows_each_candidates_metric_and_coverage(tmp_path: Path, _xdg: Path) -> None:  # noqa: F811
    _json("run", str(_sample(tmp_path, "completed-resumed")))
    rows = _metrics(COMPLETED)
    for step in (5, 10, 15, 20):  # every valid candidate, each scored over the whole chain (EMA seeded at step 1)
        row = rows[str(step)]
        assert row["window"] == [1, step] and row["window_steps"] == step and row["rows"] == step, row
        assert isinstance(row["value"], float) and row["missing"] is None
    assert rows["best"]["step"] == 20  # the rising curve: the last step is best
    code, text, _ = _invoke("show", COMPLETED)
    assert code == 0
    assert "which          reward/avg_raw_reward per valid candidate, by the reference policy (none declared)" in text
    assert "  step 20     0.6705   20/20 steps 1..20  <- best by metric: a suggestion, not a selection" in text
    report_uri = Path(_json("show", COMPLETED)["report_uri"])
    html = report_uri.with_name("report.html").read_text()
    # the report's one candidates table carries the score (issue 47), best first and marked
    assert '<section id="candidates"><h2>Candidates</h2>' in html and "<td>20/20 steps 1..20</td>" in html
    assert 'id="which"' not in html
    report = report_uri.with_name("report.md").read_text()
    assert "## Candidates" in report and "## Which checkpoint?" not in report
    assert "|  | 15 | 0.6103 | 15/15 steps 1..15 | valid |" in report
    assert "| ▶ best (suggestion) | 20 | 0.6705 | 20/20 steps 1..20 | valid |" in report
    assert report.index("| 20 | 0.6705 |") < report.index("| 15 | 0.6103 |")  # best first


def test_a_candidate_without_metric_rows_says_so_and_is_not_dropped(tmp_path: Path, _xdg: Path) -> None:  # noqa: F811
    _json("run", str(_sample(tmp_path, "metrics-late")))  # link 1 (steps 1-12) logged no metric rows
    rows = _metrics(LATE)
    for step in (5, 10):
        assert rows[str(step)]["value"] is None and rows[str(step)]["window"] is None
        assert rows[str(step)]["missing"] == (
            f"0 row(s) of reward/avg_raw_reward at or before step {step}; the policy needs 5"
        )
    assert rows["15"]["window"] == [11, 15] and rows["15"]["rows"] == 5
    assert rows["20"]["window"] == [11, 20] and rows["20"]["rows"] == 10 and rows["best"]["step"] == 20
    code, text, _ = _invoke("show", LATE)
    assert code == 0 and "  step 5      —        missing: 0 row(s) of reward/avg_raw_reward" in text
    report = Path(_json("show", LATE)["report_uri"]).with_name("report.md").read_text()
    assert (
        "|  | 10 | — | missing: 0 row(s) of reward/avg_raw_reward at or before step 10; the policy needs 5 |" in report
    )
    assert report.index("|  | 15 |") < report.index("|  | 5 | — |")  # the unscored after the scored
    assert "2 candidate(s) have no score" in report


def test_the_remaining_work_command_previews_when_pasted(tmp_path: Path, _xdg: Path) -> None:  # noqa: F811
    _json("run", str(_sample(tmp_path, "completed-resumed")))
    item = next(i for i in _json("show", COMPLETED)["remaining_work"] if i.startswith(PREVIEW_PREFIX))
    command = item.split("`")[1]
    assert command == (
        f"rlcleanup grant {COMPLETED} --action publish --step 20 --destination <destination> --key <key id> --dry-run"
    )
    assert "fill in <destination>" in item and "<key id>, your approver id" in item
    _approver(_xdg / "models")  # keygen + approver add: the real key and destination the placeholders stand for
    dest = str(_xdg / "models" / "math")
    argv = [dest if a == DESTINATION_PLACEHOLDER else a for a in shlex.split(command.replace(KEY_PLACEHOLDER, "alice"))]
    assert argv[0] == "rlcleanup"
    code, text, err = _invoke(*argv[1:])
    assert code == 0, err
    assert text.startswith("dry run: publish step 20 (") and f"→ {dest}" in text.splitlines()[0]
    preview = _json(*argv[1:])
    assert preview["would"] == "publish" and preview["step"] == 20
    assert not Path(dest).exists()  # a preview copies nothing


def test_the_shown_metric_is_the_selection_policys_own_score() -> None:
    """The same function scores both: a declared policy's selection scores equal the per-candidate values."""
    series = {s: 0.1 * s - 0.004 * s * s for s in range(1, 41)}
    candidates = [_candidate(s) for s in (5, 10, 15, 20, 25, 30, 35, 40)]
    raw = {"metric": "reward/avg_raw_reward", "smoothing": {"kind": "ema"}, "trailing": 5, "eligible": {"every": 5}}
    selection = select(raw, candidates, series, last_saved_step=40, coverage=None)
    shown = candidate_metrics(SelectionPolicy.model_validate(raw), "declared", candidates, series)
    assert {str(r.step): r.value for r in shown.candidates} == selection.scores
    assert shown.best == selection.step
    raw_mean = {**raw, "smoothing": {"kind": "none"}, "trailing": 3}
    selection = select(raw_mean, candidates, series, last_saved_step=40, coverage=None)
    shown = candidate_metrics(SelectionPolicy.model_validate(raw_mean), "declared", candidates, series)
    assert {str(r.step): r.value for r in shown.candidates} == selection.scores
    assert [r.window for r in shown.candidates][:2] == [[3, 5], [8, 10]]


def test_coverage_counts_the_rows_a_gap_left_in_the_window() -> None:
    series = {s: 0.5 for s in range(1, 21) if not 8 <= s <= 12}  # a gap of 5 steps
    shown = candidate_metrics(REFERENCE_POLICY, "reference", [_candidate(4), _candidate(20)], series)
    early, late = shown.candidates
    assert early.value is None and early.missing is not None and "4 row(s)" in early.missing
    assert late.window == [1, 20] and late.window_steps == 20 and late.rows == 15
    none = candidate_metrics(REFERENCE_POLICY, "reference", [_candidate(20)], {})
    assert none.candidates[0].missing == "no reward/avg_raw_reward rows were preserved" and none.best is None
