"""Operator commands: `status`, `watch`, `report`. Registered onto the main app by `register(app)`.

Records come from SQLite (--db) or Firestore (--backend firestore, or automatically when
FIRESTORE_EMULATOR_HOST is set). Every command takes --json. Exit codes: 0 ok, 1 not found, 2 usage, 3 failure.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, ParamSpec

import typer

from rlcleanup.cli.options import (
    BackendOption,
    DbOption,
    ProjectOption,
    ReportFormat,
    StoreChoice,
    backend_name,
    db_path,
    run_id_argument,
    store_options,
)
from rlcleanup.cli.stores import (
    EXIT_FAILURE,
    EXIT_USAGE,
    OpenStore,
    OperatorError,
    get_record,
    not_found,
    open_store,
)
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus, TerminalState
from rlcleanup.textsafe import neutralise

EXIT_CODES = (
    "Exit codes: 0 ok, 1 not found (run or records), 2 usage, 3 failure (store unreachable, timeout, failed run)."
)

P = ParamSpec("P")


def operator_errors(fn: Callable[P, None]) -> Callable[P, None]:
    """OperatorError -> one line on stderr and its exit code; store/network failures -> exit 3, not a traceback."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except OperatorError as exc:
            typer.echo(neutralise(f"rlcleanup: {exc}"), err=True)
            raise typer.Exit(exc.code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # e.g. the emulator went away mid-watch
            typer.echo(neutralise(f"rlcleanup: {type(exc).__name__}: {exc}"), err=True)
            raise typer.Exit(EXIT_FAILURE) from None

    return wrapper


def _console() -> Any:
    from rich.console import Console

    # Piped output keeps long run ids on one line instead of rich's 80-column default.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def _cell(text: str) -> str:
    """A run's string in a rich table: no control code reaches the terminal and no `[...]` is read as markup."""
    from rich.markup import escape

    return escape(neutralise(text, keep_newlines=False))


def _selection(r: CompletionRecord) -> str:
    from rlcleanup.report.verdict import selection_state

    state = selection_state(r)
    if state is None:
        return "—"
    return f"step {', '.join(map(str, state.steps))} ({state.state})" if state.steps else state.state


def status_row(r: CompletionRecord) -> dict[str, Any]:
    """One run as `status --json` lists it; selection and verdict from report/verdict.py, as every surface."""
    from rlcleanup.report.verdict import build_verdict, selection_state

    state = selection_state(r)
    return {
        "run_id": r.run_id,
        "status": r.status.value,
        "terminal_state": r.terminal_state.value if r.terminal_state else None,
        "selection": state.state if state else None,  # selected | chosen (by a publish grant) | unresolved | none
        "selected_step": state.step if state else None,
        "verdict": build_verdict(r).line,
        "errors": len(r.errors),
        "remaining_work": len(r.remaining_work),
        "updated_at": r.updated_at.isoformat(),
        "run_uri": r.run_uri,
    }


_STATES = sorted({s.value for s in RecordStatus} | {s.value for s in TerminalState})
_TONE = {"complete": "green", "awaiting_authority": "yellow", "failed": "red", "needs_person": "red"}


@store_options
def status(
    run_id: Annotated[str | None, run_id_argument("one run (default: every run, newest first)")] = None,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state", help=f"keep runs whose status or terminal state is one of: {', '.join(_STATES)} (repeatable)"
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="most recent runs to list")] = 100,
    *,
    store: StoreChoice,
) -> None:
    """A table of runs: status, terminal state, selection, last update. --json prints a list of objects."""
    unknown = sorted(set(state or []) - set(_STATES))
    if unknown:
        raise OperatorError(f"unknown --state {', '.join(unknown)}: use one of {', '.join(_STATES)}", EXIT_USAGE)
    opened = store.open()
    records = [get_record(opened, run_id)] if run_id else list(opened.store.list_runs(limit=limit))
    if state:
        wanted = set(state)
        records = [
            r for r in records if r.status.value in wanted or (r.terminal_state and r.terminal_state.value in wanted)
        ]
    rows = [status_row(r) for r in records]
    if store.as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    console = _console()
    console.print(status_table(records, f"runs in {opened.where}", console.width))
    if not records:
        console.print("no runs match" if state else "no runs yet: `rlcleanup run RUN_ROOT` processes one")


