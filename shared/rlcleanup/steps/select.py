"""Step 5: select a candidate only by the experiment's declared policy (`cleanup.selection`).

No policy -> `unresolved`, with every valid candidate listed. With EMA smoothing the score of step s is the EMA
at the last metric row <= s, seeded with the first row of the whole stitched chain: MarinSkyRL's "trailing-5 EMA"
(`parse_skyrl_metrics.py`: alpha = 1/3 = 2/(5+1), EMA_n = a*r_n + (1-a)*EMA_{n-1}, EMA_1 = r_1). `trailing` is the
warm-up: a step needs that many rows <= s to be scored. Without smoothing the score is the mean of those `trailing`
raw rows. Mode picks max or min.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlcleanup.formats.config import get
from rlcleanup.models.record import Candidate, ChainCoverage, Selection


class Smoothing(BaseModel):
    model_config = ConfigDict(extra="ignore")
    kind: str = Field(default="ema", pattern="^(ema|none)$")
    alpha: float = Field(default=1 / 3, gt=0, le=1)
    seed: str = "first"


class Eligibility(BaseModel):
    model_config = ConfigDict(extra="ignore")
    every: int | None = Field(default=None, gt=0)
    min_step: int | None = Field(default=None, ge=0)


class SelectionPolicy(BaseModel):
    model_config = ConfigDict(extra="ignore")
    metric: str
    mode: str = Field(default="max", pattern="^(max|min)$")
    smoothing: Smoothing | None = None
    trailing: int = Field(default=1, ge=1, le=1000)
    eligible: Eligibility = Field(default_factory=Eligibility)


def declared_policy(config: dict[str, Any], skyrl: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(raw policy, error). Looks in the SkyRL section first, then the whole config."""
    raw = get(skyrl, "cleanup.selection")
    if raw is None:
        raw = get(config, "cleanup.selection")
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        return None, "cleanup.selection is not a mapping"
    return raw, None


def smoothed(series: Mapping[int, float], smoothing: Smoothing | None) -> dict[int, float]:
    steps = sorted(series)
    if smoothing is None or smoothing.kind == "none":
        return {s: series[s] for s in steps}
    out: dict[int, float] = {}
    ema: float | None = None
    for step in steps:
        value = series[step]
        ema = value if ema is None else smoothing.alpha * value + (1 - smoothing.alpha) * ema
        out[step] = ema
    return out


def score_at(
    policy: SelectionPolicy, ema: Mapping[int, float], metric_steps: list[int], step: int
) -> tuple[float, list[int]] | None:
    """The policy's score of `step` and its window [first_step, last_step] of metric rows, or None when fewer
    than `trailing` rows precede it. `ema` is `smoothed(series, policy.smoothing)`, `metric_steps` its sorted keys.
    The one computation: `select` ranks with it, and steps/candidate_metrics.py shows it for every candidate."""
    history = [m for m in metric_steps if m <= step]
    if len(history) < policy.trailing:
        return None
    if policy.smoothing is not None and policy.smoothing.kind == "ema":
        # The EMA already carries the whole history: its window starts at the seed row.
        return ema[history[-1]], [history[0], history[-1]]
    window = history[-policy.trailing :]
    return sum(ema[m] for m in window) / len(window), [window[0], window[-1]]


def ranked_steps(scores: Mapping[int, float], mode: str) -> list[int]:
    """Best first by the policy's mode; ties go to the later step: more training for the same score."""
    sign = 1 if mode == "max" else -1
    return sorted(scores, key=lambda s: (sign * scores[s], s), reverse=True)


def select(
    raw_policy: dict[str, Any] | None,
    candidates: list[Candidate],
    series: Mapping[int, float],
    *,
    last_saved_step: int | None,
    coverage: ChainCoverage | None,
) -> Selection:
    valid = sorted(c.step for c in candidates if c.valid)
    if raw_policy is None:
        return Selection(
            status="unresolved",
            candidates_considered=valid,
            chain_coverage=coverage,
            reason="the experiment declares no selection policy (cleanup.selection); all valid candidates are listed",
        )
    try:
        policy = SelectionPolicy.model_validate(raw_policy)
    except ValidationError as exc:
        return Selection(
            status="unresolved",
            policy=raw_policy,
            candidates_considered=valid,
            chain_coverage=coverage,
            reason=f"cleanup.selection is invalid: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}",
        )
    eligible = [
        s
        for s in valid
        if (policy.eligible.every is None or s % policy.eligible.every == 0)
        and (policy.eligible.min_step is None or s >= policy.eligible.min_step)
        and (last_saved_step is None or s <= last_saved_step)
    ]
    ema = smoothed(series, policy.smoothing)
    metric_steps = sorted(ema)
    scores: dict[int, float] = {}
    windows: dict[int, list[int]] = {}
    for step in eligible:
        scored = score_at(policy, ema, metric_steps, step)
        if scored is None:
            continue  # not enough history to score this step honestly
        scores[step], windows[step] = scored
    base = Selection(
        status="unresolved",
        policy=raw_policy,
        candidates_considered=eligible,
        chain_coverage=coverage,
        scores={str(k): round(v, 6) for k, v in scores.items()},
    )
    if not scores:
        base.reason = (
            f"no eligible valid candidate has {policy.trailing} rows of {policy.metric} to score"
            if eligible
            else "no valid candidate meets the policy's eligibility (every / min_step / <= last saved step)"
        )
        return base
    ranked = ranked_steps(scores, policy.mode)
    base.status = "selected"
    base.step = ranked[0]
    base.runner_up = ranked[1] if len(ranked) > 1 else None
    base.metric_window = windows[ranked[0]]
    base.reason = (
        f"{policy.mode} of {policy.metric} (trailing {policy.trailing}, "
        f"{policy.smoothing.kind if policy.smoothing else 'raw'}) over {len(scores)} scored candidates"
    )
    return base
