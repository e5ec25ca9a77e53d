"""A stack that serves a development stage table instead of the packaged one: `rlcleanup stack up --stages
MODULE:ATTR` (a stage being added, run on the emulators before it is merged into topology.yaml and stage_table.py).

Only the operator starting the stack chooses it: the option is read by `stack up`, recorded in the stack's state and
handed to the function processes the supervisor starts as `RLCLEANUP_STACK_STAGES`, which only this stack's own
functions source (`stack/table_entrypoints.py`) reads. The deployed entry points (`rlcleanup/entrypoints.py`, the
bundle's functions/main.py) never read it, and no event, message or run file can name a module or a topology.
"""

from __future__ import annotations

from pathlib import Path

from rlcleanup.runtime.stage_table import StageTable, StageTableSpecError, import_stage_table
from rlcleanup.runtime.topology import Topology, load_topology
from rlcleanup.stack.procs import StackError

STAGES_VAR = "RLCLEANUP_STACK_STAGES"  # set by `stack up --stages` for its function processes, read only there
TABLE_SOURCE = Path(__file__).with_name("table_entrypoints.py")  # functions-framework's --source for such a stack


def load_stage_table(spec: str) -> StageTable:
    """The `StageTable` named `MODULE:ATTR` (importable on the stack's PYTHONPATH; the wiring imports it,
    runtime/stage_table.import_stage_table); anything else is refused as the stack's error."""
    try:
        return import_stage_table(spec)
    except StageTableSpecError as exc:
        raise StackError(str(exc)) from exc


def served_topology(stages: str | None) -> Topology:
    """The topology a stack serves: its development table's, else the packaged one."""
    return load_stage_table(stages).topology if stages else load_topology()
