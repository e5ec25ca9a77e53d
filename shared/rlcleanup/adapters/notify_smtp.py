"""An e-mail channel: one plain-text message per notice through the deployment's SMTP relay (stdlib smtplib).

The relay, the sender and the recipients are settings (RLCLEANUP_NOTIFY_SMTP_*), never a run's. A connection
error, a timeout or a 4xx reply is `NotificationUndelivered` (SMTP's transient class); a 5xx reply is
`NotificationRefused`."""

from __future__ import annotations

import smtplib
from email.message import EmailMessage

from rlcleanup.models.notifications import Notice
from rlcleanup.ports.notifier import NotificationRefused, NotificationUndelivered


class SmtpChannel:
    name = "email"

    def __init__(
        self, host: str, port: int, sender: str, recipients: tuple[str, ...], *, starttls: bool, timeout: float
    ) -> None:
        self.host, self.port, self.sender, self.recipients = host, port, sender, recipients
        self.starttls, self.timeout = starttls, timeout

    def send(self, notice: Notice) -> None:
        message = EmailMessage()
        message["Subject"] = notice.subject
        message["From"] = self.sender
        message["To"] = ", ".join(self.recipients)
        message.set_content(notice.text)
        where = f"SMTP relay {self.host}:{self.port}"
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
                if self.starttls:
                    smtp.starttls()
                smtp.send_message(message)
        except smtplib.SMTPResponseException as exc:
            if 400 <= exc.smtp_code < 500:
                raise NotificationUndelivered(f"{where}: {exc.smtp_code}") from None
            raise NotificationRefused(f"{where}: {exc.smtp_code}") from None
        except smtplib.SMTPRecipientsRefused as exc:
            raise NotificationRefused(f"{where}: {len(exc.recipients)} recipient(s) refused") from None
        except (OSError, smtplib.SMTPException) as exc:
            raise NotificationUndelivered(f"{where}: {type(exc).__name__}") from None
