"""Helpers for the end-to-end tests: sample runs on the GCS emulator, events, polling Firestore, a fault proxy."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rlcleanup.adapters.firestore_records import FirestoreRecordStore
from rlcleanup.models.record import CompletionRecord
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.samples.upload import upload_sample_run
from rlcleanup.stack import StackState

FINAL = {"awaiting_authority", "complete", "routed", "needs_person", "failed"}


def sample_on_gcs(stack: StackState, gcs_client: Any, tmp: Path, scenario: str, uid: str) -> tuple[str, str]:
    """Write `scenario` locally, upload it as a distinct run; returns (run_uri, run_id)."""
    write_sample_run(tmp, scenario)
    name = f"{scenario}-{uid}"
    run_uri = upload_sample_run(gcs_client, tmp, stack.buckets["runs"], f"e2e/{uid}", rename=name)
    return run_uri, f"{name}-{VERSION}"


def wait_record(project: str, run_id: str, timeout: float = 120.0, statuses: set[str] = FINAL) -> CompletionRecord:
    store = FirestoreRecordStore(project=project)
    deadline = time.monotonic() + timeout
    record = None
    while time.monotonic() < deadline:
        record = store.get(run_id)
        # awaiting_authority/complete are written by select, which then adds its report: wait for its claim
        if (
            record is not None
            and record.status.value in statuses
            and (record.status.value in ("routed", "needs_person") or store.result(run_id, "select") is not None)
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
