"""Secret-scan throughput over the big run's logs (issue 13 item 4): the pre-filtered scan against the slow path
(every detect-secrets plugin on every view of every line, `secrets.reference_findings`), in one run.

Builds the large run (CI scale: 16 MiB of logs; `--full`: the issue's 1 GiB), plants known secrets in its plain,
base64, JSON-escaped, concatenated and continued forms into one log, then
- scans every log file with the fast scan (`scan_objects`, exactly what publish runs on the staged copy);
- runs the slow path over a slice of the logs (it is ~1 ms a view; the whole run would take hours) and the fast
  scan over the same slice, and says whether their findings are identical.
Prints MB/s per core (CPU seconds; the scan is single-threaded), the ratio, and the load average around it.
Nothing is asserted on time (tests/unit/test_secret_prefilter.py holds the differential tests).
Run: .venv/bin/python bench/bench_secret_scan.py [--full] [--slice-mb MB]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import build_run, figure, fmt_bytes
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority import secrets as S

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
PLANTED = [
    f"export HF_TOKEN={HF}",
    "wandb.login(key=" + '"' + "0123456789abcdef" * 2 + "01234567" + '")',
    "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
    "cfg " + base64.b64encode(f"HF_TOKEN={HF}".encode()).decode(),
    json.dumps({"msg": f"token {HF}"}).replace("h", "\\u0068", 1),
    f'tok = "{HF[:9]}" + "{HF[9:]}"',
    f'tok = "{HF[:9]}\\\n{HF[9:]}"',
]


def _plant(path: Path) -> None:
    """Known secrets spread through one log (every 2,000 lines), so both paths have something to find."""
    lines = path.read_text(errors="replace").split("\n")
    for k, secret in enumerate(PLANTED):
        lines.insert(min(len(lines), 1000 + 2000 * k), secret)
    path.write_text("\n".join(lines))


def _logs(root: Path) -> list[Path]:
    """Every file under a `logs` directory of the run (the temp root holds them, beside the durable one)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and "logs" in p.relative_to(root).parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--run", type=Path, help="a directory holding a run's logs, instead of building one")
    ap.add_argument("--slice-mb", type=float, default=1.0, help="MB of log text the slow path scans")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.run:
            root = args.run
        else:
            root = Path(tmp)
            _run, _spec, secs = build_run(root, args.full, exports=1)
            print(f"built the {'full' if args.full else 'ci'} run in {secs:.1f} s")
        logs = _logs(root)
        biggest = max(logs, key=lambda p: p.stat().st_size)
        if not args.run:
            _plant(biggest)
        total = sum(p.stat().st_size for p in logs)
        print(f"{len(logs)} log files, {fmt_bytes(total)}; secrets planted in {biggest.name}")
        storage = LocalStorage(checksums=False)
        infos = [i for i in (storage.stat(str(p)) for p in logs) if i is not None]

        load0 = os.getloadavg()[0]
        cpu0, t0 = time.process_time(), time.perf_counter()
        report = S.scan_objects(storage, infos)
        fast_cpu, fast_wall = time.process_time() - cpu0, time.perf_counter() - t0
        fast_mbs = total / 1e6 / fast_cpu

        # The slice: the lines around the planted secrets, up to --slice-mb.
        data = biggest.read_bytes()
        cut = data[: int(args.slice_mb * 1e6)]
        text = S._decode(data if len(cut) == len(data) else cut[: cut.rfind(b"\n") + 1])
        cpu0 = time.process_time()
        slow = S.reference_findings(text)
        slow_cpu = time.process_time() - cpu0
        cpu0 = time.process_time()
        fast_slice = {(f.line, f.rule) for f in S.scan_string(text, "slice")}
        slice_cpu = time.process_time() - cpu0
        load1 = os.getloadavg()[0]
        slow_mbs = len(text.encode()) / 1e6 / slow_cpu

        print(
            f"fast scan (RE2 pre-filter, detect-secrets on candidate lines): {fmt_bytes(total)} in {fast_cpu:.1f} "
            f"CPU s ({fast_wall:.1f} s wall) = {fast_mbs:.1f} MB/s per core; {len(report.findings)} findings, "
            f"{len(report.refused)} refused"
        )
        print(
            f"slow path (every plugin on every view of every line): {len(text) / 1e6:.2f} MB in {slow_cpu:.1f} "
            f"CPU s = {slow_mbs:.2f} MB/s per core; fast on the same slice {slice_cpu:.2f} CPU s"
        )
        print(f"ratio fast/slow: {fast_mbs / slow_mbs:.0f}x")
        print(f"same findings on the slice: {fast_slice == slow} ({len(slow)} findings: {sorted(slow)})")
        print(f"load average (1 min) before / after: {load0:.2f} / {load1:.2f} on {os.cpu_count()} CPUs")
        figure("secret scan MB/s per core", f"{fast_mbs:.1f}", ">= 50")
        figure("secret scan fast / slow path", f"{fast_mbs / slow_mbs:.0f}x, same findings: {fast_slice == slow}")
        if fast_slice != slow:
            sys.exit(1)


if __name__ == "__main__":
    main()
