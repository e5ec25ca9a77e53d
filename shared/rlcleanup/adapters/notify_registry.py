"""The notification channel registry: which channels exist, and how each is built from the notify settings.

The one place that knows channels (as adapters/controllers/registry.py knows controllers). Each `ChannelKind` names
a channel and builds its adapter from `NotifySettings`, or None when this deployment does not configure it. The
notify function (runtime/notify_handler.py) asks the registry; it sees only the `NotificationChannel` port.

Failing closed: a channel name nobody registered (`RLCLEANUP_NOTIFY_CHANNELS`) is `UnknownChannelError` naming the
known ones, never skipped. Adding a channel = its adapter module, one `ChannelKind` in `BUILTIN` and its settings in
settings.py `NotifySettings` (docs/architecture.md, "Add a notification channel").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlcleanup.adapters.named_registry import NamedRegistry
from rlcleanup.errors import PermanentError
from rlcleanup.ports.notifier import NotificationChannel, UnknownChannelError
from rlcleanup.settings import NotifySettings

SecretReader = Callable[[str], str]  # a Secret Manager version resource -> its value


@dataclass(frozen=True)
class ChannelKind:
    name: str
    build: Callable[[NotifySettings, SecretReader], NotificationChannel | None]  # None: not configured here


class ChannelRegistry(NamedRegistry[ChannelKind]):
    """Immutable: a deployment or a test extends one by building another from its `kinds`."""

    noun = "notification channels"

    def build(self, name: str, conf: NotifySettings, secret: SecretReader) -> NotificationChannel | None:
        """The named channel as these settings configure it (None: not configured); an unknown name is
        `UnknownChannelError`."""
        kind = self._kinds.get(name)
        if kind is None:
            raise UnknownChannelError(name, self.names)
        return kind.build(conf, secret)

    def configured(self, conf: NotifySettings, secret: SecretReader) -> list[NotificationChannel]:
        """The channels to post on: those `conf.channels` names (each must be registered), else every registered
        channel these settings configure, in registration order."""
        built = [self.build(name, conf, secret) for name in (conf.channels or tuple(self._kinds))]
        return [channel for channel in built if channel is not None]


def _webhook(conf: NotifySettings, secret: SecretReader) -> NotificationChannel | None:
    url = secret(conf.webhook_secret) if conf.webhook_secret else conf.webhook_url
    if not url:
        return None
    if not url.startswith(("https://", "http://")):
        raise PermanentError("bad_webhook", "the webhook secret holds no http(s) URL")  # never the value
    from rlcleanup.adapters.notify_webhook import WebhookChannel

    return WebhookChannel(url, conf.webhook_kind, conf.timeout_seconds)


def _email(conf: NotifySettings, secret: SecretReader) -> NotificationChannel | None:
    if not (conf.smtp_host and conf.smtp_to):
        return None
    from rlcleanup.adapters.notify_smtp import SmtpChannel

    sender = conf.smtp_from or "rlcleanup@localhost"
    return SmtpChannel(
        conf.smtp_host, conf.smtp_port, sender, conf.smtp_to, starttls=conf.smtp_starttls, timeout=conf.timeout_seconds
    )


BUILTIN = ChannelRegistry([ChannelKind("webhook", _webhook), ChannelKind("email", _email)])
