"""Run a step at most once per (run_id, key): the idempotency guard every handler uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from pydantic import BaseModel

from rlcleanup.errors import RetryLater
from rlcleanup.ports.records import Claim
from rlcleanup.runtime.ports import Ports

M = TypeVar("M", bound=BaseModel)


class Busy:
    """What `once_or_busy` returns when another delivery holds the claim (a barrier's holder: see there)."""

    def __repr__(self) -> str:
        return "BUSY"


BUSY: Final = Busy()
_FAILED_CLAIM = "rlcleanup_failed_claim"  # attribute once() sets on an exception raised by its work


@dataclass(frozen=True)
class FailedClaim:
    run_id: str
    key: str


def failed_claim(exc: BaseException) -> FailedClaim | None:
    """Which claim's work raised `exc` (None: it was raised outside any claim, e.g. decoding the message)."""
    found = getattr(exc, _FAILED_CLAIM, None)
    return found if isinstance(found, FailedClaim) else None


def tag_failed_claim(exc: BaseException, run_id: str, key: str) -> None:
    """Say that `exc` is the failure of claim `key` (as `once` does for an exception its work raised): what the
    dead-letter recorder does for a member whose deliveries never reached the recorder's process."""
    setattr(exc, _FAILED_CLAIM, FailedClaim(run_id, key))


@dataclass(frozen=True)
class Ran(Generic[M]):
    """What a claimed step gave: its result, and whether an earlier delivery did it (`result` is what it stored)."""

    result: M
    repeat: bool


def once(p: Ports, run_id: str, key: str, work: Callable[[], M], *, model: type[M]) -> M:
    """Run `work` once per (run_id, key) and return its result, a `model`: stored as its JSON, and on a repeat read
    back from the store as the model (as Powertools' idempotency returns the stored response). A caller that must
    know whether this delivery did the work uses `once_ran`.

    While another delivery holds the claim: RetryLater (this message is redelivered and re-checks).
    An exception from `work` releases the claim and is tagged with it, so `dispatch` knows which stage (or which
    fan-out member) failed and can complete it as failed once no retry is left.
    """
    return once_ran(p, run_id, key, work, model=model).result


def once_ran(p: Ports, run_id: str, key: str, work: Callable[[], M], *, model: type[M]) -> Ran[M]:
    """`once`, saying whether the result is this delivery's or an earlier one's (`Ran.repeat`)."""
    result = _run_claimed(p, run_id, key, work, busy_ok=False)
    assert not isinstance(result, Busy)
    if result is not None:
        return Ran(result, repeat=False)
    earlier = stored(p, run_id, key, model)
    if earlier is None:  # done, but its result is not readable yet (a store that lags its own write)
        raise RetryLater(f"{run_id}/{key} is done but its result is not readable yet")
    return Ran(earlier, repeat=True)


def once_or_busy(p: Ports, run_id: str, key: str, work: Callable[[], M]) -> M | Busy | None:
    """`once` for a barrier: while another delivery holds the claim, BUSY instead of RetryLater. The holder is
    itself a member of the fan-in whose own message stays unacked until the barrier's result is stored (or is
    redelivered when it fails), so this member can ack instead of retrying."""
    result: M | Busy | None = _run_claimed(p, run_id, key, work, busy_ok=True)
    return result


def _run_claimed(p: Ports, run_id: str, key: str, work: Callable[[], BaseModel], *, busy_ok: bool) -> Any:
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
    p.claims.complete_as(run_id, key, result)
    return result


def stored(p: Ports, run_id: str, key: str, model: type[M]) -> M | None:
    """The result a claim stored, as its model (None: not done yet)."""
    return p.claims.result_as(run_id, key, model)


def stored_under(p: Ports, run_id: str, prefix: str, model: type[M]) -> dict[str, M]:
    """Every done claim's result under a key prefix, each as its model, by full key."""
    return p.claims.results_as(run_id, prefix, model)
