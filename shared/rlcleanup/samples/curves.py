"""Deterministic, plausibly noisy reward curves for the sample runs."""

from __future__ import annotations

import math
import random


def reward_curve(step: int, stream: int, shape: str = "rise") -> float:
    """`rise`: saturating climb; `peak`: climbs to a maximum near step 27 then degrades. Noise seeded per point."""
    rng = random.Random(f"reward:{shape}:{stream}:{step}")
    if shape == "peak":
        base = 0.22 + 0.55 * math.exp(-(((step - 27) / 9.0) ** 2))
    else:
        base = 0.2 + 0.55 * (1.0 - math.exp(-step / 9.0))
    return round(min(1.0, max(0.0, base + rng.gauss(0.0, 0.025))), 4)
