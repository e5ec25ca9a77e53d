"""One place that decides: retry (transient) or record-and-ack (permanent bad input)."""

from __future__ import annotations

from pydantic import ValidationError

from rlcleanup.formats.config import ConfigError
from rlcleanup.ports.storage import StorageError, UnsafePathError
from rlcleanup.steps.layout import LayoutError


class PermanentError(Exception):
    """Bad input that no retry can fix: recorded on the run, dead-lettered, acked."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RetryLater(Exception):
    """Not an error of the input: the step must run again later (busy lease, fan-in partner not done)."""


def _transient_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [StorageError, ConnectionError, TimeoutError, RetryLater]
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
    if isinstance(exc, UnsafePathError):
        return PermanentError("unsafe_path", str(exc))
    if isinstance(exc, LayoutError | ConfigError):
        return PermanentError("unreadable_run", str(exc))
    if isinstance(exc, UnicodeDecodeError | ValueError | KeyError | TypeError):
        return PermanentError("bad_input", f"{type(exc).__name__}: {exc}")
    return None
