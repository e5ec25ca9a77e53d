"""The glue between functions-framework and the handlers: envelope decoding, ports, structured logging."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from rlcleanup.logging_setup import bind_cloud_event
from rlcleanup.runtime.envelope import decode_cloud_event
from rlcleanup.runtime.errors import PermanentError
from rlcleanup.runtime.handlers import HANDLERS, dispatch, record_poison
from rlcleanup.runtime.ports import Ports, cloud_ports
from rlcleanup.runtime.topology import load_topology

log = logging.getLogger(__name__)
_ports: Ports | None = None
_lock = threading.Lock()


def ports() -> Ports:
    global _ports
    with _lock:
        if _ports is None:
            _ports = cloud_ports()
        return _ports


def handle_cloud_event(entry_point: str, cloud_event: Any) -> str:
    bind_cloud_event(cloud_event, entry_point)  # JSON logs for Cloud Logging, with run/step/event/trace context
    spec = load_topology().function(entry_point)
    p = ports()
    try:
        message = decode_cloud_event(cloud_event.data, cloud_event.get("source"))
    except PermanentError as exc:
        raw = _raw_copy(cloud_event.data)
        record_poison(p, entry_point, spec.dead_letter_topic, raw, {}, exc)
        return f"permanent error recorded: {exc.code}"
    if entry_point not in HANDLERS:
        raise RuntimeError(f"no handler registered for {entry_point}")
    outcome = dispatch(p, entry_point, spec.dead_letter_topic, message.data, message.attributes)
    log.info("%s: %s", entry_point, outcome, extra={"message_id": message.message_id})
    return outcome


def _raw_copy(data: Any) -> bytes:
    """What to park on the dead-letter topic for an undecodable event: its bytes, else JSON, else repr."""
    if isinstance(data, bytes):
        raw = data
    elif isinstance(data, str):
        raw = data.encode("utf-8", "replace")
    else:
        try:
            raw = json.dumps(data, default=str).encode()
        except (TypeError, ValueError):
            raw = repr(data).encode()
    return raw[:65536]
