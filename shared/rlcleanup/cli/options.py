"""Options every command shares, so the same flag means the same thing (and completes the same) everywhere.

Fixed sets are Enums (the record stores are the wiring's `StoreBackend`): typer lists their choices in --help and offers them to shell completion.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rlcleanup.paths import default_db
from rlcleanup.runtime.backends import StoreBackend


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


def db_path(db: Path | None) -> Path:
    return db if db is not None else default_db()


def backend_name(backend: StoreBackend | str | None) -> str | None:
    return None if backend is None else str(backend.value if isinstance(backend, StoreBackend) else backend)
