"""Billable requests this process made, counted where they are made (the adapters), for the cost model.

Every adapter adds to one process-wide counter as it sends a request that a price list bills: GCS Class A / B
operations, Pub/Sub throughput, Firestore document reads, writes and deletes. The per-invocation accounting line
(runtime/functions.py) carries the running totals, so a bench reading the function logs sums them per run
(bench/bench_big_run.py, priced by bench/prices.json). Counting is a dict update under a lock: ~1 us a request.
"""

from __future__ import annotations

import threading
from collections import Counter

GCS_CLASS_A = "gcs_class_a"  # inserts, rewrites/copies, listings, patches (storage.objects.list, ...rewrite)
GCS_CLASS_B = "gcs_class_b"  # object and bucket gets: metadata and media downloads
GCS_FREE = "gcs_free"  # deletes
PUBSUB_REQUESTS = "pubsub_requests"  # publish and push requests
PUBSUB_BILLABLE_BYTES = "pubsub_billable_bytes"  # their data volume, at least 1000 bytes each (the price list's rule)
FIRESTORE_READS = "firestore_reads"  # documents read (a lookup of a missing one and an empty query: 1 each)
FIRESTORE_WRITES = "firestore_writes"  # documents written (create, set, update) in a commit
FIRESTORE_DELETES = "firestore_deletes"
KEYS = (
    GCS_CLASS_A,
    GCS_CLASS_B,
    GCS_FREE,
    PUBSUB_REQUESTS,
    PUBSUB_BILLABLE_BYTES,
    FIRESTORE_READS,
    FIRESTORE_WRITES,
    FIRESTORE_DELETES,
)
PUBSUB_MIN_BYTES = 1000

_counts: Counter[str] = Counter()
_lock = threading.Lock()


def count(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n


def pubsub_message(data: bytes, attributes: dict[str, str] | None) -> None:
    """One publish or push request of one message: body + attributes + timestamp (20) + message id (~16)."""
    size = len(data) + sum(len(k) + len(v) for k, v in (attributes or {}).items()) + 20 + 16
    with _lock:
        _counts[PUBSUB_REQUESTS] += 1
        _counts[PUBSUB_BILLABLE_BYTES] += max(PUBSUB_MIN_BYTES, size)


def totals() -> dict[str, int]:
    """Running totals since the process started (every key, zeros included)."""
    with _lock:
        return {key: _counts[key] for key in KEYS}


def reset() -> None:
    with _lock:
        _counts.clear()
