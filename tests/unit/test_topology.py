"""topology.yaml as the pipeline graph: its validation rules, and that its fan-outs and barriers name the result
keys the handlers really store."""

from __future__ import annotations

import copy
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.handlers import resolve_run_id
from rlcleanup.runtime.topology import load_topology, parse_topology
from rlcleanup.samples.generator import write_sample_run


def _raw() -> dict[str, Any]:
    text = resources.files("rlcleanup.runtime").joinpath("topology.yaml").read_text(encoding="utf-8")
    raw: dict[str, Any] = yaml.safe_load(text)
    return copy.deepcopy(raw)


def _function(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return next(fn for fn in raw["functions"] if fn["name"] == name)


def test_the_shipped_graph_loads() -> None:
    topology = load_topology()
    stages = [s.name for s in topology.stages]
    assert stages[:2] == ["sources", "classify"] and {fn.stage for fn in topology.functions} == set(stages)
    assert {b.name for b in topology.barriers} == {"terminal", "capture-done", "selection"}
    for fn in topology.functions:
        assert fn.dead_letter_topic in fn.publishes, fn.name


@pytest.mark.parametrize(
    ("function", "drop", "error"),
    [
        (
            "plan-capture",
            "candidate-validation",
            "plan-capture \\(in barrier capture-done\\) plans it but does not publish candidate-validation",
        ),
        ("establish-terminal-state", "log-scan-parts", "establish-terminal-state plans it but does not publish"),
        ("validate-candidate", "run-selection", "barrier selection runs in validate-candidate"),
        ("select-candidate", "select-candidate-dlq", "must declare its own dead-letter topic"),
    ],
)
def test_a_missing_declaration_fails_the_topology(function: str, drop: str, error: str) -> None:
    raw = _raw()
    _function(raw, function)["publishes"].remove(drop)
    with pytest.raises(ValueError, match=error):
        parse_topology(raw)


def test_a_barrier_must_run_wherever_its_last_piece_can_land() -> None:
    raw = _raw()
    capture = next(b for b in raw["barriers"] if b["name"] == "capture-done")
    capture["runs_in"].remove("scan-log-part")  # the last log-scan part settles the terminal state, then fans in
    with pytest.raises(ValueError, match=r"barrier capture-done must run in \['scan-log-part'\] too"):
        parse_topology(raw)


def test_publishing_to_another_functions_dead_letter_topic_is_refused() -> None:
    raw = _raw()
    _function(raw, "capture-part")["publishes"].append("apply-grant-dlq")
    with pytest.raises(ValueError, match="another function's dead-letter topic"):
        parse_topology(raw)


def test_fan_outs_and_barriers_name_the_keys_the_handlers_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
    run_root = write_sample_run(tmp_path / "sample", "completed-resumed")
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))
    event = manual_event(str(run_root))
    stack.emit(event)
    run_id = resolve_run_id(stack.ports, event)
    records = stack.ports.claims
    topology = load_topology()
    for barrier in topology.barriers:
        assert records.result(run_id, barrier.claim) is not None, f"barrier {barrier.name}: no {barrier.claim!r}"
    for fan in topology.fan_outs:
        assert records.result(run_id, fan.member_set) is not None, f"fan-out {fan.name}: no {fan.member_set!r}"
        prefix = fan.member_key.split("{", 1)[0]
        assert records.results(run_id, prefix), f"fan-out {fan.name}: no member result {prefix}*"


def test_no_module_spells_a_topic_the_topology_names() -> None:
    """Every topic is read from the topology (issue 46): no quoted topic name outside topology.py/.yaml where a
    topic is meant (a publish, a topic default or constant, a comparison with a topic)."""
    topology = load_topology()
    names = {t.name for t in topology.topics}
    assert {"job-events", "cancel-cleared", "authority-grants", "storage-events"} <= names
    quoted = "|".join(re.escape(name) for name in sorted(names))
    spelled = re.compile(
        rf'(publish\(\s*"(?:{quoted})"|topic[^=\n]*=\s*"(?:{quoted})"|_TOPICS?\s*=.*"(?:{quoted})"'
        rf'|topic\s*[!=]=\s*"(?:{quoted})"|"(?:{quoted})"\s*[!=]=\s*topic|^[A-Z_]+\s*=\s*"(?:{quoted})")'
    )
    source_name = 'SOURCE = "sweep"'  # sources/sweep.py: the name its events carry as their source, not a topic
    shared = Path(evidence.__file__).resolve().parents[1]  # shared/rlcleanup
    found = [
        f"{path.relative_to(shared)}:{number}: {line.strip()}"
        for path in sorted(shared.rglob("*.py"))
        if path.name != "topology.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if spelled.search(line.strip()) and line.strip() != source_name
    ]
    assert found == []
    assert topology.route("apply-grant", "cleared") == "cancel-cleared"  # authority's, through Ports
    assert topology.stage_message_topics == {
        "run-classified",
        "log-scan-parts",
        "capture-parts",
        "candidate-validation",
        "run-selection",
    }
    assert topology.is_entry("on_job_event") and topology.is_entry("on-job-event")
    assert not topology.is_entry("select_candidate")
