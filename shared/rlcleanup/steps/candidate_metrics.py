"""Which checkpoint? Every valid candidate's metric, for the person who chooses when no policy decided.

The score is the selection policy's own (steps/select.py `score_at`): the declared `cleanup.selection` when it
is valid, else the reference policy the convention names (run-layout.md, "Declared selection policy"): the
trailing-5 EMA of `reward/avg_raw_reward`, alpha 1/3, seeded with the chain's first row, max. Eligibility is not
applied here: every valid candidate is listed, and one the policy cannot score says why instead of being dropped.
The best step is a suggestion for a person; only a declared policy or a publish grant selects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from rlcleanup.models.record import Candidate, CandidateMetric, CandidateMetrics
from rlcleanup.steps.select import SelectionPolicy, Smoothing, ranked_steps, score_at, smoothed

REFERENCE_POLICY = SelectionPolicy(
    metric="reward/avg_raw_reward", mode="max", smoothing=Smoothing(kind="ema", alpha=1 / 3, seed="first"), trailing=5
)


def metric_policy(raw_policy: dict[str, Any] | None) -> tuple[SelectionPolicy, str]:
    """(policy, basis): the declared policy when it parses, else the reference one."""
    if raw_policy is not None:
        try:
            return SelectionPolicy.model_validate(raw_policy), "declared"
        except ValidationError:
            pass  # selection already says why it is invalid; the person still gets the reference numbers
    return REFERENCE_POLICY, "reference"


def describe(policy: SelectionPolicy) -> str:
    smoothing = policy.smoothing
    if smoothing is not None and smoothing.kind == "ema":
        how = f"EMA (alpha {smoothing.alpha:.4g}, seeded with the first row; scored after {policy.trailing} rows)"
    else:
        how = f"mean of the trailing {policy.trailing} rows"
    return f"{how}, {policy.mode} is best"


def candidate_metrics(
    policy: SelectionPolicy, basis: str, candidates: list[Candidate], series: Mapping[int, float]
) -> CandidateMetrics:
    ema = smoothed(series, policy.smoothing)
    metric_steps = sorted(ema)
    rows: list[CandidateMetric] = []
    scores: dict[int, float] = {}
    for step in sorted(c.step for c in candidates if c.valid):
        scored = score_at(policy, ema, metric_steps, step)
        if scored is None:
            have = sum(1 for m in metric_steps if m <= step)
            why = (
                f"no {policy.metric} rows were preserved"
                if not metric_steps
                else f"{have} row(s) of {policy.metric} at or before step {step}; the policy needs {policy.trailing}"
            )
            rows.append(CandidateMetric(step=step, rows=have, missing=why))
            continue
        value, (first, last) = scored
        scores[step] = value
        covered = sum(1 for m in metric_steps if first <= m <= last)
        rows.append(
            CandidateMetric(
                step=step, value=round(value, 6), window=[first, last], window_steps=last - first + 1, rows=covered
            )
        )
    ranked = ranked_steps(scores, policy.mode)
    return CandidateMetrics(
        metric=policy.metric,
        basis=basis,
        computation=describe(policy),
        candidates=rows,
        best=ranked[0] if ranked else None,
    )


def coverage_text(row: CandidateMetric) -> str:
    """'18/20 steps 1..20' or 'missing: <why>': the one wording `show` and the report use."""
    if row.value is None or row.window is None:
        return f"missing: {row.missing}"
    return f"{row.rows}/{row.window_steps} steps {row.window[0]}..{row.window[1]}"
