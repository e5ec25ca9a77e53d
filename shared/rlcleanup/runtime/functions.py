"""The glue between functions-framework and the handlers: envelope decoding, ports, structured logging.

Every invocation ends with one accounting line (also when it raises): its wall time and the process's peak RSS
against the function's caps in the topology (timeout_seconds, memory). On Cloud Run the memory limit applies to
the whole instance, so the process high-water mark (getrusage ru_maxrss) is the measure, not a per-call delta.
The line is INFO, or WARNING once either figure passes RLCLEANUP_LIMIT_WARN_FRACTION (default 0.8) of its cap.

A delivery that fails (HTTP 500, so Pub/Sub redelivers) logs exactly one structured ERROR line: ours (a defect's
carries its traceback, written where it is classified, `runtime/failures.py`). `serve_cloud_event`, the view
functions/main.py registers, turns the failure into werkzeug's `InternalServerError`: Flask answers 500 without
logging its own "Exception on /" traceback beside ours.

The deployment settings are read when this module is imported (functions/main.py imports it at cold start): a bad
variable stops the instance there, with a `SettingsError` naming it, before any delivery is taken.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import threading
import time
from typing import Any

from werkzeug.exceptions import InternalServerError

from rlcleanup.errors import ErrorKind, PermanentError, defect_message, error_kind
from rlcleanup.ports import usage
from rlcleanup.runtime.dead_letters import DEAD_LETTER_TOPIC
from rlcleanup.runtime.envelope import decode_cloud_event
from rlcleanup.runtime.failures import PERMANENT_PREFIX, already_logged
from rlcleanup.runtime.guard import guarded_ports
from rlcleanup.runtime.handlers import dispatch
from rlcleanup.runtime.logging_setup import bind_cloud_event
from rlcleanup.runtime.poison import record_poison
from rlcleanup.runtime.ports import Ports, cloud_ports
from rlcleanup.runtime.stage_table import StageTable, stage_table
from rlcleanup.runtime.topology import FunctionSpec
from rlcleanup.settings import DeploymentSettings, load_settings

log = logging.getLogger(__name__)
_ports: Ports | None = None
_lock = threading.Lock()
_table: StageTable | None = None  # None: the packaged table (a deployment never sets another)

ACCOUNTING_PREFIX = "invocation "
SETTINGS: DeploymentSettings = load_settings()  # cold start: once per process, validated


class WrongFunction(RuntimeError):
    """This process was deployed as one function (RLCLEANUP_FUNCTION) but asked to run another's entry point:
    a deployment defect. The publish guard would check the wrong declaration, so nothing runs."""


def ports() -> Ports:
    global _ports
    with _lock:
        if _ports is None:
            _ports = cloud_ports(SETTINGS)
        return _ports


def serve_table(table: StageTable) -> None:
    """Serve `table` instead of the packaged stage table: only a development stack's functions source calls this
    (stack/table_entrypoints.py, started by `rlcleanup stack up --stages`); the deployed entry points never do."""
    global _table
    _table = table


def served_table() -> StageTable:
    """The stage table this process dispatches through (and whose topology it checks and accounts against)."""
    return _table or stage_table()


def serving(entry_point: str, settings: DeploymentSettings | None = None) -> FunctionSpec:
    """The topology entry of the function being invoked, cross-checked with the one this process was deployed as."""
    spec = served_table().topology.function(entry_point)
    deployed = (settings or SETTINGS).function
    if deployed is not None and deployed != spec.name:
        raise WrongFunction(f"this process serves {deployed} (RLCLEANUP_FUNCTION) but was invoked as {spec.name}")
    return spec


class Redeliver(InternalServerError):
    """HTTP 500 for a delivery whose failure is already logged (one line): Pub/Sub redelivers the message."""

    description = "delivery failed; Pub/Sub redelivers it (the function logged why)"


def serve_cloud_event(entry_point: str, cloud_event: Any) -> None:
    """functions-framework's view of an entry point: any failure answers HTTP 500 as an HTTP error, which Flask
    does not log (an unhandled exception it would log with a second traceback)."""
    try:
        handle_cloud_event(entry_point, cloud_event)
    except Exception as exc:
        raise Redeliver() from exc


def handle_cloud_event(entry_point: str, cloud_event: Any) -> str:
    started, cpu_before = time.monotonic(), time.process_time()
    outcome = "error"
    try:
        bind_cloud_event(
            cloud_event, entry_point, level=SETTINGS.log_level
        )  # JSON logs for Cloud Logging, with run/step/event/trace context
        result = _handle(entry_point, cloud_event)
        outcome = "permanent" if result.startswith(PERMANENT_PREFIX) else "ok"
        return result
    except BaseException as exc:
        outcome = f"error:{type(exc).__name__}"
        if isinstance(exc, Exception) and not already_logged(exc):
            log_failed_delivery(entry_point, exc)
        raise
    finally:
        account_invocation(entry_point, time.monotonic() - started, outcome, cpu_before=cpu_before)


def log_failed_delivery(entry_point: str, exc: Exception) -> None:
    """The one ERROR line of a failed delivery not logged where it was classified (a transient error, or a
    failure outside dispatch): one line, no traceback for a transient error, a traceback for anything else."""
    kind = error_kind(exc)
    transient = kind is ErrorKind.transient
    log.error(
        "%s failed, Pub/Sub redelivers it: %s",
        entry_point,
        defect_message(exc),
        exc_info=None if transient else exc,
        extra={"error": {"type": type(exc).__name__, "kind": kind.value, "redelivered": True}},
    )


def _handle(entry_point: str, cloud_event: Any) -> str:
    spec = serving(entry_point)
    p = ports()
    try:
        message = decode_cloud_event(cloud_event.data, cloud_event.get("source"))
        usage.pubsub_message(message.data, message.attributes)  # the push delivery is billed like the publish
    except PermanentError as exc:
        raw = _raw_copy(cloud_event.data)
        record_poison(guarded_ports(p, spec), entry_point, spec.dead_letter_topic, raw, {}, exc)
        return f"{PERMANENT_PREFIX}: {exc.code}"
    table = served_table()
    table.row(entry_point)  # fails closed (UnknownEntryPoint) before anything runs
    attributes = message.attributes
    if spec.trigger is None:  # the dead-letter recorder: which function's dead letter is the push's topic
        attributes = {**attributes, DEAD_LETTER_TOPIC: message.topic or ""}
    outcome = dispatch(
        p,
        entry_point,
        spec.dead_letter_topic,
        message.data,
        attributes,
        message_id=message.message_id,
        table=table,
    )
    log.info("%s: %s", entry_point, outcome, extra={"message_id": message.message_id})
    return outcome


# ---------------------------------------------------------------- per-invocation accounting


def peak_rss_mib() -> float:
    """This process's resident-set high-water mark in MiB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def account_invocation(
    entry_point: str,
    seconds: float,
    outcome: str,
    *,
    peak_mib: float | None = None,
    fraction: float | None = None,
    cpu_before: float | None = None,
) -> dict[str, Any]:
    """Log (and return) one invocation's accounting: duration and peak RSS against the function's caps, plus
    what the cost model sums: the process's CPU seconds before and after the invocation (`cpu_before_s`,
    `cpu_total_s`: process-wide, so concurrent deliveries in one process share them) and the running totals of
    billable requests this process made (ports/usage.py: gcs_class_a=... firestore_reads=...)."""
    peak = peak_rss_mib() if peak_mib is None else peak_mib
    fraction = SETTINGS.limit_warn_fraction if fraction is None else fraction
    fields: dict[str, Any] = {
        "entry_point": entry_point,
        "outcome": outcome,
        "invocation_seconds": round(seconds, 3),
        "peak_rss_mib": round(peak, 1),
    }
    if cpu_before is not None:
        fields |= {"cpu_before_s": round(cpu_before, 3), "cpu_total_s": round(time.process_time(), 3)}
        fields |= usage.totals()
    near: list[str] = []
    try:
        spec = served_table().topology.function(entry_point)
    except KeyError:
        spec = None
    if spec is not None:
        fields |= {"timeout_seconds": spec.timeout_seconds, "memory_mib": round(spec.memory_mib, 1)}
        if seconds > fraction * spec.timeout_seconds:
            near.append("timeout")
        if peak > fraction * spec.memory_mib:
            near.append("memory")
    if near:
        fields["near_limit"] = ",".join(near)
    level = logging.WARNING if near else logging.INFO
    log.log(level, format_accounting(fields), extra={"invocation": fields})
    return fields


def format_accounting(fields: dict[str, Any]) -> str:
    """`invocation entry_point=capture_part outcome=ok invocation_seconds=0.412 peak_rss_mib=96.1 ...`"""
    return ACCOUNTING_PREFIX + " ".join(f"{k}={v}" for k, v in fields.items())


def parse_accounting(message: str) -> dict[str, Any] | None:
    """The fields of an accounting message (numbers as floats), or None for any other message."""
    if not message.startswith(ACCOUNTING_PREFIX):
        return None
    fields: dict[str, Any] = {}
    for pair in message[len(ACCOUNTING_PREFIX) :].split():
        key, sep, value = pair.partition("=")
        if not sep:
            return None
        try:
            fields[key] = float(value) if key not in ("entry_point", "outcome", "near_limit") else value
        except ValueError:
            fields[key] = value
    return fields if {"entry_point", "outcome", "invocation_seconds", "peak_rss_mib"} <= fields.keys() else None


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
