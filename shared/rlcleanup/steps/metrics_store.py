"""Read the preserved, stitched metrics back (validation needs the steps, selection one series)."""

from __future__ import annotations

from rlcleanup.parsing.metrics import StitchedMetrics
from rlcleanup.ports.storage import Storage


def load_metrics(storage: Storage, uri: str) -> StitchedMetrics:
    return StitchedMetrics.from_jsonl(storage.iter_lines(uri))


def load_metric_steps(storage: Storage, uri: str) -> set[int]:
    return set(load_metrics(storage, uri).train)


def load_series(storage: Storage, uri: str, metric: str) -> dict[int, float]:
    return load_metrics(storage, uri).series(metric)
