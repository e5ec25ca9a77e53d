"""What discovery lists: the run's structure (step directories by a delimiter listing) against the walk of every
checkpoint and export file it did before (issue 17 goal 3, work per invocation).

A/B in one run on the same run: "walk" is `discover` on a storage without a children listing, where every
children listing falls back to a recursive listing cut at the first path component (what discovery did before
435c889 for the checkpoint and export roots; it now also walks each attempt directory, which discovery names
by its children); "children" is the same `discover` on the storage as deployed. Both must give the same
layout. Counts every name the listings return (objects of recursive listings, entries of children listings)
and times `discover` (median of --repeat), on local files and on fake-gcs-server (its own process group). The
run is the large generator's shape (500 ranks x 3 attempts, 40 exports x 30 shards: 10,108 objects with
--full) with small logs: log bytes do not change what is listed. To compare commits, run this file against
another checkout's package: PYTHONPATH=<checkout>/shared .venv/bin/python bench/bench_discover.py --full.
Run: .venv/bin/python bench/bench_discover.py [--full] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import fake_gcs, figure, gcs_client
from rlcleanup.adapters.gcs_storage import GcsStorage
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.cli.upload import upload_sample_run
from rlcleanup.ports.storage import ChildPage, ObjectInfo
from rlcleanup.samples.large import SCALES, planned_objects, write_spec
from rlcleanup.steps.layout import RunLayout, discover


class Listed:
    """Counts what listings return, so both columns count every name discovery had to take in: objects from
    recursive listings here, and entries (sub-prefixes and objects) from children listings in `ListedChildren`.
    This class has no children listing: ports.storage.child_names falls back to a recursive listing (the walk)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.objects = inner, 0

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        for info in self.inner.list(prefix_uri):
            self.objects += 1
            yield info

    def __getattr__(self, name: str) -> Any:
        if name == "list_children":
            raise AttributeError(name)  # hidden, so isinstance(.., ListsChildren) is False
        return getattr(self.inner, name)


class ListedChildren(Listed):
    """The storage as deployed: its children listing, counted entry by entry."""

    def list_children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> ChildPage:
        page: ChildPage = self.inner.list_children(prefix_uri, page_token, page_size)
        self.objects += len(page.prefixes) + len(page.objects)
        return page


def measure(label: str, make: Any, run_uri: str, repeat: int) -> None:
    layouts: dict[str, RunLayout] = {}
    rows: dict[str, tuple[float, int]] = {}
    for name, children in (("walk", False), ("children", True)):
        walls, counted = [], 0
        for _ in range(repeat):
            storage = (ListedChildren if children else Listed)(make())
            t0 = time.perf_counter()
            layouts[name] = discover(storage, run_uri)  # type: ignore[arg-type]
            walls.append(time.perf_counter() - t0)
            counted = storage.objects
        rows[name] = (statistics.median(walls), counted)
    assert layouts["walk"] == layouts["children"], "the two listings gave different layouts"
    (walk_s, walk_n), (kids_s, kids_n) = rows["walk"], rows["children"]
    print(f"{label}: walk {walk_n:,} objects listed, {walk_s:.3f} s | children {kids_n:,} objects, {kids_s:.3f} s")
    print(f"  {walk_n / max(kids_n, 1):.2f}x fewer objects listed, {walk_s / kids_s:.2f}x faster")
    figure(f"discover wall, walk / children ({label})", f"{walk_s / kids_s:.2f}x")
    figure(f"objects discovery lists ({label})", f"{kids_n:,} (was {walk_n:,})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="the issue's shape: 500 ranks x 3 attempts, 40 exports")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from dataclasses import replace

    spec = replace(SCALES["large" if args.full else "ci"], log_bytes_total=4 * 1024 * 1024, model="llama-tiny")
    with tempfile.TemporaryDirectory() as tmp:
        root = write_spec(Path(tmp), spec)
        print(
            f"run: {planned_objects(spec):,} objects ({spec.ranks} ranks x {spec.attempts} attempts, "
            f"{spec.exports} exports x {spec.shards} shards)",
            flush=True,
        )
        measure("local files", lambda: LocalStorage(checksums=False), str(root), args.repeat)
        with fake_gcs() as url:
            client = gcs_client(url)
            client.create_bucket("runs")
            t0 = time.perf_counter()
            run_uri = upload_sample_run(client, Path(tmp), "runs", "bench")
            print(f"upload: {time.perf_counter() - t0:.1f} s", flush=True)
            measure(
                "fake-gcs-server", lambda: RoutingStorage({"gs": GcsStorage(gcs_client(url))}), run_uri, args.repeat
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
