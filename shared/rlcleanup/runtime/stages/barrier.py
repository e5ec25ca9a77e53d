"""The one barrier (fan-in) every stage uses, driven by the topology's declaration of it.

A barrier (`topology.yaml` `barriers[]`) is won exactly once, under its `claim`, when everything in `waits_for` is
stored: for a fan-out, its member set (`member_set`, read as `member_set_model`) and every member's outcome
(`member_key`, read as `outcome_model`); for another barrier, that barrier's claim. Whoever stores the last of those
runs it (the topology checks that every such function lists the barrier in `runs_in`), so a barrier is tried after
every member, planner and inner barrier, and a redelivered member simply tries again.

Barriers count completions, not successes: a member that failed stored `ok=False` (runtime/failures.py), so the
barrier always fires; its work reads each member's outcome and says what a failed member could not do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from rlcleanup.models.outcomes import MemberOutcome
from rlcleanup.models.plans import MemberSet
from rlcleanup.runtime.attempt_scope import scoped
from rlcleanup.runtime.claims import Busy, once_or_busy, stored
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.topology import Barrier, Topology

R = TypeVar("R", bound=BaseModel)
SetT = TypeVar("SetT", bound=MemberSet)
OutcomeT = TypeVar("OutcomeT", bound=MemberOutcome)


@dataclass(frozen=True)
class Gathered:
    """What a barrier waited for, read once: per fan-out its member set and each member's outcome (by member id)."""

    sets: dict[str, MemberSet]
    outcomes: dict[str, dict[str, MemberOutcome]]

    def member_set(self, fan_out: str, model: type[SetT]) -> SetT:
        found = self.sets[fan_out]
        assert isinstance(found, model), f"{fan_out}: {type(found).__name__} is not {model.__name__}"
        return found

    def member_outcomes(self, fan_out: str, model: type[OutcomeT]) -> dict[str, OutcomeT]:
        found = self.outcomes[fan_out]
        typed = {member: outcome for member, outcome in found.items() if isinstance(outcome, model)}
        assert len(typed) == len(found), f"{fan_out}: outcomes are not {model.__name__}"
        return typed


@dataclass(frozen=True)
class Passed(Generic[R]):
    """How a try of a barrier ended. `passed`: it is won (now: `result` is set; or by an earlier delivery)."""

    passed: bool
    detail: str
    result: R | None = None


def gather(p: Ports, run_id: str, scope: str, barrier: Barrier, topology: Topology) -> Gathered | str:
    """Everything `barrier` waits for, or what it is still waiting for (a short text)."""
    sets: dict[str, MemberSet] = {}
    outcomes: dict[str, dict[str, MemberOutcome]] = {}
    for name in barrier.waits_for:
        if name not in {fan.name for fan in topology.fan_outs}:
            claim = scoped(scope, topology.barrier(name).claim)
            if claim not in p.claims.done_keys(run_id, claim):
                return f"waiting: {topology.barrier(name).label}"
            continue
        fan = topology.fan_out(name)
        member_set = stored(p, run_id, scoped(scope, fan.member_set), fan.set_model)
        if member_set is None:
            return f"waiting: {fan.name} plan"
        ids = member_set.member_ids
        prefix = scoped(scope, fan.member_prefix)
        finished = p.claims.done_count(run_id, prefix)  # the cheap gate: a count, no results read
        if finished < len(ids):
            return f"waiting: {len(ids) - finished} {fan.label}"
        done = p.claims.results_as(run_id, prefix, fan.outcome)
        pending = [member for member in ids if scoped(scope, fan.key_of(member)) not in done]
        if pending:
            return f"waiting: {len(pending)} {fan.label}"
        sets[name] = member_set
        outcomes[name] = {member: done[scoped(scope, fan.key_of(member))] for member in ids}
    return Gathered(sets, outcomes)


def try_barrier(p: Ports, run_id: str, scope: str, name: str, work: Callable[[Gathered], R]) -> Passed[R]:
    """Run the barrier `name` once everything it waits for is stored; exactly one delivery runs `work`."""
    topology = p.topology
    barrier = topology.barrier(name)
    gathered = gather(p, run_id, scope, barrier, topology)
    if isinstance(gathered, str):
        return Passed(False, gathered)
    result = once_or_busy(p, run_id, scoped(scope, barrier.claim), lambda: work(gathered))
    if isinstance(result, Busy):
        # The holder is a member whose own message stays unacked until the barrier is stored: this one can ack.
        return Passed(False, f"fan-in in progress in another delivery ({barrier.label})")
    if result is None:
        return Passed(True, "fan-in already done")
    return Passed(True, f"{barrier.label}: done", result)


BarrierWork = Callable[[Ports, str, str, Gathered], BaseModel]
_WORK: dict[str, BarrierWork] = {}


def barrier_work(name: str) -> Callable[[BarrierWork], BarrierWork]:
    """Declare what the barrier `name` of topology.yaml does when it is won (its stage module defines it). The
    stage table checks that every barrier of the topology has exactly one."""

    def register(work: BarrierWork) -> BarrierWork:
        if name in _WORK and _WORK[name] is not work:
            raise ValueError(f"barrier {name} already has its work: {_WORK[name].__qualname__}")
        _WORK[name] = work
        return work

    return register


def barrier_works() -> dict[str, BarrierWork]:
    return dict(_WORK)


def advance(p: Ports, run_id: str, scope: str, after: str) -> str:
    """`after` (a fan-out, or a barrier) just stored a piece: try every barrier that waits for it, and, for each
    one that is won (now or earlier), the barriers that wait for that one. Returns what the last try said."""
    topology = p.topology
    detail = f"{after}: stored"
    frontier = [after]
    while frontier:
        for barrier in topology.barriers_after(frontier.pop(0)):
            work = _WORK.get(barrier.name)
            if work is None:  # fails closed: the stage table refuses such a topology before any delivery
                raise KeyError(f"barrier {barrier.name} has no work registered (runtime/stages/*.py @barrier_work)")
            tried = try_barrier(p, run_id, scope, barrier.name, _bind(work, p, run_id, scope))
            detail = tried.detail
            if tried.passed:
                frontier.append(barrier.name)
    return detail


def _bind(work: BarrierWork, p: Ports, run_id: str, scope: str) -> Callable[[Gathered], BaseModel]:
    return lambda gathered: work(p, run_id, scope, gathered)


def member_key(p: Ports, scope: str, fan_out: str, member_id: str) -> str:
    """The claim key a member of `fan_out` stores its outcome under (topology.yaml `member_key`)."""
    return scoped(scope, p.topology.fan_out(fan_out).key_of(member_id))


def member_set_key(p: Ports, scope: str, fan_out: str) -> str:
    """The claim key `fan_out`'s member set is stored under (topology.yaml `member_set`)."""
    return scoped(scope, p.topology.fan_out(fan_out).member_set)


def member_prefix(p: Ports, scope: str, fan_out: str) -> str:
    """The key prefix every member of `fan_out` shares (a count or a listing of them reads this)."""
    return scoped(scope, p.topology.fan_out(fan_out).member_prefix)


def own_claim(p: Ports, scope: str, function: str) -> str:
    """The claim key a function stores its own step under (topology.yaml `functions[].claim`)."""
    return scoped(scope, p.topology.claim_of(function))
