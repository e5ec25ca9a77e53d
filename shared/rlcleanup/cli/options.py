"""Options every command shares, so the same flag means the same thing (and completes the same) everywhere.

Fixed sets are Enums (the record stores are the wiring's `StoreBackend`): typer lists their choices in --help and offers them to shell completion.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from rlcleanup.paths import default_db
from rlcleanup.runtime.backends import OpenStore, StoreBackend


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
