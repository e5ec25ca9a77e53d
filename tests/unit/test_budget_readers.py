"""Issue 34 items 1-2, the readers: every spelling upstream uses today for the step budget (config keys and trainer
log lines) and the console tracker's metric rows with string floats.

Upstream read: NovaSky-AI/SkyRL @a956457 `skyrl/train/{trainer,fully_async_trainer}.py`, `skyrl/train/utils/
tracking.py` (`ConsoleLogger`), `skyrl/train/config/config.py`; marin-community/MarinSkyRL `skyrl-train/skyrl_train/
{trainer,fully_async_trainer}.py`; run-layout-v3.md §5-§6.
"""

from __future__ import annotations

import pprint
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcleanup.parsing.log_grammar import EventKind
from rlcleanup.parsing.log_scanner import LogScanner, TrainerEvent
from rlcleanup.parsing.metrics import metric_value, numeric_text, parse_metric_lines
from rlcleanup.samples import logtext as lt
from rlcleanup.samples.skyrl_head import stringify_floats
from rlcleanup.steps.budget import resolve_budget, step_budget


def _events(*lines: str) -> list[TrainerEvent]:
    scanner = LogScanner("gs://b/run/logs/driver.log", "a1")
    for line in lines:
        scanner.feed(line)
    return scanner.finish().events


def _loguru(msg: str, where: str = "skyrl.train.trainer:train:551") -> str:
    from datetime import UTC, datetime

    return lt.ray_prefix(4100, lt.loguru(datetime(2026, 12, 2, 9, tzinfo=UTC), "INFO", where, msg))


# -- the configuration: rule (b) ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trainer", "data", "expected"),
    [
        # NovaSky HEAD's key, alone and capping the epoch total.
        ({"max_training_steps": 20}, {}, 20),
        ({"max_training_steps": 5, "train_batch_size": 4, "epochs": 2}, {"num_train_rows": 40}, 5),
        ({"max_training_steps": 50, "train_batch_size": 4, "epochs": 2}, {"num_train_rows": 40}, 20),
        # The fork's key, as before.
        ({"max_steps": 20}, {}, 20),
        ({"max_steps": "20"}, {}, 20),  # a Hydra override saved as text
        # Both (a hand-merged config): the smaller cap is the one a trainer would stop at.
        ({"max_steps": 30, "max_training_steps": 20}, {}, 20),
        # Non-positive is no cap (the fork skips it, NovaSky refuses it).
        ({"max_training_steps": 0, "train_batch_size": 4, "epochs": 1}, {"train_rows": 10}, 3),
        ({"max_training_steps": None}, {}, None),
        ({"epochs": 3}, {}, None),
    ],
)
def test_configured_budget_table(trainer: dict[str, Any], data: dict[str, Any], expected: int | None) -> None:
    value, how = step_budget({"trainer": trainer, "data": data})
    assert value == expected
    if expected is None:
        assert how.startswith("unknown: no trainer.max_training_steps / trainer.max_steps")


def test_configured_budget_names_the_key_it_read() -> None:
    assert step_budget({"trainer": {"max_training_steps": 20}}) == (
        20,
        "trainer.max_training_steps = 20 (row count unknown, so the epoch total was not checked)",
    )
    assert step_budget({"trainer.max_training_steps": 7})[0] == 7  # flat dotted keys (Hydra overrides verbatim)


# -- the trainer's lines: rule (a) -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind", "step"),
    [
        # NovaSky HEAD trainer.py / fully_async_trainer.py
        (_loguru("Reached max_training_steps=20, stopping early."), EventKind.reached_max_steps, 20),
        (
            _loguru("Total training steps: 20", "skyrl.train.fully_async_trainer:_build:430"),
            EventKind.budget_stated,
            20,
        ),
        # the MarinSkyRL fork
        (_loguru("Reached max training steps (40)", "skyrl_train.trainer:train:639"), EventKind.reached_max_steps, 40),
        (_loguru("Steps per epoch: 10, total training steps: 30"), EventKind.budget_stated, 30),
        ("Steps per epoch: 10, total training steps: 30", EventKind.budget_stated, 30),
        (_loguru("Total training steps: 12", "skyrl_train.fully_async_trainer:x:359"), EventKind.budget_stated, 12),
    ],
)
def test_trainer_budget_lines_table(line: str, kind: EventKind, step: int) -> None:
    (event,) = _events(line)
    assert (event.kind, event.step) == (kind, step)


