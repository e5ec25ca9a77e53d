"""Options every command shares, so the same flag means the same thing (and completes the same) everywhere.

Fixed sets are Enums (the record stores are the wiring's `StoreBackend`): typer lists their choices in --help and offers them to shell completion.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_type_hints

import typer

from rlcleanup.paths import default_db
from rlcleanup.runtime.backends import OpenStore, StoreBackend

Result = TypeVar("Result")


class ReportFormat(StrEnum):
    md = "md"
    html = "html"
    json = "json"


DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="SQLite records file (default: $RLCLEANUP_DB, else $XDG_STATE_HOME/rlcleanup/records.db)",
        show_default=False,
    ),
]
BackendOption = Annotated[
    StoreBackend | None,
    typer.Option(help="record store (default: firestore when FIRESTORE_EMULATOR_HOST is set, else sqlite)"),
]
ProjectOption = Annotated[str | None, typer.Option(help="Firestore / Pub/Sub project (default: $GOOGLE_CLOUD_PROJECT)")]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output on stdout")]
QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="no progress on stderr (it is shown only when stderr is a terminal; stdout never has it)"
    ),
]


def db_path(db: Path | None) -> Path:
    return db if db is not None else default_db()


def backend_name(backend: StoreBackend | str | None) -> str | None:
    return None if backend is None else str(backend.value if isinstance(backend, StoreBackend) else backend)


def complete_run_id(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """Shell completion for a RUN_ID: the run ids in the record store this command would open (the --db,
    --backend and --project typed so far, else the defaults), newest first, each with its status. Completion
    never fails and never waits: no store, an unreachable one (its probe is short) or any error completes nothing."""
    from rlcleanup.cli.stores import open_store

    params = ctx.params or {}
    try:
        opened = open_store(backend_name(params.get("backend")), db_path(params.get("db")), params.get("project"))
        runs = list(opened.store.list_runs(limit=1000))
    except Exception:  # a completion that raises prints a traceback into the user's prompt
        return []
    return [(r.run_id, r.status.value) for r in runs if r.run_id.startswith(incomplete)]


def run_id_argument(help_text: str, **extra: Any) -> Any:
    """A RUN_ID argument that completes from the record store (`complete_run_id`)."""
    return typer.Argument(help=help_text, autocompletion=complete_run_id, **extra)


# The RUN_ID most commands take: one argument, one completion.
RunIdArg = Annotated[str, run_id_argument("the run id (Tab completes it from the record store)")]


def open_or_exit(backend: str | None, db: Path | None, project: str | None, *, create: bool = False) -> OpenStore:
    """The record store a command's --backend/--db/--project name, or its error on stderr and its exit code."""
    from rlcleanup.cli.stores import OperatorError, fail, open_store

    try:
        return open_store(backend_name(backend), db_path(db), project, create=create)
    except OperatorError as exc:
        fail(str(exc), exc.code)


@dataclass(frozen=True)
class StoreChoice:
    """The record store a command's --db/--backend/--project name, and whether it answers with --json."""

    db: Path | None = None
    backend: StoreBackend | None = None
    project: str | None = None
    as_json: bool = False

    def open(self, *, create: bool = False) -> OpenStore:
        """The store (an OperatorError, which `operator_errors` reports, when it cannot be opened)."""
        from rlcleanup.cli.stores import open_store

        return open_store(backend_name(self.backend), db_path(self.db), self.project, create=create)

    def open_or_exit(self, *, create: bool = False) -> OpenStore:
        return open_or_exit(backend_name(self.backend), self.db, self.project, create=create)


# The options every record-reading command takes, in the order --help lists them.
_STORE_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("db", DbOption, None),
    ("backend", BackendOption, None),
    ("project", ProjectOption, None),
    ("as_json", JsonOption, False),
)


def store_options(command: Callable[..., Result]) -> Callable[..., Result]:
    """`command(..., store: StoreChoice)` as typer sees it: --db, --backend, --project and --json, declared once
    here rather than four lines in every command (typer reads the signature this sets; the command gets one
    StoreChoice). As Click's shared-option decorators do, in typer's signature terms."""
    signature = inspect.signature(command, eval_str=True)
    own = [param for name, param in signature.parameters.items() if name != "store"]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        for name, annotation, default in _STORE_OPTIONS
    ]

    @functools.wraps(command)
    def with_store(*args: Any, **kwargs: Any) -> Result:
        chosen = {name: kwargs.pop(name, default) for name, _, default in _STORE_OPTIONS}
        return command(*args, store=StoreChoice(**chosen), **kwargs)

    hints = {k: v for k, v in get_type_hints(command, include_extras=True).items() if k != "store"}
    seen_by_typer: Any = with_store  # inspect.signature reads __signature__ first
    seen_by_typer.__signature__ = signature.replace(parameters=[*own, *added])
    with_store.__annotations__ = {**hints, **{name: annotation for name, annotation, _ in _STORE_OPTIONS}}
    return with_store
