"""The record store options are declared once (cli/options.py `store_options`, issue 46): every command that takes
them offers the same --db/--backend/--project/--json, and the command receives them as one StoreChoice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from rlcleanup.cli.main import app
from rlcleanup.cli.options import RunIdArg, StoreChoice, store_options
from rlcleanup.runtime.backends import StoreBackend

STORE_FLAGS = {"--db", "--backend", "--project", "--json"}


def _flags(command: Any) -> set[str]:
    return {opt for param in command.params for opt in param.opts}


def test_the_commands_that_read_a_run_share_one_option_set() -> None:
    group = typer.main.get_group(app)
    for name in ("show", "grants", "recover", "similar", "forget", "storage", "restore"):
        command = group.commands[name]
        assert _flags(command) >= STORE_FLAGS, name
        assert command.params[0].name == "run_id", name  # the argument stays first


def test_a_decorated_command_gets_one_store_choice(tmp_path: Path) -> None:
    seen: list[tuple[str, StoreChoice]] = []
    tiny = typer.Typer()

    @tiny.command()
    @store_options
    def look(run_id: RunIdArg, *, store: StoreChoice) -> None:
        seen.append((run_id, store))

    db = tmp_path / "r.db"
    result = CliRunner().invoke(tiny, ["r1", "--db", str(db), "--backend", "sqlite", "--project", "p", "--json"])
    assert result.exit_code == 0, result.output
    assert seen == [("r1", StoreChoice(db=db, backend=StoreBackend.sqlite, project="p", as_json=True))]
    assert CliRunner().invoke(tiny, ["r2"]).exit_code == 0
    assert seen[-1] == ("r2", StoreChoice())


def test_no_command_declares_the_four_store_options_itself() -> None:
    """`duplicates` found the same four-line signature in grant, doctor, status and the approver commands: they take
    `store_options` now. Left: watch and report, whose --json means something of their own (one snapshot per line;
    the same as --format json), so their flags are not the shared set's."""
    import ast

    import rlcleanup.cli

    cli = Path(rlcleanup.cli.__file__).parent
    repeating = set()
    for path in cli.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                annotations = {ast.unparse(a.annotation) for a in node.args.args if a.annotation is not None}
                if {"DbOption", "BackendOption", "ProjectOption"} <= annotations:
                    repeating.add(node.name)
    assert repeating == {"watch", "report"}
    group = typer.main.get_group(app)
    approver = group.commands["approver"]
    assert isinstance(approver, typer.core.TyperGroup)
    for command in (group.commands["grant"], group.commands["doctor"], group.commands["status"]):
        assert _flags(command) >= STORE_FLAGS, command.name
    for name in ("add", "list", "revoke"):
        assert _flags(approver.commands[name]) >= STORE_FLAGS, name
