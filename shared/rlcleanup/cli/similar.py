"""`rlcleanup similar RUN_ID`: the other runs that failed the way this one did, before and after it, which came
first, and what fixed them.

Computed live from the record store (the run's signature, then the store's indexed lookups: steps/history.py), so
runs recorded after this one finished, and fixes that came later, are included. The record's own `similar_runs` is
the same lookup as it stood at wrap-up.
"""

from __future__ import annotations

import json

import typer

from rlcleanup.cli.operator import EXIT_CODES, operator_errors
from rlcleanup.cli.options import RunIdArg, StoreChoice, store_options
from rlcleanup.cli.stores import get_record
from rlcleanup.steps.history import history_lines, similar_runs
from rlcleanup.textsafe import neutralise


@store_options
def similar(run_id: RunIdArg, *, store: StoreChoice) -> None:
    """The run's failure class and signature, every other run with the same signature, before and after this one
    (newest first, at most 20 on each side; runs that ended at the same instant ordered by run id), which came first,
    and, for each, what the next completed run of its experiment changed in its configuration."""
    opened = store.open()
    record = get_record(opened, run_id)
    found = similar_runs(opened.store, record)
    if store.as_json:
        payload = {
            "run_id": record.run_id,
            "failure_class": record.failure_class.value if record.failure_class else None,
            "failure_evidence": record.failure_evidence.model_dump(mode="json") if record.failure_evidence else None,
            "signature": record.signature,
            "signature_basis": record.signature_basis.model_dump(mode="json") if record.signature_basis else None,
            "experiment": record.experiment,
            "similar_runs": [s.model_dump(mode="json") for s in found],
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    typer.echo(neutralise("\n".join([f"run {record.run_id}", *history_lines(record, found)])))


def register(app: typer.Typer) -> None:
    app.command(epilog=EXIT_CODES)(operator_errors(similar))
