"""Structured logs for Cloud Run: one JSON object per line on stdout, in the shape Cloud Logging parses.

`severity` and `message` become the entry's severity and text; `logging.googleapis.com/labels`,
`logging.googleapis.com/trace` (+ `spanId`, `trace_sampled`) and `sourceLocation` are lifted into the entry;
the rest (`run_id`, `step`, `event_id`, ...) lands in jsonPayload. Library modules only call
`logging.getLogger(__name__)`; the entry path calls `bind_cloud_event` once per delivery, which configures the
root logger on first use and sets the per-delivery context every record of that delivery carries.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

from rlcleanup.context import LogContext, Trace, current_context, set_context
from rlcleanup.settings import platform

_TRACE = "logging.googleapis.com/trace"
_SPAN = "logging.googleapis.com/spanId"
_SAMPLED = "logging.googleapis.com/trace_sampled"
_LABELS = "logging.googleapis.com/labels"
_SOURCE = "logging.googleapis.com/sourceLocation"
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_CLOUD_TRACE = re.compile(r"^([0-9a-fA-F]{1,32})(?:/(\d+))?(?:;o=([01]))?$")
CONTEXT_FIELDS = ("run_id", "step", "event_id")


def parse_trace(traceparent: str | None = None, cloud_trace: str | None = None) -> Trace | None:
    """W3C `traceparent` first, else `X-Cloud-Trace-Context: TRACE/SPAN;o=1` (its span id is decimal)."""
    if traceparent:
        m = _TRACEPARENT.match(traceparent.strip().lower())
        if m and m.group(1) != "0" * 32:
            return Trace(m.group(1), m.group(2), bool(int(m.group(3), 16) & 1))
    if cloud_trace:
        m = _CLOUD_TRACE.match(cloud_trace.strip())
        if m:
            span = f"{int(m.group(2)):016x}" if m.group(2) else None
            return Trace(m.group(1).lower(), span, m.group(3) == "1")
    return None


class CloudLoggingFormatter(logging.Formatter):
    def __init__(self, project: str | None = None, labels: dict[str, str] | None = None) -> None:
        super().__init__()
        self.project = project
        self.labels = labels or {}

    def format(self, record: logging.LogRecord) -> str:
        ctx = current_context()
        message = record.getMessage()
        if record.exc_info:
            # Stack traces inside the message are what Error Reporting groups on.
            message = f"{message}\n{self.formatException(record.exc_info)}"
        entry: dict[str, Any] = {
            "severity": record.levelname if record.levelname != "WARN" else "WARNING",
            "message": message,
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "logger": record.name,
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None) or getattr(ctx, name)
            entry[name] = value
        labels = {**self.labels, **{k: str(entry[k]) for k in ("run_id", "step") if entry[k]}}
        entry[_LABELS] = labels
        if ctx.trace is not None and self.project:
            entry[_TRACE] = f"projects/{self.project}/traces/{ctx.trace.trace_id}"
            if ctx.trace.span_id:
                entry[_SPAN] = ctx.trace.span_id
            entry[_SAMPLED] = ctx.trace.sampled
        entry[_SOURCE] = {"file": record.pathname, "line": str(record.lineno), "function": record.funcName}
        extra = getattr(record, "message_id", None)
        if extra is not None:
            entry["message_id"] = extra
        error = getattr(record, "error", None)  # a structured cause (type, operation, cause): lands in jsonPayload
        if isinstance(error, dict):
            entry["error"] = error
        invocation = getattr(record, "invocation", None)  # seconds / peak RSS / caps: queryable, not just text
        if isinstance(invocation, dict):
            entry["invocation"] = invocation
        return json.dumps(entry, default=str, ensure_ascii=False)


_HANDLER_FLAG = "_rlcleanup_json"


def _console(stream: object) -> bool:
    """A stream that reaches the process's console: stdout/stderr (also as replaced by a framework at the time),
    or functions-framework's execution-id stream (a proxy of the request's `wsgi.errors`, stderr under gunicorn).
    Compared by identity: the framework's proxy would resolve an `==` against the current request."""
    framework = sys.modules.get("functions_framework.execution_id")
    consoles = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, getattr(framework, "logging_stream", None))
    return any(stream is console for console in consoles if console is not None)


def configure_logging(level: int | str | None = None, stream: IO[str] | None = None) -> logging.Handler:
    """Install the JSON handler on the root logger once (idempotent) and remove the other console handlers on it,
    on every call, so each record is written exactly once, as JSON.

    A console handler is a plain `logging.StreamHandler` writing to the console (`_console`); one writing anywhere
    else, and every subclass (a file, a test's capture handler), is kept. With LOG_EXECUTION_ID=true (as Terraform
    deploys the functions) functions-framework configures a root "wsgi" handler on its execution-id stream before
    our module loads, which printed every line a second time as `{"message": ...}` (issue 38); checking on every
    call also removes one added after ours."""
    root = logging.getLogger()
    ours: logging.Handler | None = None
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_FLAG, False):
            ours = ours or handler
        elif type(handler) is logging.StreamHandler and _console(getattr(handler, "stream", None)):
            root.removeHandler(handler)
    if ours is not None:
        return ours
    labels = {k: v for k, v in {"service": platform().service, "revision": platform().revision}.items() if v}
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(CloudLoggingFormatter(platform().project, labels))
    setattr(handler, _HANDLER_FLAG, True)
    root.addHandler(handler)
    root.setLevel(level or "INFO")  # the functions pass RLCLEANUP_LOG_LEVEL from their settings
    return handler


def _request_headers() -> dict[str, str]:
    """The HTTP request's headers when running under functions-framework (Flask); empty elsewhere."""
    try:
        import flask
    except ImportError:
        return {}
    if not flask.has_request_context():
        return {}
    return {k.lower(): v for k, v in flask.request.headers.items()}


def _peek_run(data: Any) -> tuple[str | None, str | None]:
    """(run_id, Pub/Sub message id) from a CloudEvent's Pub/Sub envelope, tolerating anything malformed."""
    from rlcleanup.runtime.envelope import decode_cloud_event

    try:
        message = decode_cloud_event(data)
    except Exception:
        return None, None
    run_id = message.attributes.get("run_id")
    if run_id is None:
        try:
            payload = json.loads(message.data)
            run_id = payload.get("run_id") if isinstance(payload, dict) else None
        except ValueError:
            run_id = None
    return (run_id if isinstance(run_id, str) else None), message.message_id


def bind_cloud_event(cloud_event: Any, step: str, level: str | None = None) -> LogContext:
    """Configure logging (first call) and set this delivery's run_id / step / event_id / trace context."""
    configure_logging(level)
    headers = _request_headers()
    get = getattr(cloud_event, "get", lambda _key, _default=None: None)
    trace = parse_trace(headers.get("traceparent") or get("traceparent"), headers.get("x-cloud-trace-context"))
    run_id, message_id = _peek_run(getattr(cloud_event, "data", None))
    return set_context(run_id=run_id, step=step, event_id=message_id or get("id"), trace=trace)
