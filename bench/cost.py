"""What a cleanup costs: sums the function accounting lines of one run and prices them with bench/prices.json.

Inputs are the per-invocation accounting lines (runtime/functions.py): wall seconds, the process's CPU seconds
before and after, and the running totals of billable requests the process made (ports/usage.py, counted in the
adapters). Locally every function is one process that serves only this run, so per function:
  invocations      the accounting lines;
  billed vCPU-s    sum of each invocation's wall time rounded up to 100 ms, x the vCPU Cloud Run gives the
                   function's memory limit (request-based billing: only while a request is handled);
  GiB-s            the same wall times x the memory limit in GiB;
  CPU-s used       process CPU from the first invocation's start to the last one's end (cold-start import
                   before it is shown apart);
  requests         the largest running total of each counter (they only grow).
Caveat: locally one process serves concurrent deliveries on 2 shared cores, so wall times (and with them the
billed seconds) are upper bounds; a Cloud Run instance of 0.333 vCPU would be slower per CPU-second used.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from _common import figure
from rlcleanup.ports import usage
from rlcleanup.runtime.topology import FunctionSpec

PRICES = json.loads((Path(__file__).resolve().parent / "prices.json").read_text())


def vcpu_for(memory_mib: float) -> float:
    table = {float(k): float(v) for k, v in PRICES["cloud_run_functions"]["vcpu_by_memory_mib"].items()}
    fitting = [mib for mib in sorted(table) if mib >= memory_mib]
    return table[fitting[0] if fitting else max(table)]


def function_usage(spec: FunctionSpec, rows: list[dict[str, Any]]) -> dict[str, float]:
    step = PRICES["cloud_run_functions"]["billing_granularity_seconds"]
    billed = sum(math.ceil(float(r["invocation_seconds"]) / step - 1e-9) * step for r in rows)
    out: dict[str, float] = {
        "invocations": len(rows),
        "billed_seconds": billed,
        "vcpu_seconds": billed * vcpu_for(spec.memory_mib),
        "gib_seconds": billed * spec.memory_mib / 1024,
    }
    timed = [r for r in rows if "cpu_total_s" in r]
    if timed:
        start = min(float(r["cpu_before_s"]) for r in timed)
        out["cpu_seconds"] = max(float(r["cpu_total_s"]) for r in timed) - start
        out["cold_start_cpu_seconds"] = start
    for key in usage.KEYS:
        out[key] = max((float(r.get(key, 0)) for r in rows), default=0.0)
    return out


def bill(totals: dict[str, float]) -> dict[str, float]:
    run, gcs, ps, fs = (PRICES[k] for k in ("cloud_run_functions", "cloud_storage", "pubsub", "firestore"))
    return {
        "functions": totals["vcpu_seconds"] * run["vcpu_second"]
        + totals["gib_seconds"] * run["gib_second"]
        + totals["invocations"] * run["per_million_requests"] / 1e6,
        "storage": totals[usage.GCS_CLASS_A] * gcs["class_a_per_1000"] / 1000
        + totals[usage.GCS_CLASS_B] * gcs["class_b_per_1000"] / 1000,
        "pubsub": totals[usage.PUBSUB_BILLABLE_BYTES] / 2**40 * ps["per_tib"],
        "firestore": totals[usage.FIRESTORE_READS] * fs["reads_per_100k"] / 1e5
        + totals[usage.FIRESTORE_WRITES] * fs["writes_per_100k"] / 1e5
        + totals[usage.FIRESTORE_DELETES] * fs["deletes_per_100k"] / 1e5,
    }


def _cells(u: dict[str, float], cols: list[str]) -> str:
    """Counts as integers, seconds with two decimals, Pub/Sub bytes in MB."""
    out = []
    for c in cols:
        v = u.get(c, 0.0)
        if c == usage.PUBSUB_BILLABLE_BYTES:
            out.append(f"{v / 1e6:>9.2f}")
        elif c.endswith("seconds"):
            out.append(f"{v:>9.2f}" if v < 1000 else f"{v:>9,.0f}")
        else:
            out.append(f"{v:>9,.0f}")
    return "".join(out)


def report(served: list[FunctionSpec], figures: dict[str, list[dict[str, Any]]], label: str) -> dict[str, float]:
    """Print the per-function usage table and the bill; return the run's totals."""
    cols = ["invocations", "cpu_seconds", "vcpu_seconds", "gib_seconds", *usage.KEYS]
    heads = ["calls", "CPU-s", "vCPU-s", "GiB-s", "GCS A", "GCS B", "GCS free", "PS req", "PS MB", "FS r", "FS w"]
    heads.append("FS d")
    print(f"\ncost model (prices: bench/prices.json, as of {PRICES['as_of']}, list prices, no free tier)")
    print(f"{'function':<26}" + "".join(f"{h:>9}" for h in heads))
    totals: dict[str, float] = dict.fromkeys([*cols, "cold_start_cpu_seconds"], 0.0)
    for spec in served:
        rows = figures.get(spec.name) or []
        if not rows:
            continue
        u = function_usage(spec, rows)
        for k in totals:
            totals[k] += u.get(k, 0.0)
        print(f"{spec.name:<26}" + _cells(u, cols))
    print(f"{'total':<26}" + _cells(totals, cols))
    print(
        f"  CPU-s used {totals['cpu_seconds']:.1f} (+ {totals['cold_start_cpu_seconds']:.1f} of cold-start imports);"
        f" billed {totals['vcpu_seconds']:.1f} vCPU-s and {totals['gib_seconds']:.1f} GiB-s"
    )
    parts = bill(totals)
    cells_txt = ", ".join(f"{k} ${v:.6f}" for k, v in parts.items())
    print(f"  bill for this run: ${sum(parts.values()):.6f} ({cells_txt})")
    figure(
        f"cost of one cleanup ({label})",
        f"${sum(parts.values()):.4f}; {totals['cpu_seconds']:.1f} CPU-s, {totals['vcpu_seconds']:.0f} vCPU-s billed,"
        f" {totals['invocations']:.0f} invocations, {totals[usage.GCS_CLASS_A] + totals[usage.GCS_CLASS_B]:,.0f}"
        f" GCS requests",
    )
    return totals
