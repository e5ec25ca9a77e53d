"""`rlcleanup storage`, `restore` and `quarantine-expire` (issue 40): what runs hold, putting a reclaim back, and
the quarantine's expiry where no bucket lifecycle rule does it (local files, the emulator stack)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from rlcleanup.cli.operator import operator_errors
from rlcleanup.cli.options import JsonOption, RunIdArg, StoreChoice, run_id_argument, store_options
from rlcleanup.cli.stores import EXIT_FAILURE, get_record
from rlcleanup.models.model_events import ModelEvent
from rlcleanup.models.record import CompletionRecord
from rlcleanup.runtime.backends import OpenStore, StoreBackend
from rlcleanup.textsafe import neutralise


def storage_rows(records: list[CompletionRecord]) -> list[dict[str, Any]]:
    """One row per run with a ledger, largest first."""
    rows = [
        {
            "run_id": r.run_id,
            "bytes": r.storage_ledger.bytes,
            "objects": r.storage_ledger.objects,
            "monthly_usd": r.storage_ledger.monthly_usd,
            "measured_at": r.storage_ledger.measured_at.isoformat(),
            "label": r.storage_ledger.label,
            "classes": {c.name: c.bytes for c in r.storage_ledger.classes},
        }
        for r in records
        if r.storage_ledger is not None
    ]
    return sorted(rows, key=lambda row: (-row["bytes"], row["run_id"]))


def _announce_restore(
    opened: OpenStore, store: StoreChoice, record: CompletionRecord, restored: list[str], now: datetime
) -> tuple[list[ModelEvent], str | None, str | None]:
    """The model-restored events of this restore, and where they were announced (the deployment's model-events
    topic, on the Pub/Sub of the Firestore project) or why not. The embedded default (SQLite) has no bus anyone
    outside this process hears: its events are shown, not sent."""
    from rlcleanup.cli.stores import open_bus
    from rlcleanup.runtime.authority_handlers import model_events_topic, publish_announcement, restore_announcements
    from rlcleanup.settings import platform

    if not restored:
        return [], None, None
    project = store.project or platform().project
    events = restore_announcements(opened.store, record, restored, now, project)
    if opened.backend != StoreBackend.firestore:
        return events, None, "the embedded default (SQLite) has no event bus; the events are shown here"
    try:
        bus = open_bus(store.project)
        for event in events:
            publish_announcement(bus, event)
    except Exception as exc:  # the restore stands (a bus down, no publisher IAM): say exactly what was not sent
        return events, None, f"{type(exc).__name__}: {str(exc)[:300]}"
    return events, model_events_topic(), None


def register(app: typer.Typer) -> None:
    @app.command()
    @operator_errors
    @store_options
    def storage(
        run_id: Annotated[str | None, run_id_argument("one run (default: every run; Tab completes it)")] = None,
        refresh: Annotated[bool, typer.Option("--refresh", help="list the runs' storage now and record it")] = False,
        limit: Annotated[int, typer.Option(help="runs to read at most")] = 1000,
        *,
        store: StoreChoice,
    ) -> None:
        """What each run holds, by class (resume checkpoints, exports, logs, ... quarantine), largest first."""
        from rlcleanup.authority.storage_ledger import measure, record_ledger
        from rlcleanup.runtime.backends import open_storage

        opened = store.open()
        records = [get_record(opened, run_id)] if run_id else list(opened.store.list_runs(limit=limit))
        if refresh:
            blobs = open_storage()
            now = datetime.now(UTC)
            for r in records:
                record_ledger(opened.store, r.run_id, measure(blobs, r, "refreshed", now))
            records = [opened.store.get(r.run_id) or r for r in records]
        rows = storage_rows(records)
        if store.as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        if not rows:
            typer.echo("no run has a storage ledger yet: `rlcleanup storage --refresh` measures them")
            return
        for row in rows:
            classes = ", ".join(f"{k} {v}" for k, v in sorted(row["classes"].items(), key=lambda kv: -kv[1]))
            typer.echo(
                neutralise(
                    f"{row['run_id']}  {row['bytes']} B  {row['objects']} objects  ${row['monthly_usd']:.4f}/month  "
                    f"({classes})"
                )
            )

    @app.command()
    @operator_errors
    @store_options
    def restore(
        run_id: RunIdArg,
        *,
        store: StoreChoice,
    ) -> None:
        """Put back, byte-exact, every object a reclaim of RUN_ID moved into quarantine (until its expiry)."""
        from rlcleanup.authority.quarantine import restore as restore_run
        from rlcleanup.authority.storage_ledger import measure, record_ledger
        from rlcleanup.runtime.backends import open_storage
        from rlcleanup.settings import QuarantineSettings, read

        opened = store.open()
        record = get_record(opened, run_id)
        blobs = open_storage()
        now = datetime.now(UTC)
        result = restore_run(blobs, opened.store, record, now, read(QuarantineSettings))
        if result.restored:
            record_ledger(opened.store, record.run_id, measure(blobs, record, "after restore", now))
        events, announced, unsent = _announce_restore(opened, store, record, result.restored, now)
        if store.as_json:
            doc = {**result.model_dump(), "events": [e.model_dump(mode="json") for e in events]}
            typer.echo(json.dumps({**doc, "announced": announced, "not_announced": unsent}, indent=2))
        else:
            typer.echo(f"restored {len(result.restored)} object(s) of {run_id}")
            for line in [*(f"  refused {r}" for r in result.refused), *(f"  expired {e}" for e in result.expired)]:
                typer.echo(neutralise(line))
            for event in events:
                said = f"announced on {announced}" if announced else f"not announced: {unsent}"
                typer.echo(neutralise(f"  model-restored {event.id} ({said})"))
        if result.refused or (events and not announced and opened.backend == StoreBackend.firestore):
            raise typer.Exit(EXIT_FAILURE)

    @app.command("quarantine-expire")
    @operator_errors
    def quarantine_expire(
        root: Annotated[str, typer.Argument(help="the bucket (gs://b, s3://b) or local directory holding the prefix")],
        as_json: JsonOption = False,
    ) -> None:
        """Delete quarantined objects older than RLCLEANUP_QUARANTINE_DAYS under ROOT/<prefix>/, nothing else (the
        lifecycle rule's work where the bucket has none)."""
        from rlcleanup.authority.quarantine import expire
        from rlcleanup.runtime.backends import open_storage
        from rlcleanup.settings import QuarantineSettings, read

        gone = expire(open_storage(), root, read(QuarantineSettings), datetime.now(UTC))
        typer.echo(json.dumps({"deleted": gone}, indent=2) if as_json else f"expired {len(gone)} quarantined object(s)")
