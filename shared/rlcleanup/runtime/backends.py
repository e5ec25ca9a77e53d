"""The backends a face works with (the CLI, the local stack, the sample upload), built here and nowhere else.

Faces never import an adapter: a command asks this module for its record store (`open_store`: the one place that
chooses SQLite or Firestore, with one wording for every way that choice can fail), its object storage
(`open_storage`: the registry-backed router, any registered scheme), a bus to publish on (`open_bus`: Pub/Sub,
the emulator honoured), and whether a URI names a registered storage scheme (`check_scheme`). The handlers get
theirs from `runtime/ports.py` and `runtime/embedded.py`.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from rlcleanup.errors import PermanentError
from rlcleanup.ports.bus import Bus
from rlcleanup.ports.records import IdempotencyStore, RunRecords
from rlcleanup.ports.storage import SchemeAwareStorage
from rlcleanup.settings import platform

DEFAULT_PROJECT = "rlcleanup-local"  # the local stack's project: where a publish goes when none is configured


class StoreSetupError(PermanentError):
    """The record store asked for cannot be opened; the message names the fix."""


class NoRecordsDatabase(StoreSetupError):
    """A SQLite records file that does not exist (a read command before any run was processed)."""

    def __init__(self, db: Path) -> None:
        super().__init__(
            "no_records_database",
            f"no records database at {db}: process a run first (`rlcleanup run RUN_ROOT --db {db}`), pass --db "
            "PATH, or use --backend firestore",
        )


class StoreChoiceInvalid(StoreSetupError):
    """A backend nobody implements, or Firestore without a project: a usage error."""

    def __init__(self, message: str) -> None:
        super().__init__("store_choice_invalid", message)


class StoreUnreachable(StoreSetupError):
    """Firestore chosen but not reachable from here: the emulator is down, or there are no credentials."""

    def __init__(self, message: str) -> None:
        super().__init__("store_unreachable", message)


class BusUnreachable(PermanentError):
    """PUBSUB_EMULATOR_HOST names an emulator nobody answers at (a stopped stack whose variables stayed set)."""

    def __init__(self, message: str) -> None:
        super().__init__("bus_unreachable", message)


# The fix for an emulator variable that outlived its stack: `stack down` prints the `unset` line for the shell.
STACK_FIX = (
    'start the stack (`eval "$(rlcleanup stack up)"`) or, if you stopped it, clear its variables '
    '(`eval "$(rlcleanup stack down)"`)'
)


class StorageUnreachable(PermanentError):
    """STORAGE_EMULATOR_HOST names a GCS emulator nobody answers at: a gs:// URI would be retried for minutes."""

    def __init__(self, message: str) -> None:
        super().__init__("storage_unreachable", message)


def check_storage_reachable(*uris: str | None) -> None:
    """StorageUnreachable, at once (one TCP connect), when a gs:// URI is to be read or written through a storage
    emulator that is gone (a stopped stack whose STORAGE_EMULATOR_HOST stayed set): the GCS client would retry it
    for about two minutes and end in a raw RetryError. Firestore and Pub/Sub are checked the same way."""
    emulator = platform().storage_emulator_host
    if not emulator or not any(u is not None and u.startswith("gs://") for u in uris):
        return
    if not _emulator_reachable(emulator):
        raise StorageUnreachable(
            emulator_down("GCS storage", "STORAGE_EMULATOR_HOST", emulator, "use real GCS (with credentials)")
        )


def emulator_down(service: str, variable: str, host: str, without: str) -> str:
    """One wording for every emulator a command found dead: where, which variable, and the fix."""
    return f"the {service} emulator at {host} ({variable}) is not reachable: {STACK_FIX} to {without}"


class StoreBackend(StrEnum):
    """The record stores a face can open: the CLI's `--backend` choices."""

    sqlite = "sqlite"
    firestore = "firestore"


@dataclass
class OpenStore:
    """A record store and the idempotency store over the same backend, and how to name it in a message."""

    store: RunRecords
    claims: IdempotencyStore
    where: str  # for messages: "SQLite .rlcleanup/records.db" / "Firestore project p (emulator localhost:8080)"
    backend: str
    db_path: Path | None = None


