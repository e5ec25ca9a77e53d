"""The report's one candidates table (issue 47, "Reading at scale"): every candidate with its score, best first.

Order: the declared policy's ranking (steps/select.py `ranked_steps` over the selection's own scores, its mode, ties
to the later step); with no (valid) policy, the score the suggestion uses (`selection.candidate_metrics`, the
reference policy's score), best first; then the valid candidates no policy could score, then the invalid ones, each
in step order. The chosen row (selected by the policy, chosen by a publish grant, else the suggested best) is marked
"▶" and highlighted. Rows that read the same (state, size, shards, bytes, no problem nor warning, a complete metric
window) are folded into one row from FOLD_AT on, their steps as ranges and their scores as a span; the top TOP_ROWS
ranked rows and the marked row always keep their own row. `report --all` lists every candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcleanup.models.record import Candidate, CandidateMetric, CompletionRecord
from rlcleanup.models.vocab import CandidateKind
from rlcleanup.report.document import BAD, WARN, Block, Bullets, Para, Section, Table
from rlcleanup.report.verdict import selection_state, summarise_steps
from rlcleanup.steps.candidate_metrics import coverage_text, metric_policy
from rlcleanup.steps.select import ranked_steps

# Consecutive rows that read the same are one row from this many on (40 identical rows read as one range).
FOLD_AT = 3
# The best few by score keep their own rows: the runner-ups are what a person compares the best against.
TOP_ROWS = 5
MARK = "▶"
HEADERS = ["", "step", "score", "metric window", "state", "parameters", "shards", "bytes", "problems", "uri"]


@dataclass(frozen=True)
class _Row:
    candidate: Candidate
    score: float | None
    metric: CandidateMetric | None


def _v(value: object) -> str:
    return "—" if value is None or value == "" else str(value)


def candidate_state(c: Candidate) -> str:
    """ "valid", "INVALID", "CONVERTIBLE (request pending)", "PARTIAL"; an adapter says so and names its base."""
    state = "valid" if c.valid else c.state.value.upper()
    if c.export_request is not None and not c.valid:
        state += f" (request {c.export_request.status})"
    if c.kind is CandidateKind.adapter:
        state += f", LoRA adapter of {c.base_model or 'an unnamed base model'}"
    return state


def marked_step(r: CompletionRecord) -> tuple[int | None, str]:
    """(step, label) of the row the table marks: the policy's selection, a publish grant's choice (the first when
    several), else the best by the suggestion's score."""
    state = selection_state(r)
    if state is not None and state.state == "selected" and state.step is not None:
        return state.step, "selected"
    if state is not None and state.state == "chosen" and state.steps:
        return state.steps[0], "chosen"
    cm = r.selection.candidate_metrics if r.selection else None
    if cm is not None and cm.best is not None:
        return cm.best, "best (suggestion)"
    return None, ""


def _scores(r: CompletionRecord) -> tuple[dict[int, float], str]:
    """(step -> score, mode) in the order the policy ranks: the selection's own scores when a declared policy scored
    candidates, else the per-candidate metric the suggestion uses."""
    s = r.selection
    if s is None:
        return {}, "max"
    policy, basis = metric_policy(s.policy)
    if basis == "declared" and s.scores:
        return {int(k): v for k, v in s.scores.items()}, policy.mode
    cm = s.candidate_metrics
    values = {m.step: m.value for m in cm.candidates if m.value is not None} if cm else {}
    return values, policy.mode


def ordered_rows(r: CompletionRecord) -> list[_Row]:
    scores, mode = _scores(r)
    cm = r.selection.candidate_metrics if r.selection else None
    metrics = {m.step: m for m in cm.candidates} if cm else {}
    by_step = {c.step: c for c in r.candidates}
    ranked = [s for s in ranked_steps(scores, mode) if s in by_step]
    rest = sorted((c for c in r.candidates if c.step not in set(ranked)), key=lambda c: (not c.valid, c.step))
    return [_Row(by_step[s], scores[s], metrics.get(s)) for s in ranked] + [
        _Row(c, None, metrics.get(c.step)) for c in rest
    ]


def _window(row: _Row) -> str:
    return "—" if row.metric is None else coverage_text(row.metric)


def _cells(row: _Row, mark: str) -> list[str]:
    c = row.candidate
    return [
        mark,
        str(c.step),
        "—" if row.score is None else f"{row.score:.4f}",
        _window(row),
        candidate_state(c),
        _v(c.size_label or c.parameter_count),
        str(c.shard_count),
        _v(c.total_bytes),
        str(len(c.problems)),
        c.uri,
    ]


