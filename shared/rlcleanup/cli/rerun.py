"""Bad settings never overwrite a good record (issue 47 item 6): `run` checks its preserve target before anything
is written, and `run --rerun` puts the record it was asked to redo back (with its claims) when the rerun cannot
finish, keeping the attempt as history beside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlcleanup.cli import maintenance
from rlcleanup.cli.stores import EXIT_FAILURE, EXIT_USAGE, open_store
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.records import SetAside
from rlcleanup.runtime.backends import OpenStore, StoreBackend, open_storage
from rlcleanup.uris import LOCAL_SCHEME, scheme

# Where `run` can preserve evidence: the two backends the capture's write-once copies and the sealed manifest are
# built and tested for (README: "--preserve-to local paths or gs://").
PRESERVE_SCHEMES = (LOCAL_SCHEME, "gs")


def preserve_target_problem(preserve: str) -> tuple[str, int] | None:
    """Why `preserve` cannot take a run's evidence (and the exit code), checked before anything is written: an
    unsupported scheme (usage), a bucket that does not exist or cannot be listed (failure)."""
    kind = scheme(preserve)
    if kind not in PRESERVE_SCHEMES:
        return (
            f"--preserve-to {preserve}: {kind}:// is not a supported preserve target; use a local directory or "
            "gs://bucket/prefix. Nothing was written",
            EXIT_USAGE,
        )
    if kind == LOCAL_SCHEME:
        return None
    try:
        next(iter(open_storage().list(preserve.rstrip("/") + "/")), None)
    except Exception as exc:
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        bucket = preserve.split("://", 1)[1].split("/", 1)[0]
        if type(exc).__name__ == "NotFound" or " 404 " in f" {exc} ":
            text = f"bucket gs://{bucket} does not exist (create it: `gcloud storage buckets create gs://{bucket}`)"
        return f"--preserve-to {preserve} cannot be written: {text}. Nothing was written", EXIT_FAILURE
    return None


@dataclass
class Rerun:
    """A `run --rerun` under way: the record it redoes, archived, and every row of it, to put back if needed."""

    opened: OpenStore
    run_id: str
    kept: str  # where the old record is kept as history
    old: CompletionRecord
    set_aside: SetAside  # its record, claims and events as they were

    def finished(self, record: CompletionRecord | None) -> bool:
        """Whether the rerun replaced the record with one that finished (not failed, not left in progress) or
        the record it redid had not finished either."""
        if self.old.status in (RecordStatus.failed, RecordStatus.in_progress):
            return True
        return record is not None and record.status not in (RecordStatus.failed, RecordStatus.in_progress)

    def undo(self, attempt: CompletionRecord | None) -> str:
        """Put the redone record back as it was (record, claims, events); the attempt is kept as history."""
        kept_attempt = maintenance.archive(self.opened, attempt) if attempt is not None else None
        self.opened.store.put_back(self.set_aside)
        where = f"; the attempt is kept as {kept_attempt}" if kept_attempt else ""
        return f"the record of {self.run_id} was left as it was ({self.old.status.value}){where}"


def prepare_rerun(uri: str, db_file: Path) -> Rerun | None:
    """Archive the run's record (if any), remember its rows, and clear its step claims so every step runs again."""
    from rlcleanup.runtime.embedded import bound_run_id_of

    opened = open_store(StoreBackend.sqlite, db_file, None, create=True)  # `run` writes SQLite records
    run_id = bound_run_id_of(opened.store, open_storage(), uri)
    old = opened.store.get(run_id) if run_id else None
    if old is None or run_id is None:
        return None
    kept = maintenance.archive(opened, old)
    return Rerun(opened, run_id, kept, old, maintenance.reset_for_rerun(opened, run_id))
