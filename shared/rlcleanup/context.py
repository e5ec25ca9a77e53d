"""The per-delivery context (run, step, event, trace) of the message being handled.

It sits at the bottom of the layers, beside errors.py: the runtime sets it once per delivery
(runtime/logging_setup.bind_cloud_event) and every log line carries it; adapters may read it to name the step in
a diagnostic, but never to decide anything (the lease owner, for one, is passed explicitly).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Trace:
    trace_id: str
    span_id: str | None = None  # 16 hex digits, as Cloud Logging's spanId wants
    sampled: bool = False


@dataclass(frozen=True)
class LogContext:
    run_id: str | None = None
    step: str | None = None
    event_id: str | None = None
    trace: Trace | None = None


_EMPTY = LogContext()
_context: ContextVar[LogContext | None] = ContextVar("rlcleanup_log_context", default=None)


def set_context(**fields: Any) -> LogContext:
    """Replace the whole per-delivery context (a reused worker thread must not inherit the last delivery's)."""
    ctx = LogContext(**fields)
    _context.set(ctx)
    return ctx


def current_context() -> LogContext:
    return _context.get() or _EMPTY
