"""Per-invocation accounting: memory caps parsed from the topology, one line per invocation (also on errors),
WARNING past the configured fraction of the timeout or the memory cap."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from stage_swap import swap_handler

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.errors import RetryLater
from rlcleanup.runtime import functions
from rlcleanup.runtime.logging_setup import CloudLoggingFormatter, set_context
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.topology import load_topology, parse_memory_mib, parse_topology
from rlcleanup.settings import SettingsError, load_settings

FN = "validate_candidate"  # 300 s (the default) and 1Gi in topology.yaml


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("512Mi", 512),
        ("1Gi", 1024),
        ("256Mi", 256),
        ("2Gi", 2048),
        ("1024Ki", 1),
        ("2G", 2e9 / 2**20),
        ("536870912", 512),
    ],
)
def test_memory_sizes(text: str, mib: float) -> None:
    assert parse_memory_mib(text) == pytest.approx(mib)


@pytest.mark.parametrize("text", ["", "512 MB", "Mi", "-1Gi", "1.5.0Gi", "12Xi"])
def test_bad_memory_sizes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_memory_mib(text)


def test_every_topology_function_has_parseable_caps() -> None:
    for fn in load_topology().functions:
        assert fn.memory_mib >= 128 and fn.timeout_seconds > 0, fn.name


def test_a_bad_memory_value_fails_the_topology() -> None:
    raw: dict[str, Any] = {
        "project_topics": [{"name": "t", "description": "d"}],
        "stages": [{"name": "s", "description": "d"}],
        "functions": [
            {
                "name": "f",
                "entry_point": "f",
                "trigger": "t",
                "stage": "s",
                "publishes": ["f-dlq"],
                "description": "d",
                "timeout_seconds": 60,
                "ack_deadline_seconds": 60,
                "memory": "lots",
                "max_instances": 1,
                "max_delivery_attempts": 5,
                "minimum_backoff": "10s",
                "maximum_backoff": "60s",
            }
        ],
    }
    with pytest.raises(ValueError, match="memory"):
        parse_topology(raw)


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep(level=logging.DEBUG)
    root = logging.getLogger()
    saved, root_level = list(root.handlers), root.level  # handle_cloud_event configures the root logger
    functions.log.addHandler(handler)
    old = functions.log.level
    functions.log.setLevel(logging.DEBUG)
    try:
        yield seen
    finally:
        functions.log.removeHandler(handler)
        functions.log.setLevel(old)
        root.handlers[:] = saved
        root.setLevel(root_level)
        set_context()


def _accounting(records: list[logging.LogRecord]) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for r in records:
        fields = functions.parse_accounting(r.getMessage())
        if fields is not None:
            out.append((r.levelno, fields))
    return out


def test_accounting_line_round_trips_with_the_caps(records: list[logging.LogRecord]) -> None:
    fields = functions.account_invocation(FN, 1.23456, "ok", peak_mib=100.04, fraction=0.8)
    assert fields == {
        "entry_point": FN,
        "outcome": "ok",
        "invocation_seconds": 1.235,
        "peak_rss_mib": 100.0,
        "timeout_seconds": 300,
        "memory_mib": 1024.0,
    }
    [(level, parsed)] = _accounting(records)
    assert level == logging.INFO
    assert parsed == fields
    assert records[0].invocation == fields  # type: ignore[attr-defined]  # for a formatter that lifts extras


@pytest.mark.parametrize(
    ("seconds", "peak", "near"),
    [(241.0, 100.0, "timeout"), (10.0, 820.0, "memory"), (299.0, 1023.0, "timeout,memory"), (239.0, 819.0, None)],
)
def test_warning_past_the_fraction_of_a_cap(
    records: list[logging.LogRecord], seconds: float, peak: float, near: str | None
) -> None:
    fields = functions.account_invocation(FN, seconds, "ok", peak_mib=peak, fraction=0.8)
    [(level, parsed)] = _accounting(records)
    assert parsed.get("near_limit") == near == fields.get("near_limit")
    assert level == (logging.WARNING if near else logging.INFO)


def test_fraction_from_the_settings(monkeypatch: pytest.MonkeyPatch, records: list[logging.LogRecord]) -> None:
    monkeypatch.setenv("RLCLEANUP_LIMIT_WARN_FRACTION", "0.5")
    monkeypatch.setattr(functions, "SETTINGS", load_settings())
    assert functions.account_invocation(FN, 151.0, "ok", peak_mib=10.0)["near_limit"] == "timeout"
    for bad in ("nope", "0", "1.5", "-1"):  # refused at cold start, naming the variable (no silent default)
        monkeypatch.setenv("RLCLEANUP_LIMIT_WARN_FRACTION", bad)
        with pytest.raises(SettingsError, match=f"RLCLEANUP_LIMIT_WARN_FRACTION='{bad}'"):
            load_settings()


def test_unknown_entry_point_still_accounted(records: list[logging.LogRecord]) -> None:
    fields = functions.account_invocation("not_in_topology", 0.5, "ok", peak_mib=50.0)
    assert "timeout_seconds" not in fields and "near_limit" not in fields
    assert _accounting(records)[0][1]["entry_point"] == "not_in_topology"


def test_peak_rss_is_this_process_high_water_mark() -> None:
    before = functions.peak_rss_mib()
    blob = bytearray(64 * 2**20)  # touch 64 MiB
    for i in range(0, len(blob), 4096):
        blob[i] = 1
    after = functions.peak_rss_mib()
    assert 10 < before <= after
    assert after >= 64
    del blob


def test_parse_accounting_ignores_other_messages() -> None:
    assert functions.parse_accounting("validate_candidate: selection started") is None
    assert functions.parse_accounting("invocation of something else") is None
    assert functions.parse_accounting("invocation entry_point=x outcome=ok") is None  # figures missing


class _Event(SimpleNamespace):
    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def _envelope(payload: dict[str, Any]) -> dict[str, Any]:
    import base64

    data = base64.b64encode(json.dumps(payload).encode()).decode()
    return {"message": {"data": data, "attributes": {}, "messageId": "m-1"}, "subscription": "s"}


def _bare_ports() -> Ports:
    """Ports whose storage and records the fake handlers never touch (the guard wraps the bus)."""
    return Ports(storage=Any, records=Any, claims=Any, bus=InProcessBus())  # type: ignore[arg-type]


def test_one_line_per_invocation_also_when_the_handler_raises(
    monkeypatch: pytest.MonkeyPatch, records: list[logging.LogRecord]
) -> None:
    calls: list[str] = []

    def boom(p: Any, data: bytes, attributes: dict[str, str]) -> str:
        calls.append("boom")
        raise RetryLater("not yet")

    def fine(p: Any, data: bytes, attributes: dict[str, str]) -> str:
        calls.append("fine")
        return "done"

    monkeypatch.setattr(functions, "ports", _bare_ports)
    swap_handler(monkeypatch, FN, boom)
    event = _Event(data=_envelope({"run_id": "r-1"}), source="//pubsub", id="e-1")
    with pytest.raises(RetryLater):
        functions.handle_cloud_event(FN, event)
    swap_handler(monkeypatch, FN, fine)
    assert functions.handle_cloud_event(FN, event) == "done"
    assert calls == ["boom", "fine"]
    outcomes = [fields["outcome"] for _, fields in _accounting(records)]
    assert outcomes == ["error:RetryLater", "ok"]


def test_undecodable_event_is_accounted_as_permanent(
    monkeypatch: pytest.MonkeyPatch, records: list[logging.LogRecord]
) -> None:
    poisoned: list[str] = []
    monkeypatch.setattr(functions, "ports", _bare_ports)
    monkeypatch.setattr(functions, "record_poison", lambda p, step, *rest: poisoned.append(step))
    result = functions.handle_cloud_event(FN, _Event(data=b"\xff not an envelope", source=None, id="e-2"))
    assert result.startswith(functions.PERMANENT_PREFIX) and poisoned == [FN]
    assert [fields["outcome"] for _, fields in _accounting(records)] == ["permanent"]


def test_accounting_line_carries_the_run_context_as_json() -> None:
    """Through the Cloud Logging formatter: severity, run_id/step context and the figures in the message."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter())
    functions.log.addHandler(handler)
    old = functions.log.level
    functions.log.setLevel(logging.INFO)
    try:
        set_context(run_id="run-9", step=FN)
        functions.account_invocation(FN, 290.0, "ok", peak_mib=12.0, fraction=0.8)
    finally:
        functions.log.removeHandler(handler)
        functions.log.setLevel(old)
        set_context()
    entry = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert entry["severity"] == "WARNING" and entry["run_id"] == "run-9" and entry["step"] == FN
    assert functions.parse_accounting(entry["message"])["near_limit"] == "timeout"  # type: ignore[index]
