"""Step 5: select only by the declared policy; hand-computed scores, eligibility, ties and refusals."""

from __future__ import annotations

from typing import Any

import pytest

from rlcleanup.models.record import Candidate, ChainCoverage
from rlcleanup.steps.select import declared_policy, select

COVERAGE = ChainCoverage(first_step=1, last_step=30, gaps=[])


def _cands(*steps: int, invalid: tuple[int, ...] = ()) -> list[Candidate]:
    return [Candidate(step=s, uri=f"/r/exports/global_step_{s}/policy", valid=s not in invalid) for s in steps]


def _policy(**kw: Any) -> dict[str, Any]:
    return {"metric": "reward/avg_raw_reward", "mode": "max"} | kw


def test_no_policy_is_unresolved_and_lists_every_valid_candidate() -> None:
    sel = select(None, _cands(20, 5, 10, 15, invalid=(10,)), {1: 0.5}, last_saved_step=20, coverage=COVERAGE)
    assert (sel.status, sel.policy, sel.step, sel.runner_up, sel.metric_window) == (
        "unresolved",
        None,
        None,
        None,
        None,
    )
    assert sel.candidates_considered == [5, 15, 20]
    assert sel.chain_coverage == COVERAGE
    assert (
        sel.reason == "the experiment declares no selection policy (cleanup.selection); all valid candidates are listed"
    )


def test_ema_math_on_a_hand_computed_series() -> None:
    # alpha 1/2, seeded with r1: EMA = 0.2, 0.4, 0.7, 0.45 (exact in binary floating point).
    series = {1: 0.2, 2: 0.6, 3: 1.0, 4: 0.2}
    policy = _policy(smoothing={"kind": "ema", "alpha": 0.5, "seed": "first"}, trailing=2, eligible={"every": 2})
    sel = select(policy, _cands(2, 4), series, last_saved_step=4, coverage=COVERAGE)
    assert sel.status == "selected"
    assert sel.scores == {"2": 0.4, "4": 0.45}
    assert (sel.step, sel.runner_up, sel.metric_window) == (4, 2, [1, 4])
    assert sel.candidates_considered == [2, 4]
    assert sel.policy == policy
    assert sel.reason == "max of reward/avg_raw_reward (trailing 2, ema) over 2 scored candidates"


def test_default_alpha_is_one_third_marinskyrl_trailing_five_ema() -> None:
    # EMA_1 = 0.3; EMA_2 = 0.6/3 + 0.3*2/3 = 0.4; EMA_3 = 0.9/3 + 0.4*2/3 = 0.566667.
    series = {1: 0.3, 2: 0.6, 3: 0.9}
    sel = select(_policy(smoothing={"kind": "ema"}), _cands(3), series, last_saved_step=3, coverage=COVERAGE)
    assert sel.scores == {"3": 0.566667}
    assert (sel.step, sel.runner_up) == (3, None)


def test_ema_runs_across_the_whole_chain_and_a_step_without_its_own_row() -> None:
    # Steps 3-4 are a coverage gap; the EMA carries on from the last row (alpha 1/2: 0, 0.5, 0.75).
    series = {1: 0.0, 2: 1.0, 5: 1.0}
    policy = _policy(smoothing={"kind": "ema", "alpha": 0.5}, trailing=1)
    sel = select(policy, _cands(4, 5), series, last_saved_step=5, coverage=COVERAGE)
    assert sel.scores == {"4": 0.5, "5": 0.75}
    assert sel.metric_window == [1, 5]


def test_raw_score_is_the_mean_of_the_trailing_rows() -> None:
    series = {s: s / 10 for s in range(1, 7)}
    sel = select(_policy(trailing=3), _cands(3, 6), series, last_saved_step=6, coverage=COVERAGE)
    assert sel.scores == {"3": 0.2, "6": 0.5}
    assert (sel.step, sel.runner_up, sel.metric_window) == (6, 3, [4, 6])
    assert sel.reason == "max of reward/avg_raw_reward (trailing 3, raw) over 2 scored candidates"


