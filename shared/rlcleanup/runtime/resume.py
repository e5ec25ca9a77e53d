"""An interrupted `rlcleanup run` resumes (issue 47 item 1): the embedded default's claims already know what is
done, and their leases say who was doing the rest.

In the embedded default every delivery's id, the lease owner of the claims it takes, names the process that handles
it: `embedded:<host>:<pid>:<n>` (`embedded_owner`). When `run` finds its run's record still `in_progress`:
- a claim leased to a live process (on this host: its pid exists; on another host: its lease has not expired) means
  another `run` is working on it: refused, naming who holds it, since when and when the lease expires (`RunHeld`);
- claims leased to a process that is gone (Ctrl-C, a kill, a crash) are taken over: released, so their steps run
  again;
- the pass is then re-driven from what the stages stored, exactly as the sweep re-drives a stalled run
  (`sources/sweep.plan_redrive`): every stage re-checks its claim, so finished work (the capture parts already
  preserved) is reused, and selection seals the manifest of the one preserved location.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from rlcleanup.errors import PermanentError
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.records import StepDoc
from rlcleanup.runtime.attempt_scope import PASS_PREFIX
from rlcleanup.runtime.ports import Ports
from rlcleanup.sources.sweep import plan_redrive

OWNER_KIND = "embedded"


@runtime_checkable
class ListsLeases(Protocol):
    """A claim store that can list a run's unfinished claims (the SQLite one: the embedded default's)."""

    def running(self, run_id: str) -> list[tuple[str, StepDoc]]: ...


def embedded_owner(pid: int, host: str, message_id: str) -> str:
    """The lease owner (and delivery id) of an embedded delivery: which process on which host handles it."""
    return f"{OWNER_KIND}:{host}:{pid}:{message_id}"


def this_process_prefix() -> str:
    """The message-id prefix of this process's in-process bus (`embedded_owner` without the message number)."""
    return embedded_owner(os.getpid(), socket.gethostname(), "")


def parse_owner(owner: str | None) -> tuple[str, int] | None:
    """(host, pid) of an embedded delivery's owner; None for any other owner (a Pub/Sub message id, none)."""
    if not owner or not owner.startswith(f"{OWNER_KIND}:"):
        return None
    head, pid, _number = owner.rsplit(":", 2)
    host = head.removeprefix(f"{OWNER_KIND}:")
    return (host, int(pid)) if pid.isdigit() and host else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    except OverflowError:
        return False
    return True


@dataclass(frozen=True)
class Holder:
    """Who holds one of the run's claims: the process, and the lease's start and end."""

    key: str
    owner: str
    host: str | None
    pid: int | None
    since: datetime
    until: datetime

    def sentence(self, run_id: str) -> str:
        who = f"pid {self.pid} on host {self.host}" if self.pid is not None else f"delivery {self.owner}"
        return (
            f"run {run_id} is being processed by another process: held by {who} since "
            f"{self.since:%Y-%m-%d %H:%M:%S} UTC; it expires at {self.until:%Y-%m-%d %H:%M:%S} UTC (step {self.key}). "
            "Wait for it (`rlcleanup watch " + run_id + "`), or stop that process and run this again to resume"
        )


class RunHeld(PermanentError):
    """Another live process is working on the run: `run` refuses instead of racing it."""

    def __init__(self, holder: Holder, run_id: str) -> None:
        super().__init__("run_held", holder.sentence(run_id))
        self.holder = holder


def holders(claims: ListsLeases, run_id: str, now: datetime, lease_seconds: float) -> tuple[list[Holder], list[str]]:
    """The run's unfinished claims split into those a live process holds and the keys of those nobody alive does
    (an expired lease, a dead process on this host, a claim left without a lease)."""
    live: list[Holder] = []
    dead: list[str] = []
    me = (socket.gethostname(), os.getpid())
    for key, doc in claims.running(run_id):
        parsed = parse_owner(doc.owner)
        if doc.lease_until is None or doc.lease_until <= now or parsed == me:
            dead.append(key)  # expired, or this very process's own (a delivery it retries)
            continue
        if parsed is not None and parsed[0] == me[0] and not _alive(parsed[1]):
            dead.append(key)
            continue
        since = doc.lease_until - timedelta(seconds=lease_seconds)
        host, pid = parsed if parsed is not None else (None, None)
        live.append(Holder(key, doc.owner or "?", host, pid, since, doc.lease_until))
    return live, dead


def take_over(p: Ports, run_id: str) -> list[str]:
    """Refuse (RunHeld) when a live process holds one of the run's claims; else release the claims a gone process
    left, and return their keys."""
    claims = p.claims
    if not isinstance(claims, ListsLeases):  # a store that cannot list leases (Firestore): its leases expire
        return []
    live, dead = holders(claims, run_id, p.clock.now(), p.lease_seconds)
    if live:
        raise RunHeld(min(live, key=lambda h: h.since), run_id)
    for key in dead:
        claims.release(run_id, key)
    return dead


def resume_messages(p: Ports, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The stage messages that move the run's interrupted first pass on (none: the record is not in progress, or
    the run was never classified, which the job event itself redoes)."""
    record = p.records.get(run_id)
    if record is None or record.status is not RecordStatus.in_progress:
        return []
    keys = p.topology.pipeline_keys(PASS_PREFIX)
    if keys.classify not in p.claims.done_keys(run_id, keys.classify):
        return []
    plan = plan_redrive(p.claims, record, p.preserve_root, keys)
    return [(topic, payload) for topic, payload in plan.republish if topic != p.topology.entry_topic]
