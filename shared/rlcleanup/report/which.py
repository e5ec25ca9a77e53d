"""Which checkpoint? The per-candidate metric table `show` prints (issue 38 #8; the report carries the same scores
in its one candidates table, report/candidates.py).

The numbers are the record's (`selection.candidate_metrics`, computed by the selection policy's own score in
steps/select.py); whether the best is a suggestion or already decided comes from `selection_state`, the one
derivation every surface uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcleanup.models.record import CompletionRecord
from rlcleanup.report.verdict import selection_state
from rlcleanup.steps.candidate_metrics import coverage_text

SUGGESTED = "best by metric: a suggestion, not a selection"
BEST = "best by metric"


@dataclass(frozen=True)
class WhichTable:
    title: str  # metric and how it is computed, and whether the policy was declared
    headers: list[str]
    rows: list[list[str]]
    missing: int  # candidates whose metric is missing


def which_table(r: CompletionRecord) -> WhichTable | None:
    cm = r.selection.candidate_metrics if r.selection else None
    state = selection_state(r)
    if cm is None or not cm.candidates or state is None:
        return None
    basis = "the declared policy" if cm.basis == "declared" else "the reference policy (none declared)"
    mark = SUGGESTED if state.state == "unresolved" else BEST
    rows = [
        [
            str(row.step),
            "—" if row.value is None else f"{row.value:.4f}",
            coverage_text(row),
            mark if row.step == cm.best else "",
        ]
        for row in cm.candidates
    ]
    return WhichTable(
        title=f"{cm.metric} per valid candidate, by {basis}: {cm.computation}",
        headers=["step", "score", "rows/steps in window", "note"],
        rows=rows,
        missing=sum(1 for row in cm.candidates if row.value is None),
    )


def which_lines(r: CompletionRecord) -> list[str]:
    """`show`'s form: a heading and one aligned row per candidate."""
    table = which_table(r)
    if table is None:
        return []
    lines = [f"which          {table.title}"]
    for step, score, coverage, note in table.rows:
        lines.append(f"  step {step:<6} {score:<8} {coverage}" + (f"  <- {note}" if note else ""))
    return lines
