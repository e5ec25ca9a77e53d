"""`rlcleanup` command line. Read commands accept --json; exit codes: 0 ok, 1 not found, 2 usage, 3 failure."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from rlcleanup.cli.authority import register as register_authority_commands
from rlcleanup.cli.operator import register as register_operator_commands
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.embedded import DEFAULT_DB

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)

DbOption = Annotated[Path, typer.Option("--db", help="SQLite records file (embedded default)")]


def _fail(message: str, code: int = 3) -> None:
    typer.echo(f"rlcleanup: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def run(
    run_uri: Annotated[str, typer.Argument(help="durable run root: a local path or <scheme>://bucket/prefix (gs, s3)")],
    preserve_to: Annotated[str | None, typer.Option("--preserve-to", help="preserve root")] = None,
    db: DbOption = DEFAULT_DB,
    state: Annotated[str | None, typer.Option(help="controller state to pair with, e.g. SUCCEEDED")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly the completion record JSON")] = False,
) -> None:
    """Run the whole cleanup pipeline on one run (embedded: local files, GCS or S3, SQLite records)."""
    from rlcleanup.adapters.storage_registry import BUILTIN
    from rlcleanup.cli.render import summary
    from rlcleanup.ports.storage import UnknownSchemeError
    from rlcleanup.runtime.embedded import run_embedded
    from rlcleanup.uris import is_local

    for given in (run_uri, preserve_to):
        try:
            if given is not None:
                BUILTIN.for_uri(given)  # an unknown scheme is a usage error here, not an empty local directory
        except UnknownSchemeError as exc:
            _fail(str(exc), 2)
    local = is_local(run_uri)
    if local and not Path(run_uri).exists():
        _fail(f"run root {run_uri} does not exist")
    uri = str(Path(run_uri).resolve()) if local else run_uri
    preserve = preserve_to if preserve_to is None or not is_local(preserve_to) else str(Path(preserve_to).resolve())
    # The pipeline's own warnings are on the record; stderr carries only the one-line reason below.
    logging.getLogger("rlcleanup").addHandler(logging.NullHandler())
    try:
        record = run_embedded(uri, db_path=db, preserve_root=preserve, state=state)
    except Exception as exc:  # one line, not a traceback: the record could not be written
        _fail(f"could not process {run_uri}: {type(exc).__name__}: {exc}")
        return
    if record is None:
        _fail(f"no completion record was written for {run_uri}")
        return
    if record.status is RecordStatus.failed:  # only the error was filed (e.g. no config): no completion record
        reason = f"{record.errors[0].code}: {record.errors[0].message}" if record.errors else "no reason recorded"
        _fail(f"could not process {run_uri}: {' '.join(reason.split())}")
        return
    if record.status is RecordStatus.in_progress:  # every message was handled, yet no step finished the record
        _fail(f"run {record.run_id} did not finish: its record is still in_progress after every message was handled")
        return
    typer.echo(record.model_dump_json(indent=2) if as_json else summary(record))


@app.command()
def show(
    run_id: str,
    db: DbOption = DEFAULT_DB,
    backend: Annotated[
        str | None,
        typer.Option(help="sqlite | firestore (default: firestore when FIRESTORE_EMULATOR_HOST is set)"),
    ] = None,
    project: Annotated[str | None, typer.Option(help="Firestore project (default: $GOOGLE_CLOUD_PROJECT)")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print a stored completion record (SQLite file, or Firestore: the emulator or a real project)."""
    import os

    from rlcleanup.cli.render import summary

    chosen = backend or ("firestore" if os.environ.get("FIRESTORE_EMULATOR_HOST") else "sqlite")
    if chosen == "firestore":
        from rlcleanup.adapters.firestore_records import FirestoreRecordStore

        project = project or os.environ.get("GOOGLE_CLOUD_PROJECT")
        if not project:
            _fail("--backend firestore needs --project or GOOGLE_CLOUD_PROJECT", 2)
            return
        record = FirestoreRecordStore(project=project).get(run_id)
        where = f"Firestore project {project}"
    elif chosen == "sqlite":
        from rlcleanup.adapters.sqlite_records import SqliteRecordStore

        record = SqliteRecordStore(db).get(run_id)
        where = str(db)
    else:
        _fail(f"unknown backend {chosen!r} (sqlite | firestore)", 2)
        return
    if record is None:
        _fail(f"no record for run {run_id!r} in {where}", 1)
        return
    typer.echo(record.model_dump_json(indent=2) if as_json else summary(record))


