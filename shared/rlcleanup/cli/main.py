"""`rlcleanup` command line. Read commands accept --json; exit codes: 0 ok, 1 not found, 2 usage, 3 failure."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from rlcleanup.runtime.embedded import DEFAULT_DB

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)

DbOption = Annotated[Path, typer.Option("--db", help="SQLite records file (embedded default)")]


def _fail(message: str, code: int = 3) -> None:
    typer.echo(f"rlcleanup: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def run(
    run_uri: Annotated[str, typer.Argument(help="durable run root: a local path or gs://bucket/prefix")],
    preserve_to: Annotated[str | None, typer.Option("--preserve-to", help="preserve root")] = None,
    db: DbOption = DEFAULT_DB,
    state: Annotated[str | None, typer.Option(help="controller state to pair with, e.g. SUCCEEDED")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly the completion record JSON")] = False,
) -> None:
    """Run the whole cleanup pipeline on one run (embedded: local files or GCS, SQLite records)."""
    from rlcleanup.cli.render import summary
    from rlcleanup.runtime.embedded import run_embedded

    local = not run_uri.startswith("gs://")
    if local and not Path(run_uri).exists():
        _fail(f"run root {run_uri} does not exist")
    uri = str(Path(run_uri).resolve()) if local else run_uri
    preserve = (
        preserve_to if preserve_to is None or preserve_to.startswith("gs://") else str(Path(preserve_to).resolve())
    )
    try:
        record = run_embedded(uri, db_path=db, preserve_root=preserve, state=state)
    except Exception as exc:  # one line, not a traceback: the record could not be written
        _fail(f"could not process {run_uri}: {type(exc).__name__}: {exc}")
        return
    if record is None:
        _fail(f"no completion record was written for {run_uri}")
        return
    typer.echo(record.model_dump_json(indent=2) if as_json else summary(record))


@app.command()
def show(
    run_id: str,
    db: DbOption = DEFAULT_DB,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print a stored completion record."""
    from rlcleanup.adapters.sqlite_records import SqliteRecordStore
    from rlcleanup.cli.render import summary

    record = SqliteRecordStore(db).get(run_id)
    if record is None:
        _fail(f"no record for run {run_id!r} in {db}", 1)
        return
    typer.echo(record.model_dump_json(indent=2) if as_json else summary(record))


@app.command("sample-run")
def sample_run(
    dest: Path,
    scenario: Annotated[str, typer.Option(help="scenario name; `--scenario list` shows them")] = "completed-resumed",
) -> None:
    """Write a realistic sample run (Layout A unless the scenario says otherwise); prints its run root."""
    from rlcleanup.samples.generator import SCENARIOS, write_sample_run

    if scenario == "list" or scenario not in SCENARIOS:
        for name, text in SCENARIOS.items():
            typer.echo(f"{name:28} {text}")
        if scenario != "list":
            _fail(f"unknown scenario {scenario!r}", 2)
        return
    typer.echo(str(write_sample_run(dest, scenario)))


@app.command()
def schema() -> None:
    """Print the completion record's JSON Schema."""
    from rlcleanup.models.record import CompletionRecord

    typer.echo(json.dumps(CompletionRecord.model_json_schema(), indent=2))


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # `rlcleanup show x | head` is fine
        sys.exit(0)


if __name__ == "__main__":
    main()
