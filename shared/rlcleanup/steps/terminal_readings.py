"""The controller's word on how a run ended, read once from every place it is written (run-layout-v2.md §6).

`read_controller` walks the event, each Marin step's `.executor_status` and terminal.json, and every attempt record
of every step, normalising each spelling through its source's table (models/controller_states.py). The same
readings feed the precedence rule (`ControllerReadings.sources`, steps/precedence.py) and the controller state the
record quotes (`ControllerReadings.controller`): a new kind of state file is one more reading here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlcleanup.formats.config import get, parse_int
from rlcleanup.models import controller_states
from rlcleanup.models.controller_states import Verdict
from rlcleanup.steps.layout import AttemptFiles, RunLayout
from rlcleanup.steps.precedence import Source, failure_says_killed


def normalize_state(raw: str | int, source_name: str) -> tuple[Verdict, str]:
    """(verdict, spelled) in `source_name`'s table — (5, "iris") -> (failed, "FAILED"); an unknown spelling is
    `unknown` (no verdict); an unknown source raises UnknownStateSource."""
    table = controller_states.source(source_name)
    return table.verdict(raw), table.spell(raw)


@dataclass(frozen=True)
class ControllerReadings:
    """Every controller-side reading of a run, in precedence order.

    `headline` is what the record quotes as the controller's state: the event, then the training step's own
    readings (its `.executor_status`, terminal.json, its last attempt's record); an export step and attempts a
    later attempt followed are read by the precedence rule only."""

    sources: list[Source]
    headline: list[Source]

    @property
    def controller(self) -> Source | None:
        """The first headline reading that says how the job ended, else the first one (a stale RUNNING)."""
        return next((s for s in self.headline if Verdict(s.state).has_outcome), next(iter(self.headline), None))

    def disagreeing(self) -> list[Source]:
        """Headline readings with an outcome other than the controller's."""
        chosen = self.controller
        if chosen is None:
            return []
        return [s for s in self.headline if Verdict(s.state).has_outcome and s.state != chosen.state]


def describe_controller(reading: Source) -> str:
    """`failed (iris event: FAILED)`: the verdict, where it was read, and the state as the source spells it."""
    return f"{reading.state} ({reading.where}: {reading.spelled or reading.raw})"


def _source(
    where: str, raw: Any, table: str, step: str = "", *, superseded: bool = False, final: bool = True
) -> Source | None:
    """One reading, spelled in `table`'s source (models/controller_states.py); None when nothing is written."""
    if isinstance(raw, bool) or not isinstance(raw, str | int) or not str(raw).strip():
        return None
    state, spelled = normalize_state(raw, table)
    killed = table == "iris" and spelled == "KILLED"
    # An enum number is quoted by its name (5 -> FAILED); a spelling as written.
    shown = spelled if parse_int(str(raw)) is not None else str(raw)
    return Source(where, str(raw), state, killed=killed, superseded=superseded, final=final, step=step, spelled=shown)


def _record_sources(where: str, record: dict[str, Any], step: str, *, superseded: bool, final: bool) -> list[Source]:
    """A manifest's readings (§0: `response` of v1/v2, `result` of a launch.yaml run): its state, its
    `iris_job_state`, and a failure string saying the Iris job was KILLED (Marin reports an Iris kill as FAILED, §4)."""
    out: list[Source] = []
    for key, table in (("state", "protocol"), ("iris_job_state", "iris")):
        raw = get(record, f"response.{key}") or get(record, f"result.{key}")
        src = _source(f"{where} response.{key}", raw, table, step, superseded=superseded, final=final)
        if src is not None:
            out.append(src)
    failure = get(record, "response.failure") or get(record, "result.failure")
    if isinstance(failure, str) and failure_says_killed(failure):
        where_failure, said = f"{where} response.failure", failure[:200]
        kill = Source(
            where_failure, said, Verdict.cancelled, killed=True, superseded=superseded, final=final, step=step
        )
        out.append(kill)
    return out


def read_controller(
    layout: RunLayout, event_state: str | int | None, event_source: str | None, controller_absent: bool
) -> ControllerReadings:
    """Every controller-side source of run-layout-v2.md §6: the event, each Marin step's `.executor_status` and
    terminal.json, and EVERY attempt record of every step (not only the last: "KILLED anywhere" means any attempt).
    An attempt a later attempt of its step followed is `superseded`; readings of the chain's last step are `final`.
    A vanished controller (`controller_absent`) gives no reading: its event is not read."""
    sources: list[Source] = []
    headline: list[Source] = []
    if event_state is not None and not controller_absent:
        if event_source is None:  # a RunMessage comes from a validated JobEvent: its source is always known
            raise controller_states.UnknownStateSource("(none given)")
        if (src := _source(f"{event_source} event", event_state, event_source)) is not None:
            sources.append(src)
            headline.append(src)
    steps: list[tuple[str, str | None, dict[str, Any] | None, list[AttemptFiles]]]
    if layout.steps:
        steps = [(f"{st.name} ", st.executor_status, st.terminal, st.attempts) for st in layout.steps]
    else:
        steps = [("", layout.executor_status, layout.terminal, layout.attempts)]
    # The chain's last step is the last one that left any reading (an export step Marin never started has none).
    spoke = [i for i, (_, status, terminal, attempts) in enumerate(steps) if status or terminal or attempts]
    last = spoke[-1] if spoke else len(steps) - 1
    for i, (label, status, terminal, attempts) in enumerate(steps):
        final = i == last
        read: list[Source] = []
        if (src := _source(".executor_status", status, "marin", label, final=final)) is not None:
            read.append(src)
        read.extend(_record_sources("terminal.json", terminal or {}, label, superseded=False, final=final))
        for k, att in enumerate(attempts):
            superseded = k < len(attempts) - 1
            where = f"attempt {att.attempt_id}"
            read.extend(_record_sources(where, att.record, label, superseded=superseded, final=final))
        sources.extend(read)
        if i == 0:  # the training step (layout.steps lists it first)
            headline.extend(s for s in read if not s.superseded)
    return ControllerReadings(sources, headline)
