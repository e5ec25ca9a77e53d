"""The step budget: one rule, first match, each answer citing its evidence.

  (a) the trainer's own word in the logs, last in chain order: the line it logs when it stops at the budget
      (`Reached max training steps (Y)`, the MarinSkyRL fork's `skyrl-train/skyrl_train/trainer.py`;
      `Reached max_training_steps=N, stopping early.`, NovaSky SkyRL HEAD `skyrl/train/trainer.py` @a956457), else
      the total it computed and printed at start (`Steps per epoch: X, total training steps: Y`, run-layout-v3.md
      §6; `Total training steps: Y`, `fully_async_trainer.py` in both). The trainer computed it from the data it
      really loaded, so it wins over a config-derived number that disagrees (the reasoning says so);
  (b) the configuration: a cap (`trainer.max_training_steps`, NovaSky HEAD `skyrl/train/config/config.py`
      `TrainerConfig.max_training_steps`, PR #1690; `trainer.max_steps`, the fork's `trainer.py`
      `_build_train_dataloader_and_compute_training_steps`) caps the epoch total `ceil(rows / train_batch_size) *
      epochs` when the row count is known; either alone suffices (both trainers take `min(epoch total, cap)`);
  (c) unknown, saying what is missing.

A generation-only entrypoint has no budget at all (settle passes that reason in, and no trainer line exists).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlcleanup.formats.config import get_int
from rlcleanup.parsing.log_grammar import EventKind, event_phrase
from rlcleanup.parsing.log_scanner import TrainerEvent

ROW_COUNT_KEYS = ("data.num_train_rows", "data.train_rows")  # our convention (run-layout.md)
# Both spellings as they exist upstream today: NovaSky HEAD renamed the fork's `max_steps` (run-layout-v3.md §5).
CAP_KEYS = ("trainer.max_training_steps", "trainer.max_steps")


def _cap(skyrl: dict[str, Any]) -> tuple[int | None, str]:
    """The smallest positive cap and the keys that set it. Non-positive is "no cap" (the fork skips it; NovaSky
    rejects it at validation, so such a run never trained)."""
    caps = [(value, key) for key in CAP_KEYS if (value := get_int(skyrl, key)) is not None and value > 0]
    if not caps:
        return None, ""
    value, key = min(caps)
    named = " and ".join(f"{k} = {v}" for v, k in caps)
    return value, named if len(caps) > 1 else f"{key} = {value}"


def step_budget(skyrl: dict[str, Any]) -> tuple[int | None, str]:
    """(budget, how it was derived) from the configuration alone: rule (b), else (c)."""
    cap, cap_how = _cap(skyrl)
    rows = next((v for k in ROW_COUNT_KEYS if (v := get_int(skyrl, k)) is not None and v > 0), None)
    batch = get_int(skyrl, "trainer.train_batch_size")
    epochs = get_int(skyrl, "trainer.epochs")
    derived: int | None = None
    derived_how = ""
    if rows is not None and batch and batch > 0 and epochs and epochs > 0:
        derived = math.ceil(rows / batch) * epochs
        derived_how = f"ceil({rows} rows / train_batch_size {batch}) * epochs {epochs} = {derived}"
    if cap is not None and derived is not None:
        if cap <= derived:
            return cap, f"{cap_how} caps the epoch total ({derived_how})"
        return derived, f"{derived_how}, below {cap_how}"
    if cap is not None:
        return cap, f"{cap_how} (row count unknown, so the epoch total was not checked)"
    if derived is not None:
        return derived, derived_how
    missing = [
        name
        for name, value in (("row count (data.num_train_rows)", rows), ("trainer.train_batch_size", batch))
        if not value
    ]
    if not epochs:
        missing.append("trainer.epochs")
    return None, f"unknown: no {' / '.join(CAP_KEYS)} and no {', '.join(missing)}"


@dataclass(frozen=True)
class Budget:
    value: int | None
    source: str  # "trainer log" | "config" | "unknown"
    reason: str  # one sentence: the number, and the evidence it rests on
    logged: TrainerEvent | None = None  # the trainer line of rule (a), when it decided


def _stated(events: list[TrainerEvent]) -> TrainerEvent | None:
    """Rule (a)'s line: the last stop-at-budget line, else the last stated total."""
    for kind in (EventKind.reached_max_steps, EventKind.budget_stated):
        found = next((e for e in reversed(events) if e.kind is kind and e.step is not None and e.step > 0), None)
        if found is not None:
            return found
    return None


def resolve_budget(configured: int | None, configured_reason: str, events: list[TrainerEvent]) -> Budget:
    """Apply the rule: `configured` is rule (b)/(c)'s answer (`step_budget`, or none for generation-only)."""
    line = _stated(events)
    if line is not None and line.step is not None:
        said = f"the trainer logged '{event_phrase(line.kind, line.text)}' at {line.source_uri}:{line.line}"
        if configured is None:
            why = f"{said}; the config gives none ({configured_reason})"
        elif configured == line.step:
            why = f"{said}, as the config says ({configured_reason})"
        else:
            why = f"{said}, which disagrees with the configured budget {configured} ({configured_reason}); the trainer's number is used"
        return Budget(line.step, "trainer log", f"The step budget is {line.step}: {why}.", line)
    if configured is not None:
        return Budget(configured, "config", f"The step budget is {configured} ({configured_reason}).")
    return Budget(
        None,
        "unknown",
        f"The step budget is unknown ({configured_reason}) and no trainer line states it, so the marker alone "
        "cannot show completion.",
    )
