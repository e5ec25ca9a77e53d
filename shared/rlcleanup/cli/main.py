"""`rlcleanup` command line. Read commands accept --json; exit codes: 0 ok, 1 not found, 2 usage, 3 failure."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from rlcleanup.cli.authority import register as register_authority_commands
from rlcleanup.cli.doctor import register as register_doctor_command
from rlcleanup.cli.helptext import hide_flag_types, reflow_commands
from rlcleanup.cli.operator import operator_errors
from rlcleanup.cli.operator import register as register_operator_commands
from rlcleanup.cli.options import (
    DbOption,
    JsonOption,
    QuietOption,
    RunIdArg,
    StoreChoice,
    db_path,
    store_options,
)
from rlcleanup.cli.recover import register as register_recover_command
from rlcleanup.cli.rerun import Rerun, prepare_rerun, preserve_target_problem
from rlcleanup.cli.samples_cmd import register as register_sample_command
from rlcleanup.cli.similar import register as register_similar_command
from rlcleanup.cli.stack_cmds import register as register_stack_commands
from rlcleanup.cli.storage_cmds import register as register_storage_commands
from rlcleanup.cli.stores import EXIT_CODES, EXIT_USAGE, get_record, open_store
from rlcleanup.cli.stores import fail as _fail
from rlcleanup.errors import PermanentError
from rlcleanup.models.controller_states import MANUAL
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.settings import platform
from rlcleanup.textsafe import neutralise

# What `run --state` accepts: the verdicts an operator can state for a run (ENDED is the default, no verdict).
MANUAL_STATES = tuple(sorted(set(MANUAL.states) - {"ENDED"}))

# `-h` as well as `--help`, on every command: click's sub-contexts inherit help_option_names from this one.
HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(add_completion=True, no_args_is_help=True, help=__doc__, epilog=EXIT_CODES, context_settings=HELP)


def _version(value: bool) -> None:
    if value:
        from rlcleanup.cli.doctor import version_line

        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    _show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="print the version and the commit it was built from, and exit",
        ),
    ] = False,
) -> None:
    """rlcleanup: cleanup of standard RL runs (see README.md)."""


def _not_a_run(run_uri: str, local: bool) -> str:
    from rlcleanup.cli.runroots import CONFIG_NAMES, run_roots_below

    message = f"{run_uri} is not a run root: no resolved configuration in it (looked for {', '.join(CONFIG_NAMES)})"
    if local:
        below = run_roots_below(Path(run_uri))
        if below:
            return message + "; run roots below it: " + ", ".join(str(p) for p in below)
    return message + "; nothing was recorded"


@app.command(epilog=EXIT_CODES)
def run(  # noqa: C901 -- a typer command: one check per option before the run starts
    run_uri: Annotated[str, typer.Argument(help="durable run root: a local path or <scheme>://bucket/prefix (gs, s3)")],
    preserve_to: Annotated[
        str | None,
        typer.Option("--preserve-to", help="preserve root (default: $XDG_STATE_HOME/rlcleanup/preserved)"),
    ] = None,
    db: DbOption = None,
    state: Annotated[
        str | None,
        typer.Option(help="controller state to pair with, e.g. SUCCEEDED, FAILED, KILLED (case-insensitive)"),
    ] = None,
    rerun: Annotated[
        bool,
        typer.Option(
            "--rerun", help="process the run again although a record exists (the old record is kept as history)"
        ),
    ] = False,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="the id to record this run under (refused when another root holds it; a root keeps the id it "
            "was first recorded under). Without it, a run whose declared id is another root's is recorded under "
            "its location's id, with the conflict on both records",
        ),
    ] = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Run the whole cleanup pipeline on one run (embedded: local files, GCS or S3, SQLite records).

    A run that already has a record is not processed again: its stored record is printed (and `run` says so).
    After fixing the run (e.g. a missing shard) use --rerun. A run's id is the one it declares, else its
    `<experiment>-<version>` (plus 8 hex of its location's hash when another root already holds that): two roots
    never share a record."""
    from rlcleanup.cli.progress import StderrProgress, follow_run
    from rlcleanup.cli.render import summary
    from rlcleanup.cli.runroots import has_run_config
    from rlcleanup.ports.storage import UnknownSchemeError
    from rlcleanup.runtime.backends import check_scheme, check_storage_reachable, open_storage
    from rlcleanup.runtime.embedded import run_embedded
    from rlcleanup.uris import is_local

    for given in (run_uri, preserve_to):
        try:
            if given is not None:
                check_scheme(given)  # an unknown scheme is a usage error here, not an empty local directory
        except UnknownSchemeError as exc:
            _fail(str(exc), 2)
    if state is not None and state.strip().upper() not in MANUAL_STATES:
        _fail(f"--state {state!r} is not a controller verdict: use one of {', '.join(MANUAL_STATES)}", EXIT_USAGE)
    local = is_local(run_uri)
    if local and not Path(run_uri).exists():
        _fail(f"run root {run_uri} does not exist", EXIT_USAGE)
    uri = str(Path(run_uri).resolve()) if local else run_uri
    preserve = preserve_to if preserve_to is None or not is_local(preserve_to) else str(Path(preserve_to).resolve())
    db_file = db_path(db)
    # The pipeline's own warnings are on the record; stderr carries only the one-line reason below.
    logging.getLogger("rlcleanup").addHandler(logging.NullHandler())
    redo: Rerun | None = None
    try:
        check_storage_reachable(uri, preserve)  # a stopped stack's STORAGE_EMULATOR_HOST: the fix, at once
        if preserve is not None and (problem := preserve_target_problem(preserve)) is not None:
            _fail(*problem)
        if not has_run_config(open_storage(), uri):
            _fail(_not_a_run(run_uri, local), EXIT_USAGE)
        redo = prepare_rerun(uri, db_file) if rerun else None
        kept = redo.kept if redo is not None else None
        if kept is not None:
            # Evidence is write-once: a re-run preserves into its own location, the first capture stays as it was.
            from rlcleanup.paths import default_preserve_root
            from rlcleanup.uris import join

            base = preserve or str(default_preserve_root())
            preserve = join(base, "reruns", kept.rsplit("/", 3)[-3], kept.rsplit("/", 1)[-1])
        started = time.time()
        progress = StderrProgress(quiet=quiet)
        try:
            record = run_embedded(
                uri,
                db_path=db_file,
                preserve_root=preserve,
                state=state,
                run_id=run_id,
                after_each=follow_run(uri, progress),
                say=lambda text: typer.echo(neutralise(f"rlcleanup: {text}"), err=True),
            )
        finally:
            progress.close()
    except KeyboardInterrupt:
        _fail(_interrupted(uri, run_uri, db_file), EXIT_INTERRUPTED)
    except typer.Exit:
        raise
    except PermanentError as exc:  # refused before the run had a record of its own (e.g. its id is another's)
        kept_as = f"; {redo.undo(None)}" if redo is not None else ""
        _fail(f"could not process {run_uri}: {exc.code}: {' '.join(str(exc).split())}{kept_as}")
        return
    except Exception as exc:  # one line, not a traceback: the record could not be written
        kept_as = f"; {redo.undo(None)}" if redo is not None else ""
        _fail(f"could not process {run_uri}: {type(exc).__name__}: {exc}{kept_as}")
        return
    if redo is not None and not redo.finished(record):  # never replace a finished record with one that is not
        reason = _errors_text(record) if record is not None else " (no record was written)"
        _fail(f"the rerun of {run_uri} could not finish{reason}; {redo.undo(record)}")
        return
    if record is None:
        _fail(f"no completion record was written for {run_uri}")
        return
    if record.status is RecordStatus.failed:  # only the error was filed (e.g. no config): no completion record
        reason = f"{record.errors[0].code}: {record.errors[0].message}" if record.errors else "no reason recorded"
        _fail(f"could not process {run_uri}: {' '.join(reason.split())}")
        return
    if record.status is RecordStatus.in_progress:  # every message was handled, yet no step finished the record
        _fail(
            f"run {record.run_id} did not finish: its record is still in_progress after every message was handled"
            f"{_errors_text(record)}; `rlcleanup show {record.run_id}` has the record, "
            f"`rlcleanup run {run_uri} --rerun` starts it over"
        )
        return
    # Step claims make a second `run` a no-op: say so instead of passing an old verdict off as new.
    stored = record.updated_at.timestamp() < started
    typer.echo(neutralise(record.model_dump_json(indent=2) if as_json else summary(record)))
    if stored:
        typer.echo(
            f"rlcleanup: {record.run_id} already had a record (last updated {record.updated_at:%Y-%m-%d %H:%M:%S} "
            f"UTC); printed the stored one. Re-process with `rlcleanup run {run_uri} --rerun`",
            err=True,
        )
    elif kept:
        typer.echo(
            f"rlcleanup: re-ran {record.run_id}; the previous record is kept as {kept}, this run's evidence is in "
            f"{record.preserved_locations[0] if record.preserved_locations else preserve}",
            err=True,
        )


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