def _fold_key(row: _Row) -> tuple[object, ...] | None:
    """What two rows must share to fold; None: this row never folds (a problem, a warning, a partial window)."""
    c, m = row.candidate, row.metric
    if c.problems or c.warnings:
        return None
    complete = m is None or (m.value is not None and m.rows == m.window_steps)
    if not complete:
        return None
    return (row.score is None, m is None, candidate_state(c), c.size_label or c.parameter_count, c.shard_count,
            c.total_bytes)  # fmt: skip


def _folded(group: list[_Row]) -> list[str]:
    first = _cells(group[0], "")
    scores = [row.score for row in group if row.score is not None]
    span = f"{min(scores):.4f}..{max(scores):.4f}" if scores else "—"
    window = "complete" if any(row.metric is not None for row in group) else "—"
    steps = summarise_steps([row.candidate.step for row in group])
    counted = steps if steps.endswith(" steps)") else f"{steps} ({len(group)})"
    return ["", counted, span, window, *first[4:9], _common_directory([row.candidate.uri for row in group])]


def _common_directory(uris: list[str]) -> str:
    """The deepest directory every uri is under (`.../exports` for `.../exports/global_step_N/policy`)."""
    split = [uri.rstrip("/").split("/") for uri in uris]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if any(p != parts[0] for p in parts):
            break
        common.append(parts[0])
    if len(common) == min(len(p) for p in split):  # one uri is another's prefix: its parent is the directory
        common = common[:-1]
    return "/".join(common)


def candidate_rows(r: CompletionRecord, *, every_row: bool = False) -> tuple[list[list[str]], int | None, int]:
    """(rows, index of the marked row or None, candidates folded into ranges)."""
    marked, label = marked_step(r)
    ordered = ordered_rows(r)
    if every_row:
        first = next((i for i, row in enumerate(ordered) if row.candidate.step == marked), None)
        return [_cells(row, f"{MARK} {label}" if i == first else "") for i, row in enumerate(ordered)], first, 0
    groups: list[list[_Row]] = []
    last_key: tuple[object, ...] | None = None
    for i, row in enumerate(ordered):
        key = _fold_key(row) if i >= TOP_ROWS and row.candidate.step != marked else None
        if key is not None and key == last_key:
            groups[-1].append(row)
        else:
            groups.append([row])
        last_key = key
    rows: list[list[str]] = []
    at: int | None = None
    folded = 0
    for group in groups:
        if len(group) >= FOLD_AT:
            folded += len(group)
            rows.append(_folded(group))
            continue
        for row in group:
            is_marked = row.candidate.step == marked
            if is_marked:
                at = len(rows)
            rows.append(_cells(row, f"{MARK} {label}" if is_marked else ""))
    return rows, at, folded


def candidates_section(r: CompletionRecord, *, every_row: bool = False) -> Section:
    if not r.candidates:
        return Section("Candidates", "candidates", [Para("No export candidate was found.", BAD)])
    rows, marked, folded = candidate_rows(r, every_row=every_row)
    blocks: list[Block] = []
    cm = r.selection.candidate_metrics if r.selection else None
    if cm is not None:
        basis = "the declared policy" if cm.basis == "declared" else "the reference policy (none declared)"
        blocks.append(Para(f"Score: {cm.metric} by {basis}, {cm.computation}; best first."))
    blocks.append(Table(HEADERS, rows, root=r.run_uri, highlight=marked))
    if folded:
        blocks.append(
            Para(
                f"{folded} candidates that read the same are folded into ranges (steps, score span, their common "
                f"directory); `rlcleanup report {r.run_id} --all` lists every one."
            )
        )
    missing = sum(1 for m in cm.candidates if m.value is None) if cm is not None else 0
    if missing:
        blocks.append(Para(f"{missing} candidate(s) have no score: see the metric window column.", WARN))
    for c in sorted(r.candidates, key=lambda c: c.step):
        if c.problems:
            blocks.append(Para(f"Step {c.step} problems:", BAD))
            blocks.append(Bullets(c.problems, BAD))
        if c.warnings:
            blocks.append(Para(f"Step {c.step} warnings:", WARN))
            blocks.append(Bullets(c.warnings, WARN))
    return Section("Candidates", "candidates", blocks)
