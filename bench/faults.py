"""The fault scenarios on the emulator stack, as one command with one table (issue 48 item 3).

`python -m bench.faults` (or `make faults`) brings up its own stack, then per scenario uploads N copies of a sample
run, publishes their terminal events at once and, with the runs in flight, injects one fault:

- `kill -9 <function>` for each function of the pipeline, when its first claim of the batch appears: the process
  group is SIGKILLed and the stack's supervisor starts it again at once behind the same port (as Cloud Run
  replaces a crashed instance); the deliveries it held come back through Pub/Sub redelivery;
- `firestore restart`: the Firestore emulator SIGKILLed when the first capture part runs and started again, empty;
  the runs it lost are then re-driven with what `rlcleanup recover RUN_ID` does (the kept event, published again);
- `storage outage`: fake-gcs-server frozen (SIGSTOP) for `--outage` seconds while capture parts run, then resumed;
- `load N at once`: no fault, `--load-runs` run ends (default 200) published together, as the in-repo
  `bench_load.py` does but read from outside: lost, doubled, and each run's seconds from the publish to its final
  record (p50 / p99 / max, to the driver's poll of about a second). The longest scenario (20-40 min on 2 shared
  cores); `--only load` runs it alone.

For each: how many runs finished complete, failed, were lost (no final record within the timeout) or doubled (more
than one record for one run location), how many were recovered, and the seconds until the last run settled.
Nothing here imports the stack's functions: the driver reads Firestore and publishes events like any client.

    .venv/bin/python -m bench.faults [--runs 10] [--load-runs 200] [--only capture-part firestore] [--short]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import sample_uploader

PIPELINE = {  # function -> the key prefix of the claim it takes first
    "on-job-event": "classify",
    "establish-terminal-state": "terminal-plan",
    "scan-log-part": "log-scan:",
    "plan-capture": "capture-plan",
    "capture-part": "capture-part:",
    "validate-candidate": "validate:",
    "select-candidate": "select",
}
COMPLETE = {"awaiting_authority", "complete"}
FINAL = COMPLETE | {"failed", "needs_person", "stalled", "routed"}


@dataclass
class Outcome:
    scenario: str
    runs: int
    complete: int = 0
    failed: int = 0
    lost: int = 0
    doubled: int = 0
    recovered: int = 0
    seconds: float = 0.0
    note: str = ""


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


class Driver:
    def __init__(self, state: Any, tmp: Path, scenario_name: str) -> None:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import firestore, storage

        from rlcleanup.samples.generator import write_sample_run

        self.state = state
        self.db = firestore.Client(project=state.project)
        self.gcs = storage.Client(project=state.project, credentials=AnonymousCredentials())
        local = tmp / "sample"
        if not local.exists():
            write_sample_run(local, scenario_name)
        self.upload = sample_uploader(self.gcs, local, state.buckets["runs"], "faults")
        self.uploaded = 0

    def runs(self, n: int) -> list[tuple[str, str]]:
        """N fresh run ends: every scenario's runs are new locations (never one an earlier scenario finished)."""
        first, self.uploaded = self.uploaded, self.uploaded + n
        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(self.upload, range(first, first + n)))

    def publish(self, runs: list[tuple[str, str]]) -> None:
        from rlcleanup.stack.emit import job_event, publish_event

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda r: publish_event(job_event(r[0], "SUCCEEDED"), self.state.project), runs))

    def wait_claim(self, runs: list[tuple[str, str]], prefix: str, timeout: float = 120) -> bool:
        """Until one run of the batch holds a claim starting with `prefix` (the function is at work)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, run_id in runs:
                try:
                    steps = self.db.collection("runs").document(run_id).collection("steps").stream(timeout=5)
                    if any(str((s.to_dict() or {}).get("key", "")).startswith(prefix) for s in steps):
                        return True
                except Exception:  # the store is down or restarting: look again
                    continue
            time.sleep(0.1)
        return False

    def statuses(self, runs: list[tuple[str, str]]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for _, run_id in runs:
            try:
                snap = self.db.collection("runs").document(run_id).get(timeout=5)
                out[run_id] = (snap.to_dict() or {}).get("status") if snap.exists else None
            except Exception:
                out[run_id] = None
        return out

    def settle(
        self, runs: list[tuple[str, str]], timeout: float, settled_at: dict[str, float] | None = None
    ) -> tuple[dict[str, str | None], float]:
        """Poll until every run's record is final (or the timeout); `settled_at` gets the monotonic time each run
        was first seen final. Runs already final are not read again."""
        t0 = time.monotonic()
        seen: dict[str, str | None] = {}
        while True:
            pending = [r for r in runs if seen.get(r[1]) not in FINAL]
            now_seen = self.statuses(pending)
            now = time.monotonic()
            for run_id, status in now_seen.items():
                if status in FINAL and settled_at is not None:
                    settled_at.setdefault(run_id, now)
            seen.update(now_seen)
            if all(seen.get(r[1]) in FINAL for r in runs) or now - t0 > timeout:
                return seen, now - t0
            time.sleep(1.0)

    def doubled(self, runs: list[tuple[str, str]]) -> int:
        from google.cloud.firestore_v1.base_query import FieldFilter

        count = 0
        for uri, _ in runs:
            found = list(self.db.collection("runs").where(filter=FieldFilter("run_uri", "==", uri)).stream())
            count += len(found) > 1
        return count

    def wait_taken_over(self, run_ids: list[str], timeout: float) -> None:
        """Until on-job-event has started every re-driven run over (its lost_runs document marked recovered)."""
        deadline = time.monotonic() + timeout
        waiting = set(run_ids)
        while waiting and time.monotonic() < deadline:
            for run_id in list(waiting):
                doc = self.db.collection("lost_runs").document(run_id).get(timeout=5)
                if (doc.to_dict() or {}).get("recovered_at") is not None:
                    waiting.discard(run_id)
            time.sleep(0.5)

    def recover_lost(self, runs: list[tuple[str, str]]) -> list[str]:
        """What `rlcleanup recover RUN_ID` does for every run the store lost: its kept event, published again."""
        from rlcleanup.adapters.firestore_records import FirestoreRunRecords
        from rlcleanup.runtime.recovery import NotLost, lost_run_event
        from rlcleanup.stack.emit import publish_event

        records = FirestoreRunRecords(project=self.state.project)
        recovered = []
        for _, run_id in runs:
            try:
                event = lost_run_event(records, run_id)
            except NotLost:
                continue
            publish_event(event, self.state.project)
            recovered.append(run_id)
        return recovered


def run_scenario(driver: Driver, name: str, n: int, timeout: float, outage: float) -> Outcome:
    from rlcleanup.stack import kill_server, start_server

    state = driver.state
    if name.startswith("load"):
        n = int(name.split()[1])
        timeout = max(timeout, 12.0 * n)  # a queue on 2 cores: 200 runs took 1,393 s in bench_load.py
    runs = driver.runs(n)
    t0 = time.monotonic()
    driver.publish(runs)
    published = time.monotonic() - t0
    outcome = Outcome(name, n)
    if name.startswith("load"):
        settled_at: dict[str, float] = {}
        seen, _ = driver.settle(runs, timeout, settled_at)
        took = sorted(at - t0 for at in settled_at.values())
        if took:
            p50, p99 = took[len(took) // 2], took[min(len(took) - 1, int(0.99 * len(took)))]
            outcome.note = f"published in {published:.1f} s; event -> record p50 {p50:.0f} s, p99 {p99:.0f} s"
        return _counted(outcome, driver, runs, seen, t0)
    if name.startswith("kill -9 "):
        function = name.removeprefix("kill -9 ")
        if driver.wait_claim(runs, PIPELINE[function]):
            kill_server(state, f"fn-{function}", signal.SIGKILL, hold=False)  # the supervisor starts it again
        else:
            outcome.note = "no claim seen: not killed"
    elif name == "firestore restart":
        driver.wait_claim(runs, "capture-part:")
        kill_server(state, "firestore")
        time.sleep(2.0)  # down for a moment: deliveries in flight fail and are redelivered
        start_server(state, "firestore")
    elif name == "storage outage":
        driver.wait_claim(runs, "capture-part:")
        kill_server(state, "gcs", signal.SIGSTOP)
        time.sleep(outage)
        kill_server(state, "gcs", signal.SIGCONT)
    seen, _ = driver.settle(runs, timeout)
    if name == "firestore restart":
        lost_before = sum(1 for s in seen.values() if s == "failed")
        recovered = driver.recover_lost(runs)
        outcome.recovered = len(recovered)
        outcome.note = f"{lost_before} failed record_store_lost before `recover`"
        driver.wait_taken_over(recovered, timeout)  # on-job-event started each lost run over
        seen, _ = driver.settle(runs, timeout)
    return _counted(outcome, driver, runs, seen, t0)


def _counted(
    outcome: Outcome, driver: Driver, runs: list[tuple[str, str]], seen: dict[str, str | None], t0: float
) -> Outcome:
    outcome.seconds = round(time.monotonic() - t0, 1)
    outcome.complete = sum(1 for s in seen.values() if s in COMPLETE)
    outcome.failed = sum(1 for s in seen.values() if s in FINAL - COMPLETE)
    outcome.lost = sum(1 for s in seen.values() if s not in FINAL)
    outcome.doubled = driver.doubled(runs)
    return outcome


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| scenario | runs | complete | failed | lost | doubled | recovered | seconds | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.scenario} | {o.runs} | {o.complete} | {o.failed} | {o.lost} | {o.doubled} | {o.recovered} | "
            f"{o.seconds:g} | {o.note} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="run ends in flight per scenario")
    ap.add_argument("--load-runs", type=int, default=200, help="run ends published at once in the load scenario")
    ap.add_argument("--outage", type=float, default=30.0, help="seconds the storage server is frozen")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a scenario's runs may take to settle")
    ap.add_argument("--only", nargs="*", help="scenarios whose name contains one of these words")
    ap.add_argument("--scenario", default="completed-resumed", help="the sample run each run end is a copy of")
    ap.add_argument("--short", action="store_true", help="3 runs, a 10 s outage, capture-part and firestore only")
    args = ap.parse_args(argv)
    names = [f"kill -9 {fn}" for fn in PIPELINE] + ["firestore restart", "storage outage"]
    names.append(f"load {args.load_runs} at once")
    if args.short:
        args.runs, args.outage = 3, 10.0
        names = ["kill -9 capture-part", "firestore restart"]
    if args.only:
        names = [n for n in names if any(word in n for word in args.only)]

    from rlcleanup.stack import down, up

    tmp = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    load_runs = f" ({args.load_runs} in the load scenario)" if any(n.startswith("load") for n in names) else ""
    print(
        f"load average {_load()} on {os.cpu_count()} cores; {len(names)} scenarios of {args.runs} runs{load_runs}",
        flush=True,
    )
    t = time.monotonic()
    state = up(tmp / "stack", project="rlcleanup-faults", timeout=300)
    print(f"stack up in {time.monotonic() - t:.1f} s; load {_load()}", flush=True)
    outcomes: list[Outcome] = []
    try:
        os.environ.update(state.env)
        driver = Driver(state, tmp, args.scenario)
        for name in names:
            outcome = run_scenario(driver, name, args.runs, args.timeout, args.outage)
            outcomes.append(outcome)
            print(f"  {name}: {outcome}; load {_load()}", flush=True)
    finally:
        down(tmp / "stack")
    print(table(outcomes))
    bad = [o.scenario for o in outcomes if o.lost or o.doubled or o.complete != o.runs]
    print(f"all {len(outcomes)} scenarios: every run complete, none lost or doubled" if not bad else f"NOT met: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