def _errors_text(record: CompletionRecord) -> str:
    """The record's errors, each as `step: code: message` (one line each, for a one-line refusal)."""
    if not record.errors:
        return ""
    return " (" + "; ".join(f"{e.step}: {e.code}: {' '.join(e.message.split())}" for e in record.errors) + ")"


def _interrupted(uri: str, run_uri: str, db_file: Path) -> str:
    """What Ctrl-C left: the stages done and those left, by the run's claims, and how to go on."""
    from rlcleanup.cli.progress import stages
    from rlcleanup.cli.stores import step_states
    from rlcleanup.runtime.backends import StoreBackend, open_storage
    from rlcleanup.runtime.embedded import bound_run_id_of

    how = f"`rlcleanup run {run_uri}` resumes it (what was preserved is kept and reused)"
    try:
        opened = open_store(StoreBackend.sqlite, db_file, None)
        run_id = bound_run_id_of(opened.store, open_storage(), uri)
        if run_id is None:
            return f"interrupted before {run_uri} was recorded: nothing was kept; {how.replace('resumes', 'starts')}"
        staged = stages(step_states(opened, run_id))
    except Exception:  # the store itself is what broke: still say how to go on
        return f"interrupted; {how}"
    done = [s.name for s in staged if s.total is not None and s.done >= s.total]
    left = [
        s.name if s.total in (None, 1) else f"{s.name} {s.done}/{s.total}"
        for s in staged
        if s.total is None or s.done < s.total
    ]
    return (
        f"interrupted: run {run_id} is in progress with {len(done)} of {len(staged)} stages done; "
        f"left: {', '.join(left) or 'nothing'}. {how[0].upper()}{how[1:]}"
    )