def chosen_backend(backend: str | None) -> str:
    """The record store a command uses: the one asked for, else Firestore when FIRESTORE_EMULATOR_HOST is set,
    else SQLite (the embedded default)."""
    return backend or (StoreBackend.firestore if platform().firestore_emulator_host else StoreBackend.sqlite)


def _emulator_reachable(host: str, timeout: float = 1.5) -> bool:
    """A TCP connect within `timeout`: a client library would retry a dead emulator for 30 s and more."""
    name, _, port = host.removeprefix("http://").removeprefix("https://").rstrip("/").rpartition(":")
    try:
        with socket.create_connection((name or "localhost", int(port or 8080)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _check_credentials(project: str) -> None:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        google.auth.default()
    except DefaultCredentialsError as exc:
        raise StoreUnreachable(
            f"no Google Cloud credentials to read Firestore project {project}: set GOOGLE_APPLICATION_CREDENTIALS "
            "to a service-account key file (or run `gcloud auth application-default login`); for the local stack "
            "set FIRESTORE_EMULATOR_HOST instead (`eval $(rlcleanup stack up)`)"
        ) from exc


def open_store(backend: str | None, db: Path, project: str | None, *, create: bool = False) -> OpenStore:
    """The record store `backend` names (None: `chosen_backend`). SQLite reads `db`, which must exist unless
    `create` (a command that writes the first record or approver); Firestore needs a project (`project`, else
    GOOGLE_CLOUD_PROJECT) and is checked reachable before any command waits on it. Raises a StoreSetupError."""
    chosen = chosen_backend(backend)
    if chosen == StoreBackend.sqlite:
        if not create and not db.exists():
            raise NoRecordsDatabase(db)
        from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords

        return OpenStore(SqliteRunRecords(db), SqliteIdempotencyStore(db), f"SQLite {db}", StoreBackend.sqlite, db)
    if chosen != StoreBackend.firestore:
        raise StoreChoiceInvalid(f"unknown backend {chosen!r}: use {' or '.join(StoreBackend)}")
    project = project or platform().project
    if not project:
        raise StoreChoiceInvalid(
            "Firestore needs a project: set GOOGLE_CLOUD_PROJECT (`eval $(rlcleanup stack up)` does) or pass --project"
        )
    emulator = platform().firestore_emulator_host
    if emulator:
        if not _emulator_reachable(emulator):
            raise StoreUnreachable(
                emulator_down("Firestore", "FIRESTORE_EMULATOR_HOST", emulator, "read the SQLite records")
            )
        where = f"Firestore project {project} (emulator {emulator})"
    else:
        _check_credentials(project)
        where = f"Firestore project {project}"
    from rlcleanup.adapters.firestore_records import firestore_stores

    return OpenStore(*firestore_stores(project), where, StoreBackend.firestore)


def open_storage(gcs_client: Any | None = None) -> SchemeAwareStorage:
    """Object storage for every registered scheme (the router), each backend made on first use. `gcs_client`: a
    google-cloud-storage client to serve gs:// with (a test's or the local stack's emulator-bound one)."""
    from rlcleanup.adapters.storage_router import RoutingStorage

    if gcs_client is None:
        return RoutingStorage()
    from rlcleanup.adapters.gcs_storage import GcsStorage

    return RoutingStorage({"gs": GcsStorage(gcs_client)})


def check_scheme(uri: str) -> None:
    """Raise UnknownSchemeError (naming the known schemes) for a URI no storage backend is registered for: a face
    reports it as a usage error rather than reading an `s3://...` run as an empty local directory."""
    from rlcleanup.adapters.storage_registry import BUILTIN

    BUILTIN.for_uri(uri)


def open_bus(project: str | None = None) -> Bus:
    """Pub/Sub in `project` (else GOOGLE_CLOUD_PROJECT, else the local stack's); PUBSUB_EMULATOR_HOST honoured and
    checked reachable first (BusUnreachable), as `open_store` checks Firestore's."""
    from rlcleanup.adapters.pubsub_bus import PubSubBus

    emulator = platform().pubsub_emulator_host
    if emulator and not _emulator_reachable(emulator):
        raise BusUnreachable(emulator_down("Pub/Sub", "PUBSUB_EMULATOR_HOST", emulator, "work without the stack"))

    return PubSubBus(project=project or platform().project or DEFAULT_PROJECT)
