"""`rlcleanup stack up --stages MODULE:ATTR` (stack/served_table.py): a development stack serves a given stage table
and its topology. Only the operator starting the stack chooses it: the deployed entry points never read the
variable that carries it, a name that is not a StageTable is refused before any server starts, and the function
processes dispatch through the table they were given. tests/e2e/test_stage_on_stack.py runs a run through it."""

from __future__ import annotations

import ast
import base64
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rlcleanup
from rlcleanup.runtime import functions
from rlcleanup.runtime.stage_table import stage_table
from rlcleanup.stack import StackError, local
from rlcleanup.stack.served_table import STAGES_VAR, TABLE_SOURCE, load_stage_table, served_topology
from rlcleanup.stack.tools import served_functions, source_dir

PACKAGE = Path(rlcleanup.__file__).resolve().parent
UNIT_TESTS = str(Path(__file__).resolve().parent)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("safety_eval_stage", "MODULE:ATTR"),  # no attribute
        ("safety_eval_stage:TABLE()", "MODULE:ATTR"),  # an expression, not a name
        (":TABLE", "MODULE:ATTR"),
        ("no_such_module_anywhere:TABLE", "cannot import"),
        ("safety_eval_stage:ROW", "StageRow, not a StageTable"),  # a module's other object: refused by type
        ("os:system", "not a StageTable"),
    ],
)
def test_a_stages_option_that_names_no_stage_table_is_refused(
    spec: str, why: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(UNIT_TESTS)
    with pytest.raises(StackError, match=why):
        load_stage_table(spec)
    with pytest.raises(StackError, match=why):  # `up` refuses it before choosing a port or starting a server
        local.up(tmp_path / "stack", stages=spec)
    assert not (tmp_path / "stack" / "state.json").exists()


def test_a_stack_with_stages_provisions_and_serves_the_tables_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(UNIT_TESTS)
    import safety_eval_stage

    topology = served_topology("safety_eval_stage:TABLE")
    assert topology is safety_eval_stage.TABLE.topology
    assert served_topology(None) is stage_table().topology  # no option: the packaged one
    names = [fn.name for fn in served_functions(topology, TABLE_SOURCE)]
    assert names == [fn.name for fn in topology.functions] and "safety-eval" in names
    assert source_dir(TABLE_SOURCE) == ""  # inside the package: its directory is never put on PYTHONPATH


def test_only_the_stacks_own_functions_source_reads_the_variable() -> None:
    """No deployed path can be told to serve another table: the variable is read in stack/ only."""
    readers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if STAGES_VAR in path.read_text(encoding="utf-8") or "STAGES_VAR" in path.read_text(encoding="utf-8")
    )
    assert readers == ["stack/local.py", "stack/served_table.py", "stack/table_entrypoints.py"]
    bundle = (PACKAGE.parents[1] / "functions" / "main.py").read_text(encoding="utf-8")
    assert STAGES_VAR not in bundle and "table_entrypoints" not in bundle
    deployed = ast.parse((PACKAGE / "entrypoints.py").read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(deployed) if isinstance(node, ast.ImportFrom)}
    assert not any(module and module.startswith("rlcleanup.stack") for module in imported)


def test_a_function_process_dispatches_through_the_table_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """runtime/functions.py `serve_table`: the entry point of the new stage is known, checked and dispatched
    through the served table (the packaged one has no row for it)."""
    monkeypatch.syspath_prepend(UNIT_TESTS)
    import safety_eval_stage

    seen: list[tuple[str, Any]] = []
    monkeypatch.setattr(functions, "ports", lambda: "ports")
    monkeypatch.setattr(functions, "dispatch", lambda p, ep, dlq, data, attrs, **kw: seen.append((ep, kw)) or "ok")
    payload = base64.b64encode(json.dumps({"run_id": "r"}).encode()).decode()
    event = SimpleNamespace(data={"message": {"data": payload, "messageId": "m"}}, get=lambda key, default=None: None)
    with pytest.raises(KeyError):  # the packaged table: no such function
        functions._handle("safety_eval", event)
    monkeypatch.setattr(functions, "_table", None)
    functions.serve_table(safety_eval_stage.TABLE)
    assert functions._handle("safety_eval", event) == "ok"
    assert seen == [("safety_eval", {"message_id": "m", "table": safety_eval_stage.TABLE})]
    assert functions.serving("safety_eval").trigger == "safety-eval"


def test_the_table_entrypoints_source_needs_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Started without `--stages` (the variable unset) it serves nothing: a KeyError at import, never a default."""
    monkeypatch.delenv(STAGES_VAR, raising=False)
    monkeypatch.delitem(sys.modules, "rlcleanup.stack.table_entrypoints", raising=False)
    with pytest.raises(KeyError, match=STAGES_VAR):
        import rlcleanup.stack.table_entrypoints  # noqa: F401