@app.command(epilog=EXIT_CODES)
@operator_errors
@store_options
def show(run_id: RunIdArg, *, store: StoreChoice) -> None:
    """Print a stored completion record (SQLite file, or Firestore: the emulator or a real project)."""
    from rlcleanup.cli.render import summary

    record = get_record(store.open(), run_id)
    typer.echo(neutralise(record.model_dump_json(indent=2) if store.as_json else summary(record)))


@app.command(epilog=EXIT_CODES)
@operator_errors
@store_options
def forget(
    run_id: RunIdArg,
    yes: Annotated[bool, typer.Option("--yes", help="do it (without it, only say what would be removed)")] = False,
    *,
    store: StoreChoice,
) -> None:
    """Remove a run's record and everything filed under it (claims, grants, history) from the record store.

    For records that should not exist (a wrong path). Preserved evidence and published copies are not touched."""
    from rlcleanup.cli import maintenance

    opened = store.open()
    record = get_record(opened, run_id)
    report = maintenance.forget(opened, run_id) if yes else None
    outcome: dict[str, Any] = {"run_id": run_id, "status": record.status.value, "where": opened.where, "removed": yes}
    if report is not None:
        outcome["documents_removed"] = report.removed  # the record, its claims, events and every document of it
    if store.as_json:
        typer.echo(json.dumps(outcome, indent=2))
    elif report is not None:
        typer.echo(f"forgot {run_id} ({record.status.value}) in {opened.where}: {report.removed} documents removed")
    else:
        typer.echo(f"would forget {run_id} ({record.status.value}) in {opened.where}: add --yes to remove it")


