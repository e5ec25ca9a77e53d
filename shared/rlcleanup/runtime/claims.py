"""Run a step at most once per (run_id, key): the idempotency guard every handler uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcleanup.ports.records import Claim
from rlcleanup.runtime.errors import RetryLater
from rlcleanup.runtime.ports import Ports

BUSY = {"busy": True}  # what once() returns (with busy_ok) when another delivery holds the claim


def once(
    p: Ports, run_id: str, key: str, work: Callable[[], dict[str, Any]], *, busy_ok: bool = False
) -> dict[str, Any] | None:
    """Run `work` once per (run_id, key). None when it was done before.

    While another delivery holds the claim: RetryLater (this message is redelivered and re-checks), or, for a
    fan-in with busy_ok, BUSY: the holder is itself a fan-in member whose own message stays unacked until the
    fan-in is stored (or is redelivered when it fails), so this member can ack instead of retrying.
    """
    state = p.records.claim(run_id, key, p.lease_seconds, p.clock.now())
    if state is Claim.done:
        return None
    if state is Claim.busy:
        if busy_ok:
            return BUSY
        raise RetryLater(f"{run_id}/{key} is being processed by another worker")
    try:
        result = work()
    except BaseException:
        p.records.release(run_id, key)
        raise
    p.records.complete(run_id, key, result)
    return result
