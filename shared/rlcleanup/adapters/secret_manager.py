"""Read one Secret Manager secret version at run time (the notify function's webhook URL).

`versions/*:access` of the Secret Manager REST API v1 (https://cloud.google.com/secret-manager/docs/reference/rest/
v1/projects.secrets.versions/access): `{"name": ..., "payload": {"data": <base64>}}`, called with the function's
own credentials (google-auth's AuthorizedSession), so the service account's secretAccessor on that one secret is all
it needs. The value is never logged; errors name the secret's resource, not its value."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Protocol

from rlcleanup.errors import PermanentError, TransientError

ENDPOINT = "https://secretmanager.googleapis.com/v1"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class _Session(Protocol):
    def get(self, url: str, *, timeout: float) -> Any: ...


class SecretUnavailable(TransientError):
    """Secret Manager did not answer now."""


def _session() -> _Session:
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=[SCOPE])
    return AuthorizedSession(credentials)


def access_secret(version: str, *, session: _Session | None = None, timeout: float = 10.0) -> str:
    """The secret version's payload as text (`version`: projects/<p>/secrets/<s>/versions/<v>)."""
    try:
        response = (session or _session()).get(f"{ENDPOINT}/{version}:access", timeout=timeout)
    except Exception as exc:
        raise SecretUnavailable(f"secret {version}: {type(exc).__name__}") from None
    status = int(response.status_code)
    if status == 429 or status >= 500:
        raise SecretUnavailable(f"secret {version}: HTTP {status}")
    if status != 200:
        raise PermanentError("secret_unreadable", f"secret {version}: HTTP {status} (secretAccessor on it?)")
    try:
        return base64.b64decode(response.json()["payload"]["data"]).decode().strip()
    except (KeyError, TypeError, ValueError, binascii.Error, UnicodeDecodeError):
        raise PermanentError("secret_unreadable", f"secret {version}: no text payload") from None
