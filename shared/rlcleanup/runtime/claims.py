"""Run a step at most once per (run_id, key): the idempotency guard every handler uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlcleanup.errors import RetryLater
from rlcleanup.ports.records import Claim
from rlcleanup.runtime.ports import Ports

BUSY = {"busy": True}  # what once() returns (with busy_ok) when another delivery holds the claim
_FAILED_CLAIM = "rlcleanup_failed_claim"  # attribute once() sets on an exception raised by its work


@dataclass(frozen=True)
class FailedClaim:
    run_id: str
    key: str


def failed_claim(exc: BaseException) -> FailedClaim | None:
    """Which claim's work raised `exc` (None: it was raised outside any claim, e.g. decoding the message)."""
    found = getattr(exc, _FAILED_CLAIM, None)
    return found if isinstance(found, FailedClaim) else None


def once(
    p: Ports, run_id: str, key: str, work: Callable[[], dict[str, Any]], *, busy_ok: bool = False
) -> dict[str, Any] | None:
    """Run `work` once per (run_id, key). None when it was done before.

    While another delivery holds the claim: RetryLater (this message is redelivered and re-checks), or, for a
    fan-in with busy_ok, BUSY: the holder is itself a fan-in member whose own message stays unacked until the
    fan-in is stored (or is redelivered when it fails), so this member can ack instead of retrying.
    An exception from `work` releases the claim and is tagged with it, so `dispatch` knows which stage (or which
    fan-out member) failed and can complete it as failed once no retry is left.
    """
    state = p.claims.claim(run_id, key, p.lease_seconds, p.clock.now(), owner=p.delivery_id)
    if state is Claim.done:
        return None
    if state is Claim.busy:
        if busy_ok:
            return BUSY
        raise RetryLater(f"{run_id}/{key} is being processed by another worker")
    try:
        result = work()
    except BaseException as exc:
        p.claims.release(run_id, key)
        if failed_claim(exc) is None:
            setattr(exc, _FAILED_CLAIM, FailedClaim(run_id, key))
        raise
    p.claims.complete(run_id, key, result)
    return result
