"""Where a notice goes: a chat webhook or an e-mail relay (adapters/notify_webhook.py, adapters/notify_smtp.py).

A channel either delivers or raises one of the two errors below; neither error's text may hold the channel's
secret (a webhook URL carries its token): adapters name the host, never the URL."""

from __future__ import annotations

from typing import Protocol

from rlcleanup.errors import PermanentError, TransientError
from rlcleanup.models.notifications import Notice


class NotificationUndelivered(TransientError):
    """The channel did not take the message now (connection, timeout, 429, 5xx): worth another delivery."""


class NotificationRefused(PermanentError):
    """The channel refused the message for good (4xx but 408/429: a revoked or wrong webhook, a bad address)."""

    def __init__(self, message: str) -> None:
        super().__init__("notification_refused", message)


class UnknownChannelError(PermanentError):
    """A channel name no adapter is registered for (adapters/notify_registry.py): refused, never skipped."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__("unknown_channel", f"no notification channel {name!r} (known: {', '.join(known)})")
        self.name = name


class NotificationChannel(Protocol):
    @property
    def name(self) -> str:
        """A stable name for claim keys and the record (`webhook:slack`, `email`): never the secret."""
        ...

    def send(self, notice: Notice) -> None: ...
