"""The pipeline's stages as `watch` shows them, computed from the run's step claims (pure: easy to test)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus

# (label, claim key or key prefix ending in ':'); fan-out totals come from the plan/fan-out results.
STAGES = [
    ("classify", "classify"),
    ("log-scan plan", "terminal-plan"),
    ("log-scan parts", "log-scan:"),
    ("terminal state", "terminal"),
    ("capture plan", "capture-plan"),
    ("capture parts", "capture-part:"),
    ("capture fan-in", "fanin:capture"),
    ("validation", "validate:"),
    ("validation fan-in", "fanin:validate"),
    ("selection", "select"),
]


@dataclass(frozen=True)
class Stage:
    name: str
    done: int
    running: int
    total: int | None  # None: not known yet (the fan-out has not been planned)


def _total(key: str, states: dict[str, dict[str, Any]]) -> int | None:
    if not key.endswith(":"):
        return 1
    plans = {"capture-part:": "capture-plan", "log-scan:": "terminal-plan"}
    if key in plans:
        parts = (states.get(plans[key]) or {}).get("result", {}).get("parts")
        return len(parts) if isinstance(parts, list) else None
    for source in ("fanout:validate", "fanin:capture"):
        targets = (states.get(source) or {}).get("result", {}).get("targets")
        if isinstance(targets, list):
            return len(targets)
    return None


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
