"""Issue 38 item 12: a function deployed as Terraform deploys it (LOG_EXECUTION_ID=true) wrote every log line twice:
our JSON on stdout, and the same text again through the root handler functions-framework configures for execution
ids. One delivery of capture-part, served by functions-framework as on Cloud Run, writes each line once."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from rlcleanup.runtime import functions
from rlcleanup.runtime.logging_setup import configure_logging

REPO = Path(__file__).resolve().parents[2]

# One process as Cloud Run runs it: functions-framework creates the app (configuring its logging, then loading
# functions/main.py), and capture-part gets two deliveries. Ports are the embedded stack's (no cloud here).
SERVE = """
import base64, json, sys
import functions_framework

app = functions_framework.create_app("capture_part", sys.argv[1], "cloudevent")
from rlcleanup.runtime import functions
from rlcleanup.runtime.embedded import EmbeddedStack

stack = EmbeddedStack.create(sys.argv[2] + "/r.db", sys.argv[2] + "/preserved")
functions.ports = lambda: stack.ports
client = app.test_client()
for message_id in ("m-1", "m-2"):
    payload = {"run_id": "r-1", "part_id": "p-0"}  # not a valid part: the handler logs, records and acks it
    message = {"data": base64.b64encode(json.dumps(payload).encode()).decode(), "attributes": {}}
    body = {"subscription": "projects/p/subscriptions/s", "message": {**message, "messageId": message_id}}
    assert client.post("/projects/p/topics/capture-parts", json=body).status_code == 200
"""


def _messages(text: str) -> list[str]:
    """The message of every line written, whichever handler wrote it (ours: JSON; the framework's: JSON too)."""
    return [json.loads(line).get("message", line) for line in text.splitlines() if line.strip()]


def test_capture_part_deliveries_write_each_line_once(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "shared"), os.environ.get("PYTHONPATH", "")]),
        "LOG_EXECUTION_ID": "true",  # infra/modules/rlcleanup/functions.tf deploys every function with it
    }
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(REPO / "functions" / "main.py"), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # Before the fix every line came out twice: ours on stdout, and the framework's {"message": ...} on stderr.
    assert _messages(done.stderr) == []
    entries = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert {e["step"] for e in entries} == {"capture_part"}
    per_delivery = {d: Counter(e["message"] for e in entries if e["event_id"] == d) for d in ("m-1", "m-2")}
    assert sum(map(len, per_delivery.values())) == len(entries)  # every line belongs to one delivery
    for written in per_delivery.values():
        assert {m: n for m, n in written.items() if n > 1} == {}  # no line twice
        assert "capture_part: permanent error recorded: invalid_message" in written
        assert sum(m.startswith(functions.ACCOUNTING_PREFIX) for m in written) == 1


def test_configure_logging_removes_a_console_handler_added_after_ours() -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    root.handlers[:] = [h for h in root.handlers if not getattr(h, "_rlcleanup_json", False)]
    try:
        ours = configure_logging()
        late = logging.StreamHandler()  # what a framework may add after our first delivery
        root.addHandler(late)
        assert configure_logging() is ours
        assert late not in root.handlers and root.handlers.count(ours) == 1
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
