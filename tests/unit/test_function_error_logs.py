"""A delivery that fails answers HTTP 500 under functions-framework (as Cloud Run serves functions/main.py) and
logs exactly one ERROR line, ours, as JSON: never Flask's own "Exception on /" traceback beside it."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stage_swap import swap_handler

from rlcleanup.errors import RetryLater
from rlcleanup.runtime import functions
from rlcleanup.runtime.embedded import EmbeddedStack
from rlcleanup.runtime.logging_setup import set_context

MAIN = Path(__file__).resolve().parents[2] / "functions" / "main.py"
FN = "validate_candidate"


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import functions_framework

    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    # The entry path installs its JSON handler on first use: start without one, so it writes to this test's stdout.
    root.handlers[:] = [h for h in root.handlers if not getattr(h, "_rlcleanup_json", False)]
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))
    monkeypatch.setattr(functions, "ports", lambda: stack.ports)
    app = functions_framework.create_app(FN, str(MAIN), "cloudevent")
    try:
        yield app.test_client()
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
        set_context()


def _push(client: Any, payload: dict[str, Any], message_id: str) -> Any:
    message = {"data": base64.b64encode(json.dumps(payload).encode()).decode(), "attributes": {}}
    body = {"subscription": "projects/p/subscriptions/s", "message": {**message, "messageId": message_id}}
    return client.post("/projects/p/topics/candidate-validation", json=body)


def _log_lines(out: str) -> list[dict[str, Any]]:
    """Every line written; each must be one JSON log entry (a plain traceback line would fail to parse)."""
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _errors(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e["severity"] == "ERROR"]


def test_a_transient_failure_is_one_error_line_without_a_traceback(
    client: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def busy(p: Any, data: bytes, attributes: dict[str, str]) -> str:
        raise RetryLater("run r-1: another delivery holds the claim")

    swap_handler(monkeypatch, FN, busy)
    resp = _push(client, {"run_id": "r-1"}, "m-transient")
    assert resp.status_code == 500  # Pub/Sub redelivers
    out, err = capfd.readouterr()
    entries = _log_lines(out)
    [error] = _errors(entries)
    assert (
        error["message"] == f"{FN} failed, Pub/Sub redelivers it: RetryLater: run r-1: another delivery holds the claim"
    )
    assert error["error"] == {"type": "RetryLater", "kind": "transient", "redelivered": True}
    assert error["run_id"] == "r-1" and error["step"] == FN
    assert "Traceback" not in out and "Traceback" not in err and "Exception on" not in out + err
    accounting = [e for e in entries if e["message"].startswith(functions.ACCOUNTING_PREFIX)]
    assert len(accounting) == 1 and "outcome=error:RetryLater" in accounting[0]["message"]


def test_a_defect_is_one_error_line_carrying_its_traceback(
    client: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def bug(p: Any, data: bytes, attributes: dict[str, str]) -> str:
        return {}["step"]  # type: ignore[no-any-return]  # a KeyError: our bug, retried within its budget

    swap_handler(monkeypatch, FN, bug)
    resp = _push(client, {"run_id": "r-2"}, "m-defect")
    assert resp.status_code == 500
    out, err = capfd.readouterr()
    [error] = _errors(_log_lines(out))
    assert error["message"].startswith(f"defect in {FN} for run r-2 (delivery 1 of 3): KeyError: 'step'")
    assert error["message"].count("Traceback (most recent call last)") == 1  # inside the one JSON entry
    assert "Exception on" not in out + err and "Traceback" not in err