@app.command(epilog=EXIT_CODES)
def emit(
    event_json: Annotated[
        str | None, typer.Argument(help="`-`: read one JobEvent as JSON from stdin (docs/events.md) instead of flags")
    ] = None,
    run_uri: Annotated[str | None, typer.Option("--run-uri", help="durable run root, gs://bucket/prefix")] = None,
    state: Annotated[str | None, typer.Option(help="job state as the source spells it: SUCCEEDED, FAILED, ...")] = None,
    source: Annotated[str, typer.Option(help="iris, ray, skypilot, k8s, marin, slurm, manual")] = "iris",
    job_id: Annotated[
        str | None, typer.Option("--job-id", help="controller job id (default: from the run URI)")
    ] = None,
    attempt_id: Annotated[str | None, typer.Option("--attempt-id", help="the attempt this state is about")] = None,
    project: Annotated[str | None, typer.Option(help="Pub/Sub project (default: $GOOGLE_CLOUD_PROJECT)")] = None,
    topic: Annotated[
        str | None, typer.Option(help="topic to publish to (default: the topology's entry topic, job-events)")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Publish a job-state change to job-events (PUBSUB_EMULATOR_HOST honoured); says what was sent, and where.

    Any controller's hook can call it: with flags, or `rlcleanup emit - < event.json` (docs/events.md)."""
    import sys

    from pydantic import ValidationError

    from rlcleanup.runtime.backends import BusUnreachable
    from rlcleanup.runtime.topology import load_topology
    from rlcleanup.stack.emit import job_event, publish_event

    try:
        if event_json is not None:
            if event_json != "-":
                _fail("the only argument emit takes is `-` (a JSON event on stdin)", EXIT_USAGE)
                return
            payload = json.loads(sys.stdin.read() or "null")
            if not isinstance(payload, dict):
                _fail("stdin must hold one JSON object (a JobEvent, docs/events.md)", EXIT_USAGE)
                return
            event = job_event(**{"source": source, **payload})
        elif run_uri is None or state is None:
            _fail("give --run-uri and --state, or `-` to read the event from stdin", EXIT_USAGE)
            return
        else:
            event = job_event(run_uri, state, source=source, job_id=job_id, attempt_id=attempt_id)
    except ValidationError as exc:
        err = exc.errors()[0]
        _fail(f"invalid event: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}", EXIT_USAGE)
        return
    except (ValueError, TypeError) as exc:
        _fail(f"invalid event: {exc}", EXIT_USAGE)
        return
    project = project or platform().project
    if not project:
        _fail('set GOOGLE_CLOUD_PROJECT (`eval "$(rlcleanup stack up)"`) or pass --project', EXIT_USAGE)
        return
    emulator = platform().pubsub_emulator_host
    topic = topic or load_topology().entry_topic
    try:
        message_id = publish_event(event, project, topic)
    except BusUnreachable as exc:  # checked before publishing: its message is the fix
        _fail(str(exc))
        return
    except Exception as exc:
        _fail(f"could not publish to {topic}: {type(exc).__name__}: {exc}")
        return
    where = f"projects/{project}/topics/{topic}" + (f" (emulator {emulator})" if emulator else "")
    if as_json:
        sent = {"message_id": message_id, "topic": where, "event": event.model_dump(mode="json")}
        typer.echo(json.dumps(sent, indent=2))
        return
    typer.echo(f"sent {event.source} {event.state} for {event.run_uri} to {where}: message {message_id}")


@app.command(epilog=EXIT_CODES)
def schema() -> None:
    """Print the completion record's JSON Schema (of the record as written: derived fields such as problem_codes
    included, marked readOnly)."""
    from rlcleanup.models.record import CompletionRecord

    typer.echo(json.dumps(CompletionRecord.model_json_schema(mode="serialization"), indent=2))


register_operator_commands(app)  # status, watch, report: cli/operator.py
register_authority_commands(app)  # keygen, approver add, grant, grants, cause: cli/authority.py
register_storage_commands(app)  # storage, restore, quarantine-expire: cli/storage_cmds.py
register_similar_command(app)  # similar: cli/similar.py (learning across runs)
register_recover_command(app)  # recover: cli/recover.py (a run the record store lost)
register_stack_commands(app)  # stack up, down, status: cli/stack_cmds.py
register_sample_command(app)  # sample-run: cli/samples_cmd.py
register_doctor_command(app)  # doctor: cli/doctor.py
reflow_commands(app)  # help prose wraps to the terminal, not to the docstring's lines: cli/helptext.py
hide_flag_types()  # no `<bool>` beside a flag that takes no value


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # `rlcleanup show x | head` is fine
        sys.exit(0)


if __name__ == "__main__":
    main()
