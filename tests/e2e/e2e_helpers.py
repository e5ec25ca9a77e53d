"""Helpers for the end-to-end tests: sample runs on the GCS emulator, events, polling Firestore, a fault proxy."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.cli.upload import upload_sample_run
from rlcleanup.models.record import CompletionRecord
from rlcleanup.runtime.functions import parse_accounting
from rlcleanup.runtime.topology import FunctionSpec, load_topology
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.stack import StackState

FINAL = {"awaiting_authority", "complete", "routed", "needs_person", "failed"}


def sample_on_gcs(stack: StackState, gcs_client: Any, tmp: Path, scenario: str, uid: str) -> tuple[str, str]:
    """Write `scenario` locally, upload it as a distinct run; returns (run_uri, run_id)."""
    write_sample_run(tmp, scenario)
    name = f"{scenario}-{uid}"
    run_uri = upload_sample_run(gcs_client, tmp, stack.buckets["runs"], f"e2e/{uid}", rename=name)
    return run_uri, f"{name}-{VERSION}"


def wait_record(project: str, run_id: str, timeout: float = 120.0, statuses: set[str] = FINAL) -> CompletionRecord:
    store, claims = firestore_stores(project=project)
    deadline = time.monotonic() + timeout
    record = None
    while time.monotonic() < deadline:
        record = store.get(run_id)
        # awaiting_authority/complete are written by select, which then adds its report: wait for its claim
        if (
            record is not None
            and record.status.value in statuses
            and (record.status.value in ("routed", "needs_person") or claims.result(run_id, "select") is not None)
        ):
            return store.get(run_id) or record
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not reach {sorted(statuses)} within {timeout} s; last: {record}")


def wait_log(path: Path, needle: str, count: int, timeout: float = 90.0) -> str:
    """Wait until a function's log mentions `needle` `count` times (outcomes are logged per delivery)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace")
        if text.count(needle) >= count:
            return text
        time.sleep(0.2)
    raise AssertionError(f"{path.name}: {needle!r} seen {text.count(needle)}x, wanted {count}; tail:\n{text[-3000:]}")


def served_functions(stack: StackState) -> list[FunctionSpec]:
    """The topology's functions this stack runs (whatever the topology lists, in its order)."""
    return [fn for fn in load_topology().functions if fn.name in stack.functions]


def function_log(stack: StackState, fn: FunctionSpec) -> Path:
    return Path(stack.state_dir, f"fn-{fn.name}.log")


def log_entries(path: Path, run_id: str | None = None) -> list[dict[str, Any]]:
    """A function's JSON log records (the stack writes one file per function), optionally for one run only: the
    records carrying its run_id, plus every record of a delivery (event_id) that names the run (a job event
    carries only the run's URI, so on-job-event learns the run id while handling it)."""
    entries = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue  # functions-framework / gunicorn start-up lines
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    if run_id is None:
        return entries
    deliveries = {
        e.get("event_id") for e in entries if e.get("run_id") == run_id or run_id in str(e.get("message", ""))
    }
    deliveries.discard(None)
    return [e for e in entries if e.get("run_id") == run_id or e.get("event_id") in deliveries]


def invocation_accounting(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-invocation accounting lines (runtime.functions.account_invocation) among log records."""
    out = []
    for entry in entries:
        fields = parse_accounting(str(entry.get("message", "")))
        if fields is not None:
            out.append(fields | {"severity": entry.get("severity"), "event_id": entry.get("event_id")})
    return out


def handler_outcomes(entries: list[dict[str, Any]], fn: FunctionSpec) -> list[str]:
    """The `<entry_point>: <outcome>` line each completed delivery logs."""
    prefix = f"{fn.entry_point}: "
    return [
        str(e["message"])
        for e in entries
        if e.get("logger") == "rlcleanup.runtime.functions" and str(e.get("message", "")).startswith(prefix)
    ]


class FaultProxy:
    """Forwards POSTs to `target`, but answers 500 to the first `failures` requests (no hooks in production)."""

    def __init__(self, target: str, failures: int) -> None:
        self.target = target.rstrip("/")
        self.failures = failures
        self.seen = 0
        self.statuses: list[int] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy._lock:
                    proxy.seen += 1
                    fail = proxy.seen <= proxy.failures
                if fail:
                    status = 500
                else:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                    req = urllib.request.Request(proxy.target + self.path, data=body, headers=headers, method="POST")
                    try:
                        with urllib.request.urlopen(req, timeout=120) as resp:
                            status = resp.status
                    except urllib.error.HTTPError as exc:
                        status = exc.code
                with proxy._lock:
                    proxy.statuses.append(status)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
