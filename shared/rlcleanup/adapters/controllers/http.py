"""The one HTTP client of the controller adapters: one timeout, one retry policy, one error mapping.

Modelled on huggingface_hub's `utils/_http.py` (`http_backoff`: retry idempotent calls on connection errors,
timeouts and 429/5xx with exponential backoff; `hf_raise_for_status`: turn a response into a typed error carrying
the server's own message). Every call the controllers get is a read (Ray `GET /api/jobs/...`, Iris's ListJobs,
GetJobState, GetJobStatus), so every call may be retried.

The mapping (ports/controllers.py): a connection error, a timeout, or a retryable status still failing after the
last attempt is `ControllerUnavailable` (transient); any other non-2xx status, or a body that is not JSON, is
`ControllerRefused` (permanent) naming the status, the server's error code (Connect's `code`, FastAPI's `detail`)
and its message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests

from rlcleanup.ports.controllers import ControllerRefused, ControllerUnavailable

DEFAULT_TIMEOUT_SECONDS = 10.0
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3  # the first call and two retries: a poll or a capture waits seconds, not minutes
    backoff_seconds: float = 0.5  # doubled after each failed attempt
    max_backoff_seconds: float = 4.0

    def pause(self, attempt: int) -> float:
        return min(self.backoff_seconds * 2**attempt, self.max_backoff_seconds)


@dataclass
class HttpClient:
    """JSON over HTTP to one controller at `base_url`; `name` prefixes every error ("ray", "iris")."""

    name: str
    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    session: requests.Session = field(default_factory=requests.Session)

    def get_json(self, path: str) -> Any:
        return self._json(self.request("GET", path))

    def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        return self._json(self.request("POST", path, json=dict(body)))

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """The response of the first attempt that is neither a connection failure nor a retryable status;
        a typed error (module docstring) otherwise."""
        url = f"{self.base_url.rstrip('/')}{path}"
        for attempt in range(self.retry.attempts):
            last = attempt + 1 == self.retry.attempts
            try:
                response = self.session.request(method, url, headers=dict(self.headers), timeout=self.timeout, **kwargs)
            except (requests.ConnectionError, requests.Timeout) as exc:
                if last:
                    raise ControllerUnavailable(self.name, f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            else:
                if response.status_code not in RETRY_STATUSES:
                    raise_for_status(self.name, method, path, response)
                    return response
                if last:
                    raise ControllerUnavailable(self.name, f"{method} {path}: {_describe(response)}")
            self.sleep(self.retry.pause(attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def _json(self, response: requests.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise ControllerRefused(self.name, f"answered no JSON: {exc}", status=response.status_code) from exc


def raise_for_status(name: str, method: str, path: str, response: requests.Response) -> None:
    """Nothing for a 2xx; `ControllerRefused` with the server's error code and message otherwise."""
    if response.ok:
        return
    raise ControllerRefused(
        name, f"{method} {path}: {_describe(response)}", status=response.status_code, reason=_error(response)[0]
    )


def _describe(response: requests.Response) -> str:
    code, message = _error(response)
    return f"{code} (HTTP {response.status_code}): {message}"


def _error(response: requests.Response) -> tuple[str, str]:
    """(code, message) from the error body: Connect's `{"code", "message"}`, FastAPI's `{"detail"}`, else text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or body.get("error") or response.reason
        return str(body.get("code") or "error"), str(message)[:500]
    return "error", (response.text or response.reason or "")[:500]
