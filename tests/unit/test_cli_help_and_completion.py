"""Issue 38 item 12: `-h` is help on every command, and every RUN_ID argument completes from the record store."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from cli_support import isolated_cli_env, runner

from rlcleanup.cli.main import app
from rlcleanup.cli.options import complete_run_id
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

COMPLETED = "math-rl-completed-resumed-2026.11.30"
FAILED = "math-rl-failed-first-link-2026.11.30"
RUN_ID_COMMANDS = {
    "show",
    "recover",
    "forget",
    "status",
    "watch",
    "report",
    "grant",
    "grants",
    "cause",
    "similar",
    "restore",
    "storage",
}


@pytest.fixture(autouse=True)
def _xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolated_cli_env(tmp_path, monkeypatch)


def _commands(command: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    command = command or typer.main.get_command(app)
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_every_command_takes_dash_h_for_help() -> None:
    paths = [path for path, _ in _commands()]
    assert ("stack", "down") in paths and ("approver", "add") in paths and ("grant",) in paths
    for path in paths:
        short = runner.invoke(app, [*path, "-h"])
        assert short.exit_code == 0, (path, short.stderr)
        assert "Usage:" in short.stdout and re.search(r"--help\s+-h\b", short.stdout), path
        assert short.stdout == runner.invoke(app, [*path, "--help"]).stdout, path


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("completion")
    db = base / "records.db"
    for scenario in ("completed-resumed", "failed-first-link"):
        root = write_sample_run(base / "src" / scenario, scenario)
        assert run_embedded(str(root), db_path=db, preserve_root=str(base / "preserved")) is not None
    return db


def _context(command: str, **params: Any) -> typer.Context:
    ctx = typer.Context(typer.main.get_command(app).commands[command], info_name=command)  # type: ignore[attr-defined]
    ctx.params = params
    return ctx


def test_run_ids_complete_from_the_store_the_command_would_open(records: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    both = complete_run_id(_context("show", db=records), "math-rl-")
    assert sorted(both) == [(COMPLETED, "awaiting_authority"), (FAILED, "awaiting_authority")]
    assert complete_run_id(_context("show", db=records), "math-rl-f") == [(FAILED, "awaiting_authority")]
    assert complete_run_id(_context("show", db=records), "nothing-like-it") == []
    monkeypatch.setenv("RLCLEANUP_DB", str(records))  # no --db typed: the command's default store
    assert [run for run, _ in complete_run_id(_context("grants"), "math-rl-c")] == [COMPLETED]


def test_run_id_completion_never_fails_or_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert complete_run_id(_context("show", db=tmp_path / "none.db"), "") == []  # no store yet: nothing
    assert not (tmp_path / "none.db").exists()
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:9")  # a stopped stack's variable
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    started = time.monotonic()
    assert complete_run_id(_context("show"), "") == []
    assert time.monotonic() - started < 5


def test_every_run_id_argument_completes(records: Path) -> None:
    """Through click's own completion hook of each command's RUN_ID parameter, as the shell script calls it."""
    commands = {path[0]: command for path, command in _commands() if len(path) == 1}  # `stack status` is not it
    for name in sorted(RUN_ID_COMMANDS):
        [param] = [p for p in commands[name].params if p.name == "run_id"]
        ctx = _context(name, db=records)
        assert [item.value for item in param.shell_complete(ctx, "math-rl-c")] == [COMPLETED], name
    others = {
        name
        for name, command in commands.items()
        if any(p.name == "run_id" and p.param_type_name == "argument" for p in command.params)
    }
    assert others == RUN_ID_COMMANDS  # a new command taking a RUN_ID is listed here, and completes


def test_bash_completion_offers_run_ids(records: Path) -> None:
    env = {"_RLCLEANUP_COMPLETE": "complete_bash", "COMP_WORDS": f"rlcleanup show --db {records} math-rl-f"}
    result = runner.invoke(app, [], prog_name="rlcleanup", env={**env, "COMP_CWORD": "4"})
    assert FAILED in result.stdout and COMPLETED not in result.stdout


def _prose(help_text: str) -> list[list[str]]:
    """The help's description paragraphs (after `Usage:`, before the first panel), each a list of its lines."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:end]:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def test_every_help_fits_80_columns_reads_as_prose_and_shows_no_bool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47: `run -h` wrapped badly at 80 columns (the docstring's own line breaks kept, each broken again by
    the terminal), and every flag without a value showed `<bool>` as if it wanted one."""
    monkeypatch.setenv("COLUMNS", "80")
    for path, _ in _commands():
        shown = runner.invoke(app, [*path, "--help"])
        assert shown.exit_code == 0, (path, shown.stderr)
        assert "<bool>" not in shown.stdout, path
        too_long = [line for line in shown.stdout.splitlines() if len(line.rstrip()) > 80]
        assert too_long == [], (path, too_long)
        for paragraph in _prose(shown.stdout):
            # Only a paragraph's last line (or a list item) may stop short: a short line inside a paragraph
            # is a docstring line break the terminal wrapped again.
            ragged = [
                line
                for line, after in itertools.pairwise(paragraph)
                if len(line) < 56 and not re.match(r"[-*•] |\d+[.)] ", after)
            ]
            assert ragged == [], (path, ragged, paragraph)
    run_help = runner.invoke(app, ["run", "--help"]).stdout
    assert re.search(r"--rerun\s+process the run again", run_help)  # a flag: nothing between it and its help
    assert re.search(r"--db\s+<path>\s+SQLite", run_help)  # an option with a value keeps its type
