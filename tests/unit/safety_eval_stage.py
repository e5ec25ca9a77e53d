"""A safety-eval stage between validation and selection, added as docs/architecture.md ("Add a stage") says: its
entry in topology.yaml (here the packaged file edited in memory), its row in the stage table and its handler (this
module stands for `runtime/stages/safety_eval.py`), with no other edit. tests/unit/test_stage_contract.py runs it in
the embedded default, the sweep and `watch`; tests/e2e/test_stage_on_stack.py on the emulator stack, served by
`rlcleanup stack up --stages safety_eval_stage:TABLE` (this module on the stack's PYTHONPATH)."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel

from rlcleanup.models.events import RunMessage
from rlcleanup.runtime.claims import once
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stage_table import ROWS, StageRow, StageTable
from rlcleanup.runtime.stages.barrier import own_claim
from rlcleanup.runtime.stages.common import publish
from rlcleanup.runtime.topology import parse_topology

TOPIC = "safety-eval"
CLAIM = "safety-eval"

# ---------------------------------------------------------------- 1. topology.yaml (the new stage's entries)


def topology_with_safety_eval() -> dict[str, Any]:
    """The packaged topology.yaml, edited as a person adding the stage would."""
    text = resources.files("rlcleanup.runtime").joinpath("topology.yaml").read_text(encoding="utf-8")
    raw: dict[str, Any] = yaml.safe_load(text)
    raw["project_topics"].append({"name": TOPIC, "description": "every candidate validated; run the safety eval"})
    stages = [s["name"] for s in raw["stages"]]
    raw["stages"].insert(stages.index("select"), {"name": "safety", "pipeline": True, "description": "safety eval"})
    functions = [fn["name"] for fn in raw["functions"]]
    raw["functions"].insert(
        functions.index("select-candidate"),
        {
            "name": TOPIC,
            "entry_point": "safety_eval",
            "trigger": TOPIC,
            "stage": "safety",
            "claim": CLAIM,
            "claim_label": "safety eval",
            "publishes": ["run-selection", "safety-eval-dlq"],
            "next": "run-selection",
            "description": "run the safety eval over the validated candidates",
        },
    )
    for fn in raw["functions"]:
        if fn["name"] == "validate-candidate":  # the selection fan-in now sends the run to the safety eval
            fn["publishes"] = [TOPIC if t == "run-selection" else t for t in fn["publishes"]]
        if fn["name"] == "sweep":  # the sweep may re-drive the new hop
            fn["publishes"].insert(-1, TOPIC)
    for barrier in raw["barriers"]:
        if barrier["name"] == "selection":
            barrier["publishes"] = [TOPIC]
    return raw


# ---------------------------------------------------------------- 2. the stage module


class SafetyEvaluated(BaseModel):
    """What the stage's own claim stores."""

    run_uri: str


def safety_eval(p: Ports, msg: RunMessage, attributes: dict[str, str]) -> str:
    """The handler: dispatch hands it the decoded message (its row's `RunMessage`)."""

    def work() -> SafetyEvaluated:
        publish(p, p.topology.next_of(TOPIC), msg)  # what comes next is topology.yaml's
        return SafetyEvaluated(run_uri=msg.run_uri)

    once(p, msg.run_id, own_claim(p, msg.scope, CLAIM), work, model=SafetyEvaluated)
    return "safety eval done"


# ---------------------------------------------------------------- 3. the stage table's row

ROW = StageRow("safety_eval", safety_eval, RunMessage, SafetyEvaluated)
TABLE = StageTable((*ROWS, ROW), parse_topology(topology_with_safety_eval()))
