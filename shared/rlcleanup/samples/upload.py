"""Put a sample run (written by `write_sample_run`) in object storage: upload the tree, rewriting its local paths.

The generator writes absolute local paths into text files (resolved config `trainer.ckpt_path`, terminal.json,
attempt records, log banners). In a bucket those must name the bucket's URIs (gs://, or any scheme the storage
registry serves), or the pipeline would look on the local disk. `upload_sample_run_to` writes through the storage
port it is given, so it works for every registered scheme; the faces hand it the wiring's storage
(`rlcleanup.cli.upload`: the GCS shorthand and `python -m rlcleanup.cli.upload`).
`rename` gives the run a new name (object keys and text alike), so one scenario can be uploaded many times as
distinct runs (distinct run ids).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlcleanup.formats.weight_files import has_weight_suffix
from rlcleanup.ports.storage import Storage, WriteOutcome

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
    storage: Storage,
    local_dest: Path,
    dest_root: str,
    *,
    rename: str | None = None,
    skip: tuple[Path, ...] = (),
    status_last: bool = False,
) -> str:
    """Upload every file under local_dest to dest_root/... (any registered scheme), rewriting local paths;
    return the run URI. `skip`: local files left out (a caller that writes them itself, in its own order).

    status_last: write in Marin's order, as a notified bucket sees a run end: `.executor_status` RUNNING first,
    every other file, then the run's real status token in its place. The port writes once and never overwrites,
    so each status write deletes what was there first: the bucket sees one new object (one OBJECT_FINALIZE) per
    write, as it does for an overwrite.
    """
    local_dest = Path(local_dest).resolve()
    base = dest_root.rstrip("/")
    rewrite = _rewriter(local_dest, base, rename)
    run_root = durable_root(local_dest)
    status = run_root / STATUS_FILE
    if not (status_last and status.is_file()):
        _upload_tree(storage, local_dest, base, rewrite, skip)
        return rewrite(str(run_root))
    status_uri = rewrite(str(status))
    _replace(storage, status_uri, b"RUNNING\n")
    _upload_tree(storage, local_dest, base, rewrite, (*skip, status))
    _replace(storage, status_uri, status.read_bytes())
    return rewrite(str(run_root))


def _replace(storage: Storage, uri: str, data: bytes) -> None:
    storage.delete(uri)
    if storage.write_if_absent(uri, data) is WriteOutcome.conflict:  # someone wrote it between the two calls
        raise FileExistsError(f"{uri} changed while the sample was uploaded: upload it under a new prefix")


def _upload_tree(
    storage: Storage, local_dest: Path, base: str, rewrite: Callable[[str], str], skip: tuple[Path, ...]
) -> None:
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
