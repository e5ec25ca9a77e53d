"""`rlcleanup stack up|down|status|restart`: the local stack on real emulators (shared/rlcleanup/stack/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rlcleanup.cli.options import JsonOption, QuietOption
from rlcleanup.cli.stores import EXIT_CODES, EXIT_NOT_FOUND
from rlcleanup.cli.stores import fail as _fail

stack_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Local stack on real emulators.")
StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="where pids, logs and state.json live (default: $RLCLEANUP_STACK_DIR, else "
        "$XDG_CACHE_HOME/rlcleanup/stack: one stack per user, found from any directory)",
        show_default=False,
    ),
]


def _stack_dir(state_dir: Path | None) -> Path:
    from rlcleanup.paths import stack_dir

    return (state_dir or stack_dir()).resolve()


@stack_app.command("up", epilog=EXIT_CODES)
def stack_up(
    state_dir: StateDirOption = None,
    project: Annotated[str, typer.Option(help="emulator project id")] = "rlcleanup-local",
    timeout: Annotated[float, typer.Option(help="seconds to wait for every server")] = 90.0,
    quiet: QuietOption = False,
    stages: Annotated[
        str | None,
        typer.Option(
            help="development: serve this stage table (MODULE:ATTR, importable on PYTHONPATH) and its topology "
            "instead of the packaged ones, e.g. a stage being added (docs/architecture.md, 'Add a stage')"
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Start the emulators and one functions-framework per function; print the env vars to export.

    Use as `eval "$(rlcleanup stack up)"`. Every server runs in its own process group on a free port. While it
    starts, a terminal's stderr shows the servers as they answer (stdout carries only what `eval` reads)."""
    from rlcleanup.cli.progress import StderrProgress
    from rlcleanup.stack import StackError, up

    where = _stack_dir(state_dir)
    progress = StderrProgress(quiet=quiet, prefix="rlcleanup stack")

    def ready(name: str, done: int, total: int) -> None:
        progress.bar(f"servers ready ({name})", done, total)
        if done == total:
            progress.stage(f"{total} servers ready")

    try:
        state = up(where, project=project, timeout=timeout, on_ready=ready, stages=stages)
    except StackError as exc:
        progress.close()
        _fail(str(exc))
        return
    progress.stage("topics, subscriptions and buckets provisioned")
    down = 'eval "$(rlcleanup stack down' + ("" if state_dir is None else f" --state-dir {where}") + ')"'
    if as_json:  # the same facts as the comments below, for a program (it sets `env` itself: nothing to eval)
        shown = {"state_dir": str(where), "env": state.env, "buckets": state.buckets, "s3_endpoint": state.s3_endpoint}
        typer.echo(json.dumps(shown | {"servers": sorted(state.pgids), "stop_with": down}, indent=2, sort_keys=True))
        return
    typer.echo(state.exports())
    typer.echo(f"# runs bucket gs://{state.buckets['runs']}, preserve bucket gs://{state.buckets['preserve']}")
    typer.echo(
        f"# watched runs bucket gs://{state.buckets['watched-runs']} ($RLCLEANUP_RUNS_BUCKET): a run uploaded there"
        " (status file last) is cleaned up with no emit"
    )
    if "s3-runs" in state.buckets:
        typer.echo(
            f"# S3 (SeaweedFS) at {state.s3_endpoint}: runs bucket s3://{state.buckets['s3-runs']}"
            " ($RLCLEANUP_S3_ENDPOINT_STACK; your AWS_* variables are left as they are)"
        )
    typer.echo(f"# {len(state.pgids)} servers; logs and state in {where}; stop from any directory with: {down}")


@stack_app.command("down", epilog=EXIT_CODES)
def stack_down(state_dir: StateDirOption = None, as_json: JsonOption = False) -> None:
    """Stop every server of the stack by process group (from any directory); print the `unset` line.

    Use as `eval "$(rlcleanup stack down)"`: the shell forgets the variables `stack up` exported, so no command
    goes on reaching for a stopped emulator. Everything else it says goes to stderr."""
    from rlcleanup.stack import StackError, StackState, down
    from rlcleanup.stack.state import unset_line

    where = _stack_dir(state_dir)
    unset = unset_line(StackState.load(where))
    if not as_json:
        typer.echo(unset)  # first: a shell forgets the stack even if stopping fails
    try:
        stopped = down(where)
    except StackError as exc:
        _fail(str(exc))
        return
    if as_json:
        shown = {"state_dir": str(where), "stopped": sorted(stopped), "unset": unset.split()[1:]}
        typer.echo(json.dumps(shown, indent=2, sort_keys=True))
        return
    if stopped:
        typer.echo(f"stopped {len(stopped)} server(s) of the stack in {where}", err=True)
    else:
        typer.echo(f"no stack running (no live server recorded in {where})", err=True)


@stack_app.command("status", epilog=EXIT_CODES)
def stack_status(state_dir: StateDirOption = None, as_json: JsonOption = False) -> None:
    """Which servers of the stack answer now: each is probed on its port (`running`, `not answering`: its process
    lives but its port does not answer, `stopped`), never taken from what was remembered. Exit 1 when no stack
    is recorded."""
    from rlcleanup.stack import status

    where = _stack_dir(state_dir)
    states = status(where)
    if as_json:
        typer.echo(json.dumps({"state_dir": str(where), "servers": states}, indent=2, sort_keys=True))
        if not states:
            raise typer.Exit(EXIT_NOT_FOUND)
        return
    if not states:
        _fail(f"no stack recorded in {where} (start one with `rlcleanup stack up`)", EXIT_NOT_FOUND)
    running = sum(state == "running" for state in states.values())
    typer.echo(f"stack in {where}: {running} of {len(states)} server(s) running")
    for name, state in sorted(states.items()):
        typer.echo(f"{name:32} {state}")


@stack_app.command("restart", epilog=EXIT_CODES)
def stack_restart(
    name: Annotated[str, typer.Argument(help="a server (pubsub, firestore, gcs, s3, fn-NAME) or a function's name")],
    state_dir: StateDirOption = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for it to answer")] = 90.0,
) -> None:
    """Restart one server of the running stack on its own port (stopped first if it runs), from any directory.

    The other servers, the env vars and every URL stay as they are. An emulator restarted comes back empty:
    Pub/Sub and fake-gcs are provisioned again; runs the Firestore emulator lost are re-driven with
    `rlcleanup recover RUN_ID`."""
    from rlcleanup.stack import StackError
    from rlcleanup.stack.heal import restart

    try:
        done = restart(_stack_dir(state_dir), name, timeout=timeout)
    except StackError as exc:
        _fail(str(exc))
        return
    typer.echo(f"restarted {done.name}: answering again after {done.seconds:g} s")
    if done.note:
        typer.echo(f"note: {done.note}", err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(stack_app, name="stack")
