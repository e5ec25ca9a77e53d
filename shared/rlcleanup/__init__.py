"""rlcleanup: preserve, validate and hand off a terminal standard RL run."""

__version__ = "0.1.0"
