"""Adding a stage touches three things (docs/architecture.md, "Add a stage"): its entry in topology.yaml, its row in
the stage table and its stage module. Here a safety-eval stage goes between validation and selection through a
copy of topology.yaml, one row and its handler (safety_eval_stage.py, standing for `runtime/stages/safety_eval.py`),
with no other edit: the embedded default runs it, the sweep re-drives a run that stopped before or after it, and
`watch` shows it in its place. tests/e2e/test_stage_on_stack.py runs the same stage on the emulator stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import safety_eval_stage  # the stage's three pieces (tests/unit is on sys.path)
import yaml
from test_sweep import LATER, DroppingBus, _Clock  # the sweep suite's lossy bus and clock (tests/unit is on sys.path)

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.cli.progress import snapshot
from rlcleanup.models.events import JobEvent
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.stage_table import ROWS, StageTable
from rlcleanup.runtime.topology import Topology, parse_topology
from rlcleanup.samples.generator import VERSION, write_sample_run

RUN_ID = f"math-rl-completed-resumed-{VERSION}"
TOPIC = safety_eval_stage.TOPIC


def topology_with_safety_eval(tmp_path: Path) -> Topology:
    """The packaged topology.yaml with the stage's entries (safety_eval_stage.py), written out and read back."""
    copy = tmp_path / "topology.yaml"
    copy.write_text(yaml.safe_dump(safety_eval_stage.topology_with_safety_eval(), sort_keys=False), encoding="utf-8")
    return parse_topology(yaml.safe_load(copy.read_text(encoding="utf-8")))


def table_with_safety_eval(tmp_path: Path) -> StageTable:
    return StageTable((*ROWS, safety_eval_stage.ROW), topology_with_safety_eval(tmp_path))


# ---------------------------------------------------------------- what follows from them


def _stack(tmp_path: Path, bus: InProcessBus | None = None) -> tuple[EmbeddedStack, str]:
    write_sample_run(tmp_path / "run", "completed-resumed")
    run_uri = str(next((tmp_path / "run" / "durable").glob("*/*")))
    table = table_with_safety_eval(tmp_path)
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"), bus=bus, table=table)
    return stack, run_uri


def _finished(stack: EmbeddedStack) -> None:
    record = stack.ports.records.get(RUN_ID)
    assert record is not None and record.status is RecordStatus.awaiting_authority, record
    assert stack.ports.claims.result(RUN_ID, "safety-eval") is not None
    assert stack.ports.claims.result(RUN_ID, "select") is not None


def test_the_embedded_default_runs_the_new_stage_between_validation_and_selection(tmp_path: Path) -> None:
    stack, run_uri = _stack(tmp_path)
    stack.emit(manual_event(run_uri, "SUCCEEDED"))
    _finished(stack)
    topics = [m.topic for m in stack.bus.published]
    assert topics.count(TOPIC) == 1 and topics.count("run-selection") == 1
    assert topics.index("candidate-validation") < topics.index(TOPIC) < topics.index("run-selection")
    # Its messages carry the run's origin (runtime/recovery.py reads the stage topics from the topology), so a run
    # the record store loses at the new stage is recoverable with no edit to recovery.py.
    assert TOPIC in stack.ports.topology.stage_message_topics
    for message in (m for m in stack.bus.published if m.topic in (TOPIC, "run-selection")):
        origin = json.loads(message.data).get("origin")
        assert origin is not None, f"a {message.topic} message carries no origin"
        assert JobEvent.model_validate(origin).run_uri == run_uri, message.topic


@pytest.mark.parametrize("lost", [TOPIC, "run-selection"])
def test_the_sweep_redrives_a_run_lost_before_or_after_the_new_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    monkeypatch.delenv("RLCLEANUP_SWEEP_ROOTS", raising=False)
    stack, run_uri = _stack(tmp_path, DroppingBus(lost, drop=1))
    stack.emit(manual_event(run_uri, "SUCCEEDED"))
    assert (stack.ports.records.get(RUN_ID) or pytest.fail("no record")).status is RecordStatus.in_progress
    assert stack.ports.claims.result(RUN_ID, "fanin:validate") is not None

    stack.ports.clock = _Clock(LATER)
    stack.bus.publish("sweep", b"{}", {})
    stack.bus.drain()
    _finished(stack)
    assert [m.topic for m in stack.bus.published if m.attributes.get("redrive") == "sweep"] == [lost]


def test_the_sweep_keys_and_watch_show_the_new_stage_in_its_place(tmp_path: Path) -> None:
    stack, run_uri = _stack(tmp_path)
    topology = stack.ports.topology
    hops = [hop.topic for hop in topology.pipeline_keys("pass:").hops]
    assert hops == ["job-events", "run-classified", "candidate-validation", TOPIC, "run-selection"]

    stack.emit(manual_event(run_uri, "SUCCEEDED"))
    states = {key: {"state": "done", "result": r} for key, r in stack.ports.claims.results(RUN_ID, "").items()}
    record = stack.ports.records.get(RUN_ID)
    assert record is not None
    shown = [(s["name"], s["done"], s["total"]) for s in snapshot(record, states, topology)["stages"]]
    names = [name for name, _, _ in shown]
    assert names[names.index("validation fan-in") + 1 :] == ["safety eval", "selection"]
    assert ("safety eval", 1, 1) in shown
