"""The notify function (record-ready): tell a person about a run that waits on one (report/notice.py decides
whether and what), on every channel the deployment configures (RLCLEANUP_NOTIFY_*: a chat webhook and/or e-mail).

Once per run, state and channel: the claim `notify:<state digest>:<channel>` makes a redelivery, a re-render or a
second record-ready of the same state post nothing, while a new state (the sweep's deadline re-check, a record that
changed) posts once more. A channel that does not take the message is retried by redelivery (the claim is released)
up to `max_attempts` deliveries, then given up: the failure is written on the record (`notification_failed`) and
the claim completed, so nothing waits on a chat service. The webhook URL is a secret: read from Secret Manager at run
time when `webhook_secret` names its version, never logged (channels name their host only).
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from functools import cache

from rlcleanup.authority import precancel
from rlcleanup.errors import PermanentError, RunErrorCode
from rlcleanup.models.documents import AttemptCount
from rlcleanup.models.notifications import Notice, NotificationSent
from rlcleanup.models.record import RunError
from rlcleanup.ports.collections import NOTIFY_ATTEMPTS
from rlcleanup.ports.notifier import NotificationChannel, NotificationRefused, NotificationUndelivered
from rlcleanup.report.notice import NOTIFY_STEP, build_notice
from rlcleanup.runtime.claims import once_ran
from rlcleanup.runtime.ports import Ports

log = logging.getLogger(__name__)


@cache
def _secret(version: str) -> str:
    """One read per process and version (a new version is a new deployment's variable)."""
    from rlcleanup.adapters.secret_manager import access_secret

    return access_secret(version)


def channels(p: Ports) -> list[NotificationChannel]:
    """The channels the settings configure, from the channel registry (none: notifications are off)."""
    return p.channels.configured(p.settings.notify, _secret)


def notify(p: Ports, data: bytes, attributes: dict[str, str]) -> str:
    payload = json.loads(data)
    run_id = payload.get("run_id") if isinstance(payload, dict) else None
    if not isinstance(run_id, str):
        raise PermanentError("bad_input", "record-ready message without run_id")
    conf = p.settings.notify
    if not conf.configured:
        return "notifications not configured"
    record = p.records.get(run_id)
    if record is None:
        return f"no record {run_id}: nothing to tell"
    warning = timedelta(hours=conf.deadline_warning_hours)
    notice = build_notice(
        record, p.clock.now(), warning=warning, on_complete=conf.on_complete, signature_id=precancel.signature_id
    )
    if notice is None:
        return f"{run_id}: nothing for a person"
    outcomes = []
    for channel in channels(p):
        outcomes.append(f"{channel.name}: " + _once_per_state(p, channel, notice))
    return f"{run_id} state {notice.digest}: " + "; ".join(outcomes)


def _once_per_state(p: Ports, channel: NotificationChannel, notice: Notice) -> str:
    key = f"notify:{notice.digest}:{channel.name}"

    def deliver() -> NotificationSent:
        return _deliver(p, channel, notice, key)

    ran = once_ran(p, notice.run_id, key, deliver, model=NotificationSent)
    if ran.repeat:
        return "already told"
    sent = ran.result
    return "posted" if sent.delivered else f"gave up after {sent.attempts} attempt(s)"


def _deliver(p: Ports, channel: NotificationChannel, notice: Notice, key: str) -> NotificationSent:
    try:
        channel.send(notice)
    except NotificationUndelivered as exc:
        attempts = _count_attempt(p, notice.run_id, key)
        if attempts < p.settings.notify.max_attempts:
            log.warning(
                "notification to %s for %s not delivered (attempt %d): %s", channel.name, notice.run_id, attempts, exc
            )
            raise  # released: the message is redelivered with backoff
        return _give_up(p, channel, notice, f"{exc} ({attempts} attempts)", attempts)
    except NotificationRefused as exc:
        return _give_up(p, channel, notice, str(exc), _count_attempt(p, notice.run_id, key))
    return NotificationSent(channel=channel.name, digest=notice.digest, delivered=True)


def _give_up(p: Ports, channel: NotificationChannel, notice: Notice, why: str, attempts: int) -> NotificationSent:
    message = f"{channel.name}: state {notice.digest} not delivered: {why}"[:2000]
    p.records.add_errors(
        notice.run_id, [RunError(step=NOTIFY_STEP, code=RunErrorCode.notification_failed, message=message)]
    )
    log.error("notification for %s given up: %s", notice.run_id, message)
    return NotificationSent(channel=channel.name, digest=notice.digest, delivered=False, attempts=attempts)


def _count_attempt(p: Ports, run_id: str, key: str) -> int:
    doc_id = f"{run_id}:{key}"
    counts = NOTIFY_ATTEMPTS.bind(p.records, AttemptCount)
    seen = counts.get(doc_id) or AttemptCount()
    counts.put(doc_id, AttemptCount(attempts=seen.attempts + 1))
    return seen.attempts + 1