def test_a_resume_past_the_budget_is_not_a_stop_at_budget_line() -> None:
    (event,) = _events(_loguru("Resumed at global_step 21 >= max training steps (20); run is already COMPLETE"))
    assert event.kind is EventKind.resumed_already_complete


def test_resolve_budget_first_match() -> None:
    stated = _events(_loguru("Steps per epoch: 10, total training steps: 20"))
    reached = _events(
        _loguru("Steps per epoch: 10, total training steps: 20"), _loguru("Reached max training steps (18)")
    )
    # (a) the stop-at-budget line beats the stated total, and both beat the config, which is named when it differs.
    got = resolve_budget(25, "trainer.max_steps = 25", reached)
    assert (got.value, got.source) == (18, "trainer log")
    assert "'Reached max training steps (18)' at gs://b/run/logs/driver.log:2" in got.reason
    assert "disagrees with the configured budget 25 (trainer.max_steps = 25)" in got.reason
    got = resolve_budget(None, "unknown: no caps", stated)
    assert (got.value, got.source) == (20, "trainer log")
    assert got.reason.endswith("; the config gives none (unknown: no caps).")
    # (b) the config; (c) unknown.
    assert resolve_budget(20, "cfg", []).reason == "The step budget is 20 (cfg)."
    unknown = resolve_budget(None, "unknown: x", [])
    assert unknown.value is None and "no trainer line states it" in unknown.reason


# -- the console tracker -----------------------------------------------------------------------------------------


def _console(step: int, payload: dict[str, Any], *, joined: bool = False) -> list[str]:
    """NovaSky `ConsoleLogger.log`: `logger.info(f"Step {step}: \\n{pformat(stringify_floats(data))}")`."""
    body = pprint.pformat(stringify_floats(payload)).splitlines()
    if joined:
        return [_loguru(f"Step {step}: " + " ".join(body), "skyrl.train.utils.tracking:log:189")]
    return [_loguru(f"Step {step}: ", "skyrl.train.utils.tracking:log:189"), *(lt.ray_prefix(4100, b) for b in body)]


def _payload(step: int, reward: float) -> dict[str, Any]:
    keys = {f"timing/stage_{i:02d}": 1.5 * i for i in range(12)}  # long enough that pprint wraps it
    return {"reward/avg_raw_reward": reward, "trainer/global_step": step, "trainer/epoch": 0, **keys}


@pytest.mark.parametrize("joined", [False, True])
def test_console_rows_read_string_floats(joined: bool) -> None:
    lines = [*_console(1, _payload(1, 0.25), joined=joined), *_console(2, _payload(2, 0.5), joined=joined)]
    rows = list(parse_metric_lines(lines))
    assert [(r.step, r.kind, r.fmt) for r in rows] == [(1, "train", "console"), (2, "train", "console")]
    assert rows[1].metrics["reward/avg_raw_reward"] == "0.5000"
    assert metric_value(rows[1], "reward/avg_raw_reward") == 0.5


def test_console_eval_before_train_takes_the_header_step() -> None:
    # `eval_before_train`: the payload has no trainer/global_step; the header names step 0.
    rows = list(parse_metric_lines(_console(0, {"eval/all/avg_score": 0.125, "eval/all/pass_at_8": 0.25})))
    assert [(r.step, r.kind) for r in rows] == [(0, "eval")]
    # A dict not right after a header, without a step, is still not a metric row.
    assert list(parse_metric_lines([_loguru("Step 3: "), "unrelated line", "{'eval/x': '0.1000'}"])) == []


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_numeric_text_reads_every_4f_string(value: float) -> None:
    text = f"{value:.4f}"
    assert numeric_text(text) == float(text)
    assert metric_value({"m": text}, "m") == float(text)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "high", "0.5.1", "", "1" * 80, "0x10", "١٢"])
def test_numeric_text_refuses_non_numbers_and_non_finite(text: str) -> None:
    assert metric_value({"m": text}, "m") is None