@app.command()
def emit(
    run_uri: Annotated[str, typer.Option("--run-uri", help="durable run root, gs://bucket/prefix")],
    state: Annotated[str, typer.Option(help="job state, e.g. SUCCEEDED, FAILED, RUNNING")],
    source: Annotated[str, typer.Option(help="controller: iris, ray, skypilot, k8s, marin")] = "iris",
    job_id: Annotated[
        str | None, typer.Option("--job-id", help="controller job id (default: from the run URI)")
    ] = None,
    project: Annotated[str | None, typer.Option(help="Pub/Sub project (default: $GOOGLE_CLOUD_PROJECT)")] = None,
    topic: Annotated[str, typer.Option(help="topic to publish to")] = "job-events",
) -> None:
    """Publish a job-state change to job-events (PUBSUB_EMULATOR_HOST honoured); prints the message id."""
    import os

    from pydantic import ValidationError

    from rlcleanup.stack.emit import job_event, publish_event

    try:
        event = job_event(run_uri, state, source=source, job_id=job_id)
    except ValidationError as exc:
        _fail(f"invalid event: {exc.errors()[0]['msg']}", 2)
        return
    project = project or os.environ.get("GOOGLE_CLOUD_PROJECT")
    if not project:
        _fail("set GOOGLE_CLOUD_PROJECT (`eval $(rlcleanup stack up)`) or pass --project", 2)
        return
    try:
        message_id = publish_event(event, project, topic)
    except Exception as exc:
        _fail(f"could not publish to {topic}: {type(exc).__name__}: {exc}")
        return
    typer.echo(message_id)


stack_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Local stack on real emulators.")
app.add_typer(stack_app, name="stack")
StateDirOption = Annotated[Path, typer.Option("--state-dir", help="where pids, logs and state.json live")]


@stack_app.command("up")
def stack_up(
    state_dir: StateDirOption = Path(".rlcleanup/stack"),
    project: Annotated[str, typer.Option(help="emulator project id")] = "rlcleanup-local",
    timeout: Annotated[float, typer.Option(help="seconds to wait for every server")] = 90.0,
) -> None:
    """Start the emulators and one functions-framework per function; print the env vars to export."""
    from rlcleanup.stack import StackError, up

    try:
        state = up(state_dir, project=project, timeout=timeout)
    except StackError as exc:
        _fail(str(exc))
        return
    typer.echo(state.exports())
    typer.echo(f"# runs bucket gs://{state.buckets['runs']}, preserve bucket gs://{state.buckets['preserve']}")
    typer.echo(
        f"# watched runs bucket gs://{state.buckets['watched-runs']} ($RLCLEANUP_RUNS_BUCKET): a run uploaded there"
        " (status file last) is cleaned up with no emit"
    )
    if "s3-runs" in state.buckets:
        typer.echo(
            f"# S3 (SeaweedFS) at {state.env.get('AWS_ENDPOINT_URL')}: runs bucket s3://{state.buckets['s3-runs']}"
        )
    typer.echo(f"# logs and state in {state.state_dir}; stop with: rlcleanup stack down --state-dir {state_dir}")


@stack_app.command("down")
def stack_down(state_dir: StateDirOption = Path(".rlcleanup/stack")) -> None:
    """Stop every server of the stack by process group."""
    from rlcleanup.stack import StackError, down

    try:
        stopped = down(state_dir)
    except StackError as exc:
        _fail(str(exc))
        return
    typer.echo(f"stopped {len(stopped)} server(s)" if stopped else "no stack running", err=True)


@stack_app.command("status")
def stack_status(state_dir: StateDirOption = Path(".rlcleanup/stack")) -> None:
    """Which servers of the stack are running."""
    from rlcleanup.stack import status

    states = status(state_dir)
    if not states:
        _fail("no stack state here", 1)
    for name, alive in sorted(states.items()):
        typer.echo(f"{name:32} {'running' if alive else 'stopped'}")


@app.command("sample-run")
def sample_run(
    dest: Path,
    scenario: Annotated[str, typer.Option(help="scenario name; `--scenario list` shows them")] = "completed-resumed",
    scale: Annotated[
        str | None,
        typer.Option(
            help="ci (sized for the in-memory GCS emulator), medium, or large (500 ranks, 1 GiB logs, 40 70B exports)"
        ),
    ] = None,
    ranks: Annotated[int | None, typer.Option(help="with --scale: worker ranks")] = None,
    attempts: Annotated[int | None, typer.Option(help="with --scale: chained attempts")] = None,
    exports: Annotated[int | None, typer.Option(help="with --scale: 70B-shaped exports")] = None,
    log_mb: Annotated[int | None, typer.Option(help="with --scale: total log MiB")] = None,
) -> None:
    """Write a realistic sample run (Layout A unless the scenario says otherwise); prints its run root.

    --scale writes one large synthetic run instead of a scenario (sparse tensor data: little disk).
    """
    from rlcleanup.samples.generator import SCENARIOS, write_sample_run

    if scale is not None:
        from rlcleanup.samples.large import SCALES, spec_for, write_spec

        if scale not in SCALES:
            _fail(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}", 2)
        log_bytes = log_mb * 1024 * 1024 if log_mb is not None else None
        try:
            spec = spec_for(scale, ranks=ranks, attempts=attempts, exports=exports, log_bytes_total=log_bytes)
            typer.echo(str(write_spec(dest, spec)))
        except ValueError as exc:
            _fail(str(exc), 2)
        return
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


register_operator_commands(app)  # status, watch, report: cli/operator.py
register_authority_commands(app)  # keygen, approver add, grant, grants, cause: cli/authority.py


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # `rlcleanup show x | head` is fine
        sys.exit(0)


if __name__ == "__main__":
    main()
