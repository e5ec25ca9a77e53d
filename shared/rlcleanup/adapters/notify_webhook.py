"""A chat webhook channel: Slack incoming webhooks and Google Chat space webhooks both take a JSON body
`{"text": "..."}` by POST (Slack: https://api.slack.com/messaging/webhooks; Google Chat:
https://developers.google.com/workspace/chat/quickstart/webhooks, `spaces.messages.create`'s Message.text).

Slack reads `<`, `>` and `&` in `text` as its control characters (links, mentions); its formatting reference
(https://api.slack.com/reference/surfaces/formatting#escaping) says to replace exactly those three with `&lt;`,
`&gt;` and `&amp;` and nothing else, so a placeholder such as `--destination <DEST>` or a run's own text shows as
written (`slack_text`). Google Chat's text takes them as written.

The URL is a secret (Slack's path and Google Chat's `key`/`token` query hold the token): it never appears in an
error, a log line or the record; errors name the host only. A connection error, a timeout, 408, 429 or a 5xx is
`NotificationUndelivered` (another delivery may succeed); any other non-2xx is `NotificationRefused`."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import requests

from rlcleanup.models.notifications import Notice
from rlcleanup.ports.notifier import NotificationRefused, NotificationUndelivered

RETRYABLE = {408, 429}
# urllib3 logs each request's path and query at DEBUG ("POST /services/T/B/<token> HTTP/1.1" 200): with
# RLCLEANUP_LOG_LEVEL=DEBUG that line would carry the token, so its logger hides every webhook's path and query.
_WIRE_LOGGER = "urllib3.connectionpool"


class _HideWebhook(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = message
        for secret in self.secrets:
            hidden = hidden.replace(secret, "/[REDACTED]")
        if hidden != message:
            record.msg, record.args = hidden, ()
        return True


_HIDE = _HideWebhook()
logging.getLogger(_WIRE_LOGGER).addFilter(_HIDE)


def slack_text(text: str) -> str:
    """Text as Slack shows it literally: `&` first, then `<` and `>` (Slack's escaping rule, nothing more)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _path_and_query(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


class WebhookChannel:
    def __init__(self, url: str, kind: str, timeout: float = 10.0, session: requests.Session | None = None) -> None:
        self._url = url
        self.kind = kind
        self.host = urlsplit(url).hostname or "?"
        self._timeout = timeout
        self._session = session or requests.Session()
        if len(_path_and_query(url)) > 1:
            _HIDE.secrets.add(_path_and_query(url))

    @property
    def name(self) -> str:
        return f"webhook:{self.kind}"

    def __repr__(self) -> str:  # never the URL
        return f"WebhookChannel({self.kind} at {self.host})"

    def send(self, notice: Notice) -> None:
        where = f"{self.kind} webhook at {self.host}"
        try:
            response = self._session.post(
                self._url,
                json={"text": slack_text(notice.text) if self.kind == "slack" else notice.text},
                headers={"Content-Type": "application/json; charset=UTF-8"},
                timeout=self._timeout,
                allow_redirects=False,  # a redirect could send the message (and the token in its URL) elsewhere
            )
        except requests.RequestException as exc:
            raise NotificationUndelivered(f"{where}: {type(exc).__name__}") from None  # its text may hold the URL
        if 200 <= response.status_code < 300:
            return
        if response.status_code in RETRYABLE or response.status_code >= 500:
            raise NotificationUndelivered(f"{where}: HTTP {response.status_code}")
        raise NotificationRefused(f"{where}: HTTP {response.status_code}")