# Below this many columns the table drops "updated" and shortens headers. A run id is never wrapped nor cut (it is
# what a person copies into the next command): on a narrow terminal the other columns give way, cut with an
# ellipsis, the selection first (issue 47).
_WIDE = 110


def status_table(records: list[CompletionRecord], title: str, width: int) -> Any:
    from rich import box
    from rich.table import Table

    wide = width >= _WIDE
    table = Table(
        title=_cell(title),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    longest = max((len(r.run_id) for r in records), default=12)
    table.add_column("run id", no_wrap=True, overflow="ignore", min_width=max(12, longest))
    for col in ("status", "terminal state" if wide else "terminal"):
        table.add_column(col, no_wrap=True, overflow="ellipsis", min_width=4)
    table.add_column("selection", no_wrap=True, overflow="ellipsis", ratio=1)  # gives way first
    errors = wide or any(r.errors for r in records)  # narrow: the column only when some run has errors
    if errors:
        table.add_column("errors" if wide else "err", no_wrap=True, justify="right")
    if wide:
        table.add_column("updated", no_wrap=True)
    for r in records:
        tone = _TONE.get(r.status.value, "")
        row = [
            _cell(r.run_id),
            f"[{tone}]{r.status.value}[/]" if tone else r.status.value,
            r.terminal_state.value if r.terminal_state else "—",
            _cell(_selection(r)),
            *([str(len(r.errors)) if r.errors else ""] if errors else []),
        ]
        table.add_row(*row, *([r.updated_at.strftime("%Y-%m-%d %H:%M:%S UTC")] if wide else []))
    return table


def _stage_table(snap: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    table = Table(title=_cell(f"{snap['run_id']}: {snap['status']}"), title_justify="left", show_edge=False)
    for col in ("stage", "done", "running", "progress"):
        table.add_column(col)
    for st in snap["stages"]:
        total = st["total"]
        bar = ProgressBar(total=float(total or 1), completed=float(st["done"] if total else 0), width=30)
        table.add_row(
            _cell(st["name"]), f"{st['done']}/{total if total is not None else '?'}", str(st["running"] or ""), bar
        )
    footer = _cell(f"errors: {snap['errors']}") if snap["errors"] else ""
    return Group(table, footer) if footer else table


def watch(
    run_id: Annotated[str, run_id_argument("the run to follow")],
    interval: Annotated[float, typer.Option(min=0.05, help="seconds between polls")] = 1.0,
    timeout: Annotated[float, typer.Option(min=0, help="give up (exit 3) after this many seconds")] = 1800.0,
    db: DbOption = None,
    backend: BackendOption = None,
    project: ProjectOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON snapshot per line, on every change")] = False,
) -> None:
    """Follow a run's steps live (claims and results in the record store) until its record is finished.

    Exits 0 when the record is finished, 3 when it finished as `failed` or the timeout passed first."""
    from rlcleanup.cli.progress import snapshot
    from rlcleanup.cli.stores import step_states

    opened = open_store(backend_name(backend), db_path(db), project)
    deadline = time.monotonic() + timeout
    # Right after `emit` the record does not exist yet (classify creates it): wait for it, like for the rest.
    record = opened.store.get(run_id)
    if record is None and not as_json:
        typer.echo(f"waiting for the record of {run_id} in {opened.where} (up to {timeout:g}s)…", err=True)
    while record is None:
        if time.monotonic() >= deadline:
            raise not_found(
                opened,
                run_id,
                f"no record for run {run_id!r} appeared in {opened.where} within {timeout:g}s (was the event emitted"
                " to this stack? `rlcleanup status` lists the runs it has)",
                EXIT_FAILURE,
            )
        time.sleep(interval)
        record = opened.store.get(run_id)

    def poll() -> dict[str, Any]:
        current = opened.store.get(run_id) or record
        assert current is not None
        return snapshot(current, step_states(opened, run_id))

    snap, last = poll(), None
    live = None
    if not as_json:
        from rich.live import Live

        live = Live(_stage_table(snap), console=_console(), auto_refresh=False)
        live.start()
    try:
        while True:
            if as_json and snap != last:
                typer.echo(json.dumps(snap), nl=True)
            elif live is not None:
                live.update(_stage_table(snap), refresh=True)
            last = snap
            if snap["finished"] or time.monotonic() >= deadline:
                break
            time.sleep(interval)
            snap = poll()
    finally:
        if live is not None:
            live.stop()
    if live is not None and snap["finished"]:
        from rlcleanup.report.verdict import build_verdict

        final = opened.store.get(run_id) or record
        typer.echo(f"\n{neutralise(build_verdict(final).line, keep_newlines=False)}")
    if not snap["finished"]:
        raise OperatorError(f"run {run_id} not finished after {timeout:g}s (status {snap['status']})", EXIT_FAILURE)
    if snap["status"] == RecordStatus.failed.value:
        raise OperatorError(
            f"run {run_id} finished as failed: `rlcleanup show {run_id}` lists its errors", EXIT_FAILURE
        )


def report(
    run_id: Annotated[str, run_id_argument("the run to report on")],
    fmt: Annotated[ReportFormat, typer.Option("--format", help="output format")] = ReportFormat.md,
    out: Annotated[
        Path | None, typer.Option("--out", help="write report.<ext> (+ timeline.png) into this directory")
    ] = None,
    db: DbOption = None,
    backend: BackendOption = None,
    project: ProjectOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="same as --format json")] = False,
    every_row: Annotated[
        bool, typer.Option("--all", help="every candidate on its own row (identical ones are folded into ranges)")
    ] = False,
    web: Annotated[
        bool,
        typer.Option(
            "--web", help="open the HTML report in a web browser ($BROWSER, else the system's); prints its path"
        ),
    ] = False,
) -> None:
    """Render a run's completion record: the verdict line, then the evidence, with the chain timeline.

    Without --out the report goes to stdout (Markdown then omits the picture; HTML inlines it as SVG). --web
    writes report.html (into --out, else $XDG_CACHE_HOME/rlcleanup/reports/RUN_ID/) and opens it."""
    from rlcleanup.report import load_inputs, render_report
    from rlcleanup.runtime.backends import open_storage

    if web:
        if as_json or fmt is not ReportFormat.md:
            raise OperatorError("--web opens the HTML report: leave out --format and --json", EXIT_USAGE)
        fmt, out = ReportFormat.html, out or _web_dir(run_id)
    if as_json:
        fmt = ReportFormat.json
    record = get_record(open_store(backend_name(backend), db_path(db), project), run_id)
    inputs = load_inputs(open_storage(), record)
    # The picture costs ~1 s of matplotlib: draw it only where it will be seen.
    kind = fmt.value
    rendered = render_report(
        inputs, with_timeline=kind == "html" or (kind == "md" and out is not None), every_row=every_row
    )
    image = "timeline.png" if rendered.timeline is not None and out is not None else None
    if kind == "json":
        text = json.dumps(rendered.as_json(), indent=2)
    elif kind == "html":
        text = rendered.html()
    else:
        text = rendered.markdown(image)
    if out is None:
        typer.echo(neutralise(text), nl=not text.endswith("\n"))
        return
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"report.{kind}"
    target.write_text(neutralise(text), encoding="utf-8")
    typer.echo(str(target))
    if image and rendered.timeline is not None:
        (out / image).write_bytes(rendered.timeline.png)
        typer.echo(str(out / image))
    if web:
        _open_in_browser(target)


def _web_dir(run_id: str) -> Path:
    """The run's own directory under the reports cache: its id made one safe path segment (never a way out)."""
    from rlcleanup.paths import reports_dir

    return reports_dir() / (re.sub(r"[^A-Za-z0-9._-]", "_", run_id).lstrip(".") or "_")


def _open_in_browser(report_html: Path) -> None:
    """The standard library's browser choice (webbrowser: $BROWSER first, then the desktop's); a machine with none
    says so with the file's URL to open elsewhere, exit 3."""
    import webbrowser

    url = report_html.resolve().as_uri()
    if not webbrowser.open(url):
        raise OperatorError(f"no web browser found to open {url} (set BROWSER, or open it yourself)", EXIT_FAILURE)
    typer.echo(f"opened {url} in the browser", err=True)


def register(app: typer.Typer) -> None:
    for command in (status, watch, report):
        app.command(epilog=EXIT_CODES)(operator_errors(command))


__all__ = ["OpenStore", "register"]
