"""One place that decides: retry (transient) or record-and-ack (permanent bad input)."""

from __future__ import annotations

from pydantic import ValidationError

from rlcleanup.formats.config import ConfigError
from rlcleanup.ports.storage import StorageAccessError, StorageError, UnknownSchemeError, UnsafePathError
from rlcleanup.steps.layout import LayoutError


class PermanentError(Exception):
    """Bad input that no retry can fix: recorded on the run, dead-lettered, acked."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RetryLater(Exception):
    """Not an error of the input: the step must run again later (busy lease, fan-in partner not done)."""


class RecordStoreUnavailable(Exception):
    """The record store (Firestore) did not answer within its bounded deadline: transient. The delivery fails
    (HTTP 500) and Pub/Sub redelivers it with backoff; nothing was acked, so nothing is lost."""

    def __init__(self, run_id: str | None, step: str | None, operation: str, cause: BaseException) -> None:
        self.run_id = run_id
        self.step = step
        self.operation = operation
        self.cause = f"{type(cause).__name__}: {cause}".splitlines()[0][:300]
        super().__init__(
            f"record store unavailable: run {run_id or '?'}, step {step or '?'}, {operation} failed: {self.cause}"
            " (transient: the delivery fails and Pub/Sub redelivers it)"
        )


class RecordStoreLost(PermanentError):
    """The record store came back without the data written before (an emulator restarted without persistence;
    never real Firestore). Retrying cannot bring the run's record and claims back: the run must be re-emitted."""

    def __init__(self, run_id: str | None, step: str | None, since: str) -> None:
        self.run_id = run_id
        self.step = step
        super().__init__(
            "record_store_lost",
            f"run {run_id or '?'}, step {step or '?'}: the record store lost every record and claim written before "
            f"{since} (the database was reset under this worker); this run's progress is gone: re-emit its terminal "
            "event (`rlcleanup emit --run-uri ... --state ...`) to redo it from scratch (preserved evidence is reused)",
        )


def _transient_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [
        StorageError,
        ConnectionError,
        TimeoutError,
        RetryLater,
        RecordStoreUnavailable,
    ]
    try:
        from google.api_core import exceptions as gexc

        types += [
            gexc.ServiceUnavailable,
            gexc.InternalServerError,
            gexc.TooManyRequests,
            gexc.DeadlineExceeded,
            gexc.Aborted,
            gexc.GatewayTimeout,
            gexc.BadGateway,
            gexc.RetryError,
        ]
    except ImportError:  # pragma: no cover - google-api-core ships with the client libraries
        pass
    try:
        import requests

        types += [requests.ConnectionError, requests.Timeout]
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


TRANSIENT = _transient_types()


def classify_error(exc: BaseException) -> PermanentError | None:
    """None = transient (let it raise → 500 → redelivery). Otherwise the permanent error to record."""
    if isinstance(exc, PermanentError):
        return exc
    if isinstance(exc, TRANSIENT):
        return None
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return PermanentError("invalid_message", f"{first['msg']} at {'.'.join(map(str, first['loc']))}")
    if isinstance(exc, StorageAccessError):
        return PermanentError("storage_access", str(exc))
    if isinstance(exc, UnsafePathError):
        return PermanentError("unsafe_path", str(exc))
    if isinstance(exc, UnknownSchemeError):
        return PermanentError(exc.code, str(exc))
    if isinstance(exc, LayoutError | ConfigError):
        return PermanentError("unreadable_run", str(exc))
    if isinstance(exc, UnicodeDecodeError | ValueError | KeyError | TypeError):
        return PermanentError("bad_input", f"{type(exc).__name__}: {exc}")
    return None
