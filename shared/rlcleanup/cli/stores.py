"""The record store and bus as commands open them (the wiring's `open_store`/`open_bus`, their errors mapped to exit
codes); run look-up
with close matches; and the per-step claim states `watch` polls (SQLite claims table, or Firestore
`runs/{id}/steps`)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.bus import Bus
from rlcleanup.runtime import backends
from rlcleanup.runtime.backends import (
    BusUnreachable,
    NoRecordsDatabase,
    OpenStore,
    StoreChoiceInvalid,
    StoreSetupError,
    StoreUnreachable,
)

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_FAILURE = 0, 1, 2, 3


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """One neutralised line on stderr, then the exit code (every command's refusal)."""
    import typer

    from rlcleanup.textsafe import neutralise

    typer.echo(neutralise(f"rlcleanup: {message}"), err=True)
    raise typer.Exit(code)


EXIT_CODES = "Exit codes: 0 ok, 1 not found, 2 usage (bad option, or a path that is not a run), 3 failure."


class OperatorError(Exception):
    """A one-line, actionable error and the exit code it maps to."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


# Exit code per way the record store could not be opened (the wiring words the message).
_SETUP_EXIT = {NoRecordsDatabase: EXIT_NOT_FOUND, StoreChoiceInvalid: EXIT_USAGE, StoreUnreachable: EXIT_FAILURE}


def open_store(backend: str | None, db: Path, project: str | None, *, create: bool = False) -> OpenStore:
    """The wiring's record store (runtime/backends.py chooses it), its setup errors as OperatorErrors."""
    try:
        return backends.open_store(backend, db, project, create=create)
    except StoreSetupError as exc:
        raise OperatorError(str(exc), _SETUP_EXIT.get(type(exc), EXIT_FAILURE)) from exc


def open_bus(project: str | None) -> Bus:
    """The wiring's Pub/Sub bus, checked reachable when an emulator is named (exit 3 with the fix, at once)."""
    try:
        return backends.open_bus(project)
    except BusUnreachable as exc:
        raise OperatorError(str(exc), EXIT_FAILURE) from exc


def close_matches(wanted: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Substring hits first (people type a distinctive fragment), then difflib's nearest spellings."""
    ids = list(known)
    hits = [k for k in ids if wanted.lower() in k.lower()]
    for k in difflib.get_close_matches(wanted, ids, n=n, cutoff=0.5):
        if k not in hits:
            hits.append(k)
    return hits[:n]


def not_found(opened: OpenStore, run_id: str, message: str | None = None, code: int = EXIT_NOT_FOUND) -> OperatorError:
    """ "no record for run X" with the close matches every read command offers."""
    matches = close_matches(run_id, (r.run_id for r in opened.store.list_runs(limit=1000)))
    hint = f"; did you mean {', '.join(matches)}?" if matches else "; `rlcleanup status` lists the runs"
    return OperatorError((message or f"no record for run {run_id!r} in {opened.where}") + hint, code)


def get_record(opened: OpenStore, run_id: str) -> CompletionRecord:
    record = opened.store.get(run_id)
    if record is not None:
        return record
    raise not_found(opened, run_id)


def step_states(opened: OpenStore, run_id: str) -> dict[str, dict[str, Any]]:
    """key -> {"state": running|done, "result": {...}} for every claim of the run (done and in flight)."""
    return {
        key: {"state": claim.state, "result": claim.result or {}}
        for key, claim in opened.claims.claims_of(run_id).items()
    }
