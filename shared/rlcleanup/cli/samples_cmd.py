"""`rlcleanup sample-run`: write a realistic sample run, and optionally put it in a bucket (the local stack's GCS
or S3, or any bucket this shell's settings reach) through the storage port, as the stack's README block does."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rlcleanup.cli.options import JsonOption
from rlcleanup.cli.stores import EXIT_CODES, EXIT_FAILURE, EXIT_USAGE
from rlcleanup.cli.stores import fail as _fail


class Scale(StrEnum):
    ci = "ci"
    medium = "medium"
    large = "large"


def _upload(dest: Path, upload_to: str, rename: str | None) -> str:
    """The sample under `dest` uploaded below `upload_to` through the wiring's storage router: gs:// on
    STORAGE_EMULATOR_HOST when set, s3:// on the endpoint the S3 settings give the bucket (the stack's bucket: its
    RLCLEANUP_S3_ENDPOINT_STACK, path-style; any other: the AWS_* variables). Returns the run URI."""
    from rlcleanup.errors import PermanentError, TransientError
    from rlcleanup.ports.storage import UnknownSchemeError
    from rlcleanup.runtime.backends import check_scheme, open_storage
    from rlcleanup.samples.upload import upload_sample_run_to

    if "://" not in upload_to:
        _fail(f"--upload-to {upload_to!r} is not a bucket URI (gs://BUCKET/PREFIX or s3://BUCKET/PREFIX)", EXIT_USAGE)
    try:
        check_scheme(upload_to)
    except UnknownSchemeError as exc:
        _fail(str(exc), EXIT_USAGE)
    try:
        return upload_sample_run_to(open_storage(), dest, upload_to, rename=rename)
    except (PermanentError, TransientError, OSError) as exc:  # e.g. no such bucket, no credentials
        _fail(f"could not upload the sample to {upload_to}: {exc}", EXIT_FAILURE)


def sample_run(
    dest: Annotated[
        Path | None, typer.Argument(help="directory to write into (not needed for --scenario list)")
    ] = None,
    scenario: Annotated[str, typer.Option(help="scenario name; `--scenario list` shows them")] = "completed-resumed",
    scale: Annotated[
        Scale | None,
        typer.Option(
            help="ci (sized for the in-memory GCS emulator), medium, or large (500 ranks, 1 GiB logs, 40 70B exports)"
        ),
    ] = None,
    ranks: Annotated[int | None, typer.Option(help="with --scale: worker ranks")] = None,
    attempts: Annotated[int | None, typer.Option(help="with --scale: chained attempts")] = None,
    exports: Annotated[int | None, typer.Option(help="with --scale: 70B-shaped exports")] = None,
    log_mb: Annotated[int | None, typer.Option(help="with --scale: total log MiB")] = None,
    upload_to: Annotated[
        str | None,
        typer.Option(
            "--upload-to",
            help="also put the run under this bucket URI and print its URI there: gs://BUCKET/PREFIX or "
            "s3://BUCKET/PREFIX (the local stack's buckets reach its fake-gcs and S3 servers)",
            show_default=False,
        ),
    ] = None,
    rename: Annotated[
        str | None, typer.Option(help="with --upload-to: the run's name in the bucket (a distinct run id)")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Write a realistic sample run (Layout A unless the scenario says otherwise); prints its run root.

    --scale writes one large synthetic run instead of a scenario (sparse tensor data: little disk). --upload-to
    also puts it in a bucket through the storage port (local paths in its files become that bucket's URIs)."""
    from rlcleanup.samples.generator import SCENARIOS, write_sample_run

    if scenario == "list" or (scenario not in SCENARIOS and scale is None):
        if as_json and scenario == "list":
            typer.echo(json.dumps({"scenarios": SCENARIOS}, indent=2))
            return
        for name, text in SCENARIOS.items():
            typer.echo(f"{name:28} {text}", err=as_json)
        if scenario != "list":
            _fail(f"unknown scenario {scenario!r}", EXIT_USAGE)
        return
    if dest is None:
        _fail("missing DEST: the directory to write the sample run into", EXIT_USAGE)
    if rename is not None and upload_to is None:
        _fail("--rename names the run in the bucket: give --upload-to too", EXIT_USAGE)
    if scale is not None:
        from rlcleanup.samples.large import spec_for, write_spec

        log_bytes = log_mb * 1024 * 1024 if log_mb is not None else None
        try:
            spec = spec_for(scale.value, ranks=ranks, attempts=attempts, exports=exports, log_bytes_total=log_bytes)
            root = write_spec(dest, spec)
        except ValueError as exc:
            _fail(str(exc), EXIT_USAGE)
    else:
        root = write_sample_run(dest, scenario)
    uploaded = _upload(dest, upload_to, rename) if upload_to is not None else None
    if as_json:
        shown = {"scenario": None if scale is not None else scenario, "scale": scale.value if scale else None}
        typer.echo(json.dumps({**shown, "run_root": str(root), "uploaded_run_uri": uploaded}, indent=2))
        return
    typer.echo(uploaded or str(root))


def register(app: typer.Typer) -> None:
    app.command("sample-run", epilog=EXIT_CODES)(sample_run)
