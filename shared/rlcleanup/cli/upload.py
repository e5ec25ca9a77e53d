"""Upload a sample run into a bucket through the wiring's storage: the local stack's (or a test's) GCS or S3.

`python -m rlcleanup.cli.upload LOCAL_DEST BUCKET PREFIX [--rename NAME] [--status-last]` prints the run URI; a
plain BUCKET is a GCS bucket, `s3://BUCKET` the S3 one (the stack's: its RLCLEANUP_S3_ENDPOINT_STACK). The same
upload is `rlcleanup sample-run DIR --upload-to URI` (cli/samples_cmd.py).
The upload itself is `rlcleanup.samples.upload.upload_sample_run_to`, which writes through the storage port; this
face only chooses the storage (the wiring's router, its gs:// backend bound to a given client if any).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlcleanup.runtime.backends import open_storage
from rlcleanup.samples.upload import upload_sample_run_to


def gs_root(bucket: str, prefix: str) -> str:
    """`bucket` (a GCS bucket's name, or `<scheme>://bucket`) and `prefix` as one URI."""
    base = bucket.rstrip("/") if "://" in bucket else f"gs://{bucket}"
    return f"{base}/{prefix.strip('/')}" if prefix.strip("/") else base


def upload_sample_run(
    storage_client: Any | None,
    local_dest: Path,
    bucket: str,
    prefix: str,
    *,
    rename: str | None = None,
    status_last: bool = False,
) -> str:
    """upload_sample_run_to gs://bucket/prefix, through a google-cloud-storage client (tests, benches, the local
    stack's emulator) or, with None, the client the settings make (STORAGE_EMULATOR_HOST honoured)."""
    storage = open_storage(gcs_client=storage_client)
    return upload_sample_run_to(storage, local_dest, gs_root(bucket, prefix), rename=rename, status_last=status_last)


def main(argv: list[str] | None = None) -> int:
    """`python -m rlcleanup.cli.upload LOCAL_DEST BUCKET PREFIX [--rename NAME]`: prints the run URI."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("local_dest", type=Path)
    ap.add_argument("bucket")
    ap.add_argument("prefix")
    ap.add_argument("--rename", default=None)
    ap.add_argument("--status-last", action="store_true", help="Marin's order: status RUNNING, files, token")
    args = ap.parse_args(argv)
    run_uri = upload_sample_run(
        None, args.local_dest, args.bucket, args.prefix, rename=args.rename, status_last=args.status_last
    )
    print(run_uri)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