def test_eligibility_every_min_step_and_last_saved_step() -> None:
    series = {s: 0.01 * s for s in range(1, 31)}  # rising: the latest eligible step wins
    cands = _cands(5, 10, 12, 15, 20, 25, 30, invalid=(20,))
    policy = _policy(eligible={"every": 5, "min_step": 10})
    sel = select(policy, cands, series, last_saved_step=25, coverage=COVERAGE)
    # 5 < min_step, 12 is not a multiple of 5, 20 is invalid, 30 is beyond the last saved step 25.
    assert sel.candidates_considered == [10, 15, 25]
    assert (sel.step, sel.runner_up) == (25, 15)


def test_min_mode() -> None:
    series = {1: 0.9, 2: 0.5, 3: 0.7}
    policy = {"metric": "policy/final_loss", "mode": "min", "trailing": 1}
    sel = select(policy, _cands(1, 2, 3), series, last_saved_step=3, coverage=COVERAGE)
    assert (sel.status, sel.step, sel.runner_up) == ("selected", 2, 3)
    assert sel.reason == "min of policy/final_loss (trailing 1, raw) over 3 scored candidates"


def test_tie_goes_to_the_later_step() -> None:
    series = {s: 0.5 for s in range(1, 11)}
    sel = select(_policy(smoothing={"kind": "ema"}), _cands(5, 10), series, last_saved_step=10, coverage=COVERAGE)
    assert sel.scores == {"5": 0.5, "10": 0.5}
    assert (sel.step, sel.runner_up) == (10, 5)
    sel = select({**_policy(), "mode": "min"}, _cands(5, 10), series, last_saved_step=10, coverage=COVERAGE)
    assert (sel.step, sel.runner_up) == (10, 5)


@pytest.mark.parametrize(
    ("raw", "reason_part"),
    [
        ({"mode": "max"}, "Field required at ('metric',)"),
        (_policy(mode="median"), "at ('mode',)"),
        (_policy(trailing=0), "at ('trailing',)"),
        (_policy(smoothing={"kind": "sma"}), "at ('smoothing', 'kind')"),
        (_policy(smoothing={"kind": "ema", "alpha": 1.5}), "at ('smoothing', 'alpha')"),
        (_policy(eligible={"every": 0}), "at ('eligible', 'every')"),
    ],
)
def test_invalid_policy_is_unresolved_with_a_reason(raw: dict[str, Any], reason_part: str) -> None:
    sel = select(raw, _cands(5, 10), {1: 0.5}, last_saved_step=10, coverage=COVERAGE)
    assert (sel.status, sel.step, sel.policy) == ("unresolved", None, raw)
    assert sel.candidates_considered == [5, 10]
    assert sel.reason is not None and sel.reason.startswith("cleanup.selection is invalid: ")
    assert reason_part in sel.reason


def test_not_enough_trailing_rows() -> None:
    series = {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4, 5: 0.5, 6: 0.6}
    policy = _policy(smoothing={"kind": "ema"}, trailing=5)
    # Step 4 has only 4 rows behind it: it is eligible but not scored; step 6 is.
    sel = select(policy, _cands(4, 6), series, last_saved_step=6, coverage=COVERAGE)
    assert sel.candidates_considered == [4, 6]
    assert list(sel.scores) == ["6"]
    assert (sel.status, sel.step, sel.runner_up, sel.metric_window) == ("selected", 6, None, [1, 6])
    sel = select(policy, _cands(4), series, last_saved_step=6, coverage=COVERAGE)
    assert (sel.status, sel.step, sel.scores) == ("unresolved", None, {})
    assert sel.reason == "no eligible valid candidate has 5 rows of reward/avg_raw_reward to score"


def test_nothing_eligible() -> None:
    sel = select(_policy(eligible={"min_step": 50}), _cands(10, 20), {1: 0.5}, last_saved_step=20, coverage=COVERAGE)
    assert (sel.status, sel.candidates_considered) == ("unresolved", [])
    assert sel.reason == "no valid candidate meets the policy's eligibility (every / min_step / <= last saved step)"


def test_declared_policy_lookup() -> None:
    block = _policy(trailing=5)
    assert declared_policy({}, {"cleanup": {"selection": block}}) == (block, None)
    assert declared_policy({"cleanup": {"selection": block}, "skyrl": {}}, {}) == (block, None)
    assert declared_policy({}, {}) == (None, None)
    assert declared_policy({}, {"cleanup": {"selection": "max reward"}}) == (None, "cleanup.selection is not a mapping")
