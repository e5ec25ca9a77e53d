"""The pipeline's stages as `watch` shows them, computed from the run's step claims (pure: easy to test)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.topology import Topology, load_topology

# (label, claim key or member key prefix ending in ':'), in pipeline order: declared once, in topology.yaml.
STAGES = load_topology().progress()


@dataclass(frozen=True)
class Stage:
    name: str
    done: int
    running: int
    total: int | None  # None: not known yet (the fan-out has not been planned)


def _total(key: str, states: dict[str, dict[str, Any]]) -> int | None:
    """How many members a fan-out has, from its stored member set (or, before that is stored, the result of the
    barrier that plans it); 1 for a step's own claim; None while neither is known."""
    if not key.endswith(":"):
        return 1
    topology = load_topology()
    fan = next(f for f in topology.fan_outs if f.member_prefix == key)
    sources = [fan.member_set] + [topology.barrier(b).claim for b in fan.planned_by if b in _barriers(topology)]
    for source in sources:
        count = fan.set_model.count_in((states.get(source) or {}).get("result"))
        if count is not None:
            return count
    return None


def _barriers(topology: Topology) -> set[str]:
    return {b.name for b in topology.barriers}


def stages(states: dict[str, dict[str, Any]]) -> list[Stage]:
    out = []
    for name, key in STAGES:
        match = [v["state"] for k, v in states.items() if (k.startswith(key) if key.endswith(":") else k == key)]
        out.append(Stage(name, match.count("done"), match.count("running"), _total(key, states)))
    return out


def finished(record: CompletionRecord) -> bool:
    """No automated work left for this run: selection wrote its status, or the run left the standard path."""
    return record.status is not RecordStatus.in_progress


def snapshot(record: CompletionRecord, states: dict[str, dict[str, Any]]) -> dict[str, Any]:
    staged = stages(states)
    # The select step writes the record's status before its claim is marked done: until then the last snapshot
    # would show "selection 0/1" on a finished record, so wait for that claim too.
    selecting = any(s.name == "selection" and s.running for s in staged)
    return {
        "run_id": record.run_id,
        "status": record.status.value,
        "terminal_state": record.terminal_state.value if record.terminal_state else None,
        "finished": finished(record) and not selecting,
        "errors": len(record.errors),
        "stages": [asdict(s) for s in staged],
    }
