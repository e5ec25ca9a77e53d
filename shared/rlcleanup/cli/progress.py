"""The pipeline's stages as `watch` shows them, computed from the run's step claims (pure: easy to test), and the
progress a long command shows a person on stderr while it works (`run`, `stack up`; issue 38 item 10)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TextIO

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.topology import Topology, load_topology

if TYPE_CHECKING:
    from rlcleanup.runtime.ports import Ports


@dataclass(frozen=True)
class Stage:
    name: str
    done: int
    running: int
    total: int | None  # None: not known yet (the fan-out has not been planned)


def _total(key: str, states: dict[str, dict[str, Any]], topology: Topology) -> int | None:
    """How many members a fan-out has, from its stored member set (or, before that is stored, the result of the
    barrier that plans it); 1 for a step's own claim; None while neither is known."""
    if not key.endswith(":"):
        return 1
    fan = next(f for f in topology.fan_outs if f.member_prefix == key)
    sources = [fan.member_set] + [topology.barrier(b).claim for b in fan.planned_by if b in _barriers(topology)]
    for source in sources:
        count = fan.set_model.count_in((states.get(source) or {}).get("result"))
        if count is not None:
            return count
    return None


def _barriers(topology: Topology) -> set[str]:
    return {b.name for b in topology.barriers}


def stages(states: dict[str, dict[str, Any]], topology: Topology | None = None) -> list[Stage]:
    """Each step of the pipeline (`Topology.progress`: label, claim key or member key prefix ending in ':', in
    pipeline order; the packaged topology.yaml unless given) with its claims' states."""
    topology = topology or load_topology()
    out = []
    for name, key in topology.progress():
        match = [v["state"] for k, v in states.items() if (k.startswith(key) if key.endswith(":") else k == key)]
        out.append(Stage(name, match.count("done"), match.count("running"), _total(key, states, topology)))
    return out


def finished(record: CompletionRecord) -> bool:
    """No automated work left for this run: selection wrote its status, or the run left the standard path."""
    return record.status is not RecordStatus.in_progress


def snapshot(
    record: CompletionRecord, states: dict[str, dict[str, Any]], topology: Topology | None = None
) -> dict[str, Any]:
    staged = stages(states, topology)
    # The select step writes the record's status before its claim is marked done: until then the last snapshot
    # would show "selection 0/1" on a finished record, so wait for that claim too.
    selecting = bool(staged) and staged[-1].running > 0  # the pipeline's last step (selection)
    return {
        "run_id": record.run_id,
        "status": record.status.value,
        "terminal_state": record.terminal_state.value if record.terminal_state else None,
        "finished": finished(record) and not selecting,
        "errors": len(record.errors),
        "stages": [asdict(s) for s in staged],
    }


class StderrProgress:
    """Progress for a person at a terminal: each stage once, as it finishes ("  ✓ classify (0.4 s)"), and a bar
    redrawn in place while countable work runs (candidates validated, servers ready). Only on stderr, never stdout
    (`eval "$(rlcleanup stack up)"` and `run --json` read stdout), and silent when stderr is not a terminal (a pipe,
    a log file, CI) or with --quiet."""

    BAR_WIDTH = 24

    def __init__(self, *, quiet: bool = False, stream: TextIO | None = None, prefix: str = "rlcleanup") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and self.stream.isatty()
        self.prefix = prefix
        self._started = time.monotonic()
        self._finished: set[str] = set()
        self._bar_shown = False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _clear_bar(self) -> None:
        if self._bar_shown:
            self._write("\r\x1b[2K")  # back to the line's start, erase it: the next line replaces the bar
            self._bar_shown = False

    def stage(self, text: str) -> None:
        """One finished stage, on its own line, with the time since the command started."""
        if not self.enabled:
            return
        self._clear_bar()
        self._write(f"{self.prefix}: ✓ {text} ({time.monotonic() - self._started:.1f} s)\n")

    def bar(self, label: str, done: int, total: int) -> None:
        """Countable work: `label [#####.......] done/total`, redrawn in place."""
        if not self.enabled or total <= 0:
            return
        filled = min(self.BAR_WIDTH, round(self.BAR_WIDTH * done / total))
        self._write(f"\r\x1b[2K{self.prefix}: {label} [{'#' * filled}{'.' * (self.BAR_WIDTH - filled)}] {done}/{total}")
        self._bar_shown = True

    def stages(self, staged: list[Stage]) -> None:
        """The pipeline's stages: each that finished since the last call on its own line, then a bar for the first
        fan-out still under way."""
        for st in staged:
            if st.total is not None and st.done >= st.total and st.name not in self._finished:
                self._finished.add(st.name)
                self.stage(st.name if st.total == 1 else f"{st.name} {st.done}/{st.total}")
        under_way = [s for s in staged if s.total and s.total > 1 and s.name not in self._finished and s.done]
        if under_way:
            self.bar(under_way[0].name, under_way[0].done, under_way[0].total or 0)

    def close(self) -> None:
        self._clear_bar()


def follow_run(run_uri: str, progress: StderrProgress) -> Callable[[Ports], None]:
    """An `after_each` for the embedded stack: after every handled message, the run's stages from its claims. The
    run's id is known once classification admitted it (its location's binding)."""
    from rlcleanup.runtime import admission

    bound: list[str] = []

    def after_each(ports: Ports) -> None:
        if not progress.enabled:
            return
        if not bound:
            run_id = admission.bound_run_id(ports, run_uri)
            if run_id is None:
                return
            bound.append(run_id)
        claims = ports.claims.claims_of(bound[0])
        states = {key: {"state": claim.state, "result": claim.result or {}} for key, claim in claims.items()}
        progress.stages(stages(states, ports.topology))

    return after_each
