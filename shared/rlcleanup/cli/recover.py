"""`rlcleanup recover RUN_ID`: re-drive a run the record store lost, from the event that started it.

When a stage finds its run's record gone (the Firestore emulator restarted empty), the record is written again,
`failed` with `record_store_lost`, and the event that started the run, which every stage message carries, is kept
beside it (runtime/recovery.py). This command publishes that event again: the operator supplies nothing but the id
the record and the error name. The sweep does the same on its next records pass.
"""

from __future__ import annotations

import json

import typer

from rlcleanup.cli.operator import EXIT_CODES, operator_errors
from rlcleanup.cli.options import RunIdArg, StoreChoice, store_options
from rlcleanup.cli.stores import EXIT_NOT_FOUND, OperatorError
from rlcleanup.runtime.backends import StoreBackend
from rlcleanup.textsafe import neutralise


@store_options
def recover(run_id: RunIdArg, *, store: StoreChoice) -> None:
    """Re-drive a run the record store lost (its record `failed` with record_store_lost) from scratch, with the
    event that started it: on Firestore published on job-events (the stack's or the project's Pub/Sub), on the
    SQLite records file run by the embedded pipeline. Preserved evidence is reused."""
    from rlcleanup.runtime.recovery import NotLost, lost_run_event

    opened = store.open()
    try:
        event = lost_run_event(opened.store, run_id)
    except NotLost as exc:
        raise OperatorError(str(exc), EXIT_NOT_FOUND) from exc
    if opened.backend == StoreBackend.sqlite and opened.db_path is not None:
        from rlcleanup.paths import default_preserve_root
        from rlcleanup.runtime.embedded import EmbeddedStack

        EmbeddedStack.create(opened.db_path, str(default_preserve_root())).emit(event)
        where = f"the embedded pipeline over {opened.where}"
    else:
        from rlcleanup.runtime.backends import open_bus
        from rlcleanup.runtime.topology import load_topology

        bus = open_bus(store.project)
        topic = load_topology().entry_topic  # where job events enter the pipeline
        message_id = bus.publish(topic, event.model_dump_json().encode(), {"source": event.source})
        where = f"{topic} (message {message_id})"
    if store.as_json:
        typer.echo(json.dumps({"run_id": run_id, "event": event.model_dump(mode="json"), "sent_to": where}, indent=2))
        return
    typer.echo(neutralise(f"re-drove {run_id}: {event.source} {event.state} for {event.run_uri} sent to {where}"))


def register(app: typer.Typer) -> None:
    app.command(epilog=EXIT_CODES)(operator_errors(recover))
