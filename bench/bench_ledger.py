"""The storage ledger on the big run (issue 40): listings and seconds to measure what one run holds, by class.

Writes the big run with the large generator (`samples/large.py`, as bench/bench_big_run.py does; local files), builds
the record the pipeline would hold for it (run root, temp root, every export as a candidate, a resume step), and
times `authority/storage_ledger.measure` over it: the listing calls it makes (one per root, plus the run's
quarantine), the objects it classifies and the wall seconds (median of --repeat). Nothing is asserted.
Run: .venv/bin/python bench/bench_ledger.py [--scale ci|medium|large] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.authority.storage_ledger import measure
from rlcleanup.models.record import Candidate, CompletionRecord, ResumeSafety
from rlcleanup.models.vocab import CandidateState
from rlcleanup.samples.large import SCALES, write_spec


def _record(root: Path, dest: Path) -> CompletionRecord:
    ckpts = next(p for p in dest.rglob("checkpoints") if p.is_dir())
    exports = sorted((root / "exports").glob("global_step_*/policy"), key=lambda p: int(p.parent.name.split("_")[-1]))
    steps = [int(p.parent.name.split("_")[-1]) for p in exports]
    return CompletionRecord(
        run_id=root.parent.name,
        run_uri=str(root),
        temp_root=str(ckpts.parent),
        candidates=[
            Candidate(step=s, uri=str(p), state=CandidateState.valid, valid=True)
            for s, p in zip(steps, exports, strict=True)
        ],
        resume_safety=ResumeSafety(safe=True, from_step=max(steps)),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", default="ci", choices=sorted(SCALES))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as tmp:
        dest = Path(tmp)
        started = time.perf_counter()
        root = write_spec(dest, SCALES[args.scale])
        written = time.perf_counter() - started
        record = _record(root, dest)
        print(f"scale {args.scale}: run written in {written:.1f} s")
        # The local adapter hashes small files while listing (CRC32C/MD5 up to its bound); the ledger needs sizes
        # only, as GCS/S3 listings give them for free: both are timed.
        # Through the router, as the pipeline reads it: prices are what the scheme's registration declares.
        local = (("local, checksums", LocalStorage()), ("local, sizes only", LocalStorage(False)))
        for label, storage in ((name, RoutingStorage({"file": adapter})) for name, adapter in local):
            seconds = []
            ledger = None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                ledger = measure(storage, record, "bench", datetime.now(UTC))
                seconds.append(time.perf_counter() - t0)
            assert ledger is not None
            print(
                f"ledger ({label}): {ledger.objects} objects, {ledger.bytes} bytes, {ledger.listings} listings per "
                f"run, {statistics.median(seconds):.3f} s median of {args.repeat} "
                f"({min(seconds):.3f}-{max(seconds):.3f})"
            )
        for c in ledger.classes:
            print(f"  {c.name:20s} {c.objects:7d} objects {c.bytes:14d} B  ${c.monthly_usd:.4f}/month")


if __name__ == "__main__":
    main()
