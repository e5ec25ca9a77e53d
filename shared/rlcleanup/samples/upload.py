"""Put a sample run (written by `write_sample_run`) in object storage: upload the tree, rewriting its local paths.

The generator writes absolute local paths into text files (resolved config `trainer.ckpt_path`, terminal.json,
attempt records, log banners). In a bucket those must name the bucket's URIs (gs://, or any scheme the storage
registry serves), or the pipeline would look on the local disk. `upload_sample_run_to` writes through the storage
port, so it works for every registered scheme; `upload_sample_run` is its GCS-client shorthand.
`rename` gives the run a new name (object keys and text alike), so one scenario can be uploaded many times as
distinct runs (distinct run ids).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlcleanup.formats.weight_files import has_weight_suffix
from rlcleanup.ports.storage import Storage, WriteOutcome
from rlcleanup.settings import platform

TEXT_SUFFIXES = (".json", ".jsonl", ".yaml", ".yml", ".txt", ".log", ".out", ".err", ".md", ".csv")
_UPLOAD_WORKERS = 8


def _is_text(path: Path) -> bool:
    if has_weight_suffix(path.name) or path.suffix == ".parquet":
        return False
    return path.suffix in TEXT_SUFFIXES or path.name.startswith(".") or path.suffix == ""


def durable_root(local_dest: Path) -> Path:
    """The single durable run root R = dest/durable/<name>/<version> of a Layout A sample."""
    roots = sorted(p for p in (local_dest / "durable").glob("*/*") if p.is_dir())
    if len(roots) != 1:
        raise ValueError(f"expected one durable run root under {local_dest}/durable, found {len(roots)}")
    return roots[0]


STATUS_FILE = ".executor_status"


def _rewriter(local_dest: Path, base: str, rename: str | None) -> Callable[[str], str]:
    """Local paths -> URIs under base (and the run's name -> rename), in object keys and text alike."""
    replacements = [(f"{local_dest}/", f"{base}/"), (str(local_dest), base)]
    if rename:
        replacements.append((durable_root(local_dest).parent.name, rename))

    def rewrite(text: str) -> str:
        for old, new in replacements:
            text = text.replace(old, new)
        return text

    return rewrite


def upload_sample_run_to(
    storage: Storage, local_dest: Path, dest_root: str, *, rename: str | None = None, skip: tuple[Path, ...] = ()
) -> str:
    """Upload every file under local_dest to dest_root/... (any registered scheme), rewriting local paths;
    return the run URI. `skip`: local files left out (a caller that writes them itself, in its own order)."""
    local_dest = Path(local_dest).resolve()
    r = durable_root(local_dest)
    base = dest_root.rstrip("/")
    rewrite = _rewriter(local_dest, base, rename)
    files = [p for p in sorted(local_dest.rglob("*")) if p.is_file()]

    def put(path: Path) -> None:
        data = path.read_bytes()
        if _is_text(path):
            with contextlib.suppress(UnicodeDecodeError):
                data = rewrite(data.decode("utf-8")).encode("utf-8")
        uri = f"{base}/{rewrite(path.relative_to(local_dest).as_posix())}"
        if storage.write_if_absent(uri, data) is WriteOutcome.conflict:
            raise FileExistsError(f"{uri} already holds other content: upload the sample under a new prefix")

    with ThreadPoolExecutor(max_workers=_UPLOAD_WORKERS) as pool:
        list(pool.map(put, [f for f in files if f not in skip]))
    return rewrite(str(r))


def upload_sample_run(
    storage_client: Any,
    local_dest: Path,
    bucket: str,
    prefix: str,
    *,
    rename: str | None = None,
    status_last: bool = False,
) -> str:
    """upload_sample_run_to gs://bucket/prefix through a google-cloud-storage client (tests, the local stack).

    status_last: write in Marin's order, as a notified bucket sees a run end: `.executor_status` RUNNING first,
    every other file, then the run's real status token over it (an overwrite, so through the client directly:
    the port's write-once upload refuses to replace content).
    """
    from rlcleanup.adapters.gcs_storage import GcsStorage
    from rlcleanup.adapters.storage_router import RoutingStorage

    base = f"gs://{bucket}/{prefix.strip('/')}" if prefix.strip("/") else f"gs://{bucket}"
    storage = RoutingStorage({"gs": GcsStorage(storage_client)})
    local_dest = Path(local_dest).resolve()
    status = durable_root(local_dest) / STATUS_FILE
    if not (status_last and status.is_file()):
        return upload_sample_run_to(storage, local_dest, base, rename=rename)
    status_uri = _rewriter(local_dest, base, rename)(str(status))
    blob = storage_client.bucket(bucket).blob(status_uri.removeprefix(f"gs://{bucket}/"))
    blob.upload_from_string(b"RUNNING\n")
    run_uri = upload_sample_run_to(storage, local_dest, base, rename=rename, skip=(status,))
    blob.upload_from_string(status.read_bytes())
    return run_uri


def main(argv: list[str] | None = None) -> int:
    """`python -m rlcleanup.samples.upload LOCAL_DEST BUCKET PREFIX [--rename NAME]`: prints the run URI."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("local_dest", type=Path)
    ap.add_argument("bucket")
    ap.add_argument("prefix")
    ap.add_argument("--rename", default=None)
    ap.add_argument("--status-last", action="store_true", help="Marin's order: status RUNNING, files, token")
    args = ap.parse_args(argv)
    from google.cloud import storage

    if platform().storage_emulator_host:
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(project=(platform().project or "rlcleanup-local"), credentials=AnonymousCredentials())
    else:
        client = storage.Client()
    run_uri = upload_sample_run(
        client, args.local_dest, args.bucket, args.prefix, rename=args.rename, status_last=args.status_last
    )
    print(run_uri)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
