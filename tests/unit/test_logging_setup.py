"""Structured logs: one JSON object per line, in the shape Cloud Logging lifts from Cloud Run stdout."""

from __future__ import annotations

import base64
import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest
from cloudevents.http import CloudEvent

from rlcleanup.runtime.logging_setup import (
    CloudLoggingFormatter,
    Trace,
    bind_cloud_event,
    configure_logging,
    current_context,
    parse_trace,
    set_context,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def logs() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter(project="proj", labels={"service": "select-candidate"}))
    logger = logging.getLogger("rlcleanup.test_logging_setup")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    set_context()
    yield logger, stream
    logger.removeHandler(handler)
    set_context()


def _entries(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_parse_trace_headers() -> None:
    assert parse_trace(f"00-{TRACE_ID}-00f067aa0ba902b7-01") == Trace(TRACE_ID, "00f067aa0ba902b7", True)
    assert parse_trace(f"00-{TRACE_ID}-00f067aa0ba902b7-00") == Trace(TRACE_ID, "00f067aa0ba902b7", False)
    # X-Cloud-Trace-Context carries a decimal span id; Cloud Logging wants 16 hex digits.
    assert parse_trace(None, f"{TRACE_ID}/17;o=1") == Trace(TRACE_ID, "0000000000000011", True)
    assert parse_trace(None, TRACE_ID) == Trace(TRACE_ID, None, False)
    assert parse_trace(f"00-{TRACE_ID}-00f067aa0ba902b7-01", "ffff/1;o=1") == Trace(TRACE_ID, "00f067aa0ba902b7", True)
    assert parse_trace("garbage", None) is None
    assert parse_trace(f"00-{'0' * 32}-00f067aa0ba902b7-01") is None  # the W3C invalid all-zero trace id


def test_one_json_object_per_line_with_context_labels_and_trace(logs: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = logs
    set_context(
        run_id="run-1",
        step="select_candidate",
        event_id="msg-9",
        trace=parse_trace(f"00-{TRACE_ID}-00f067aa0ba902b7-01"),
    )
    logger.warning("two\nlines %s", "here")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1  # a newline in the message never splits an entry
    entry = json.loads(lines[0])
    assert entry["severity"] == "WARNING"
    assert entry["message"] == "two\nlines here"
    assert (entry["run_id"], entry["step"], entry["event_id"]) == ("run-1", "select_candidate", "msg-9")
    assert entry["logging.googleapis.com/labels"] == {
        "service": "select-candidate",
        "run_id": "run-1",
        "step": "select_candidate",
    }
    assert entry["logging.googleapis.com/trace"] == f"projects/proj/traces/{TRACE_ID}"
    assert entry["logging.googleapis.com/spanId"] == "00f067aa0ba902b7"
    assert entry["logging.googleapis.com/trace_sampled"] is True
    assert (
        entry["logging.googleapis.com/sourceLocation"]["function"]
        == "test_one_json_object_per_line_with_context_labels_and_trace"
    )  # type: ignore[index]
    assert str(entry["time"]).endswith("+00:00")


def test_extras_override_context_and_absent_fields_are_null(logs: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = logs
    logger.info("no context")
    set_context(run_id="run-1")
    logger.info("explicit", extra={"run_id": "run-2", "step": "capture_part"})
    first, second = _entries(stream)
    assert first["severity"] == "INFO" and first["run_id"] is None and first["step"] is None
    assert "logging.googleapis.com/trace" not in first
    assert first["logging.googleapis.com/labels"] == {"service": "select-candidate"}
    assert (second["run_id"], second["step"]) == ("run-2", "capture_part")


def test_invocation_accounting_is_a_structured_field(logs: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = logs
    fields = {"entry_point": "capture_part", "invocation_seconds": 1.5, "peak_rss_mib": 97.0}
    logger.info("invocation ...", extra={"invocation": fields})
    logger.info("plain")
    first, second = _entries(stream)
    assert first["invocation"] == fields  # jsonPayload.invocation.peak_rss_mib is queryable in Cloud Logging
    assert "invocation" not in second


def test_exceptions_carry_the_traceback_in_the_message(logs: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = logs
    try:
        raise ValueError("bad shard")
    except ValueError:
        logger.exception("validation failed")
    (entry,) = _entries(stream)
    assert entry["severity"] == "ERROR"
    message = str(entry["message"])
    assert message.startswith("validation failed\nTraceback (most recent call last):")
    assert message.endswith("ValueError: bad shard")


@pytest.fixture
def clean_root() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    yield root
    root.handlers[:] = saved
    root.setLevel(level)
    set_context()


def test_configure_is_idempotent_and_replaces_plain_console_handlers(clean_root: logging.Logger) -> None:
    plain = logging.StreamHandler(sys.stdout)  # what functions-framework's setup_logging adds
    kept = logging.StreamHandler(io.StringIO())  # e.g. a test's capture handler: not a console, left alone
    clean_root.addHandler(plain)
    clean_root.addHandler(kept)
    stream = io.StringIO()
    handler = configure_logging(stream=stream)
    assert configure_logging() is handler
    assert plain not in clean_root.handlers and kept in clean_root.handlers
    assert sum(1 for h in clean_root.handlers if h is handler) == 1
    logging.getLogger("rlcleanup.some.module").info("hello")
    (entry,) = _entries(stream)
    assert entry["message"] == "hello" and entry["logger"] == "rlcleanup.some.module"


def _pubsub_event(payload: dict[str, object], attributes: dict[str, str], **extensions: str) -> CloudEvent:
    data = {
        "message": {
            "data": base64.b64encode(json.dumps(payload).encode()).decode(),
            "attributes": attributes,
            "messageId": "1234567",
        },
        "subscription": "projects/p/subscriptions/s",
    }
    attrs = {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": "//pubsub/projects/p/topics/t"}
    return CloudEvent({**attrs, **extensions}, data)


def test_bind_cloud_event_sets_run_step_event_and_trace(clean_root: logging.Logger) -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)
    event = _pubsub_event(
        {"run_id": "run-7", "run_uri": "gs://b/r"}, {}, traceparent=f"00-{TRACE_ID}-00f067aa0ba902b7-01"
    )
    ctx = bind_cloud_event(event, "select_candidate")
    assert (ctx.run_id, ctx.step, ctx.event_id) == ("run-7", "select_candidate", "1234567")
    assert ctx.trace == Trace(TRACE_ID, "00f067aa0ba902b7", True)
    # The next delivery on the same thread replaces the whole context: nothing leaks from the last one.
    ctx = bind_cloud_event(_pubsub_event({"other": 1}, {"run_id": "run-8"}), "capture_part")
    assert (ctx.run_id, ctx.step, ctx.trace) == ("run-8", "capture_part", None)
    assert current_context() == ctx
    # Undecodable data still binds the step and the CloudEvent id.
    ctx = bind_cloud_event(CloudEvent({"type": "t", "source": "s", "id": "ce-1"}, {"nope": True}), "plan_capture")
    assert (ctx.run_id, ctx.step, ctx.event_id) == (None, "plan_capture", "ce-1")


def test_bind_reads_the_trace_header_of_the_http_request(clean_root: logging.Logger) -> None:
    import flask

    configure_logging(stream=io.StringIO())
    headers = {"X-Cloud-Trace-Context": f"{TRACE_ID}/1;o=1"}
    with flask.Flask(__name__).test_request_context("/", method="POST", headers=headers):
        ctx = bind_cloud_event(_pubsub_event({"run_id": "run-9"}, {}), "validate_candidate")
    assert ctx.trace == Trace(TRACE_ID, "0000000000000001", True)
