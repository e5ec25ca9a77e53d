"""Issue 38 item 7: a run that needs a person is told, once per run state, on a chat webhook and/or by e-mail.

The pipeline runs on the embedded default against the stand-in webhook (tests/servers/webhook_standin.py) and
the stand-in SMTP relay (tests/servers/smtp_standin.py), each its own process on a free port. The pipeline's clock
is fixed; the sweep's deadline re-check moves it."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from authority_support import pre_cancel_event

from rlcleanup.models.record import CompletionRecord, Deadline, RunError
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.report.notice import build_notice
from rlcleanup.report.verdict import build_verdict
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.settings import NotifySettings, unconfigured
from rlcleanup.sources.sweep import SweepRecords
from rlcleanup.textsafe import is_neutral, neutralise
from servers.notify_support import control, mails, messages, smtp_standin, webhook_standin
from servers.webhook_standin import GOOGLE_CHAT_PATH, SLACK_PATH

T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
TTL14 = timedelta(days=14)
HOUR = timedelta(hours=1)


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.at = now

    def now(self) -> datetime:
        return self.at


@pytest.fixture(autouse=True)
def _no_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with webhook_standin(tmp_path_factory.mktemp("webhook")) as base:
        yield base


@pytest.fixture(autouse=True)
def _fresh_webhook(webhook: str) -> None:
    control(webhook, 200, 0, reset=True)  # every test runs the same sample run ids


def _stack(tmp_path: Path, now: datetime, **notify: object) -> EmbeddedStack:
    conf = NotifySettings.model_validate(notify)
    settings = unconfigured().model_copy(update={"notify": conf})
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"), settings=settings)
    stack.ports.clock = _Clock(now)
    return stack


def _posted(webhook: str, run_id: str) -> list[str]:
    return [m["body"]["text"] for m in messages(webhook) if f"run {run_id} " in m["body"]["text"]]


def _only_record(stack: EmbeddedStack) -> CompletionRecord:
    [record] = list(stack.ports.records.list_runs())
    return record


def _ready_again(stack: EmbeddedStack, run_id: str) -> None:
    stack.bus.publish("record-ready", json.dumps({"run_id": run_id, "status": "x"}).encode(), {"run_id": run_id})
    stack.bus.drain()


def test_an_unresolved_selection_is_posted_once_per_state_with_verdict_need_and_command(
    tmp_path: Path, webhook: str
) -> None:
    run = write_sample_run(tmp_path / "runs", "completed-resumed")  # 4 valid exports, no declared policy
    stack = _stack(tmp_path, T0, webhook_url=webhook + SLACK_PATH)
    stack.emit(manual_event(str(run)))
    record = _only_record(stack)
    assert record.status is RecordStatus.awaiting_authority

    [text] = _posted(webhook, record.run_id)
    lines = text.splitlines()
    assert lines[0] == f"rlcleanup: run {record.run_id} needs a person"
    assert lines[1] == neutralise(build_verdict(record).line, keep_newlines=False)  # the one verdict, verbatim
    assert lines[2].startswith("needed: selection unresolved: choose among valid candidates")
    assert lines[3] == "by: no deadline"
    assert lines[4] == f"run: {record.run_uri}"  # where the run is, and its report (issue 47)
    assert record.report_uri is None  # not rendered in these tests (_no_report): no report line
    step = max(c.step for c in record.candidates if c.valid)
    # Slack's escaping (adapters/notify_webhook.slack_text): the placeholders arrive as `&lt;DEST&gt;`, shown <DEST>.
    assert lines[5] == (
        f"command: rlcleanup grant {record.run_id} --action publish --step {step} --destination &lt;DEST&gt; "
        "--key &lt;KEY&gt; --dry-run"
    )

    # At-least-once redelivery and a second record-ready of the same state post nothing.
    _ready_again(stack, record.run_id)
    _ready_again(stack, record.run_id)
    assert len(_posted(webhook, record.run_id)) == 1

    # A new state (a person's item closed) posts exactly once more.
    stack.ports.records.update(record.run_id, {"remaining_work": record.remaining_work[1:]})
    _ready_again(stack, record.run_id)
    _ready_again(stack, record.run_id)
    posted = _posted(webhook, record.run_id)
    assert len(posted) == 2 and "selection unresolved" not in posted[1].splitlines()[2]


def test_a_deadline_is_posted_when_the_run_needs_a_person_again_when_close_and_when_passed(
    tmp_path: Path, webhook: str
) -> None:
    run = write_sample_run(tmp_path / "runs", "deferred-export")
    stamp = T0.timestamp()
    for path in [*(tmp_path / "runs" / "tmp" / "ttl=14d").rglob("*")]:
        os.utime(path, (stamp, stamp))
    dies = T0 + TTL14
    stack = _stack(tmp_path, dies - 48 * HOUR, webhook_url=webhook + SLACK_PATH, deadline_warning_hours=24)
    stack.emit(manual_event(str(run)))
    record = _only_record(stack)
    assert record.status is RecordStatus.needs_person and record.deadlines

    [first] = _posted(webhook, record.run_id)
    assert f"by: {dies.isoformat(timespec='minutes')} (in 48 h)" in first.splitlines()
    assert "needs person by" in first.splitlines()[2]

    def sweep_at(now: datetime) -> None:
        stack.ports.clock = _Clock(now)
        stack.bus.publish("sweep", SweepRecords().model_dump_json().encode(), {"kind": "records"})
        stack.bus.drain()

    sweep_at(dies - 30 * HOUR)  # not yet within the warning: the same state, nothing posted
    assert len(_posted(webhook, record.run_id)) == 1
    sweep_at(dies - 12 * HOUR)  # close now: one reminder
    sweep_at(dies - 11 * HOUR)  # the sweep sees the same state again: nothing
    soon = _posted(webhook, record.run_id)
    assert len(soon) == 2 and soon[1].startswith(f"rlcleanup: run {record.run_id} needs a person (deadline soon)")
    assert "(in 12 h)" in soon[1]
    sweep_at(dies + HOUR)  # passed: said once more
    sweep_at(dies + 2 * HOUR)
    passed = _posted(webhook, record.run_id)
    assert len(passed) == 3 and "(deadline passed)" in passed[2].splitlines()[0]
    assert f"by: {dies.isoformat(timespec='minutes')} (passed)" in passed[2]


def test_a_failed_post_is_retried_then_recorded_on_the_run_without_the_secret(tmp_path: Path, webhook: str) -> None:
    run = write_sample_run(tmp_path / "runs", "completed-resumed")
    control(webhook, 503, 1)  # the first post fails: the redelivery posts, once
    stack = _stack(tmp_path, T0, webhook_url=webhook + SLACK_PATH)
    stack.emit(manual_event(str(run)))
    record = _only_record(stack)
    assert len(_posted(webhook, record.run_id)) == 1 and not record.errors

    control(webhook, 503, -1)  # the service is down for good: bounded retries, then recorded, pipeline untouched
    stack.ports.records.update(record.run_id, {"remaining_work": record.remaining_work[1:]})
    _ready_again(stack, record.run_id)
    after = stack.ports.records.get(record.run_id)
    assert after is not None and after.status is RecordStatus.awaiting_authority
    [failure] = [e for e in after.errors if e.code == "notification_failed"]
    assert failure.step == "notify" and "HTTP 503" in failure.message and "3 attempts" in failure.message
    assert "standinwebhooktoken" not in failure.message and SLACK_PATH not in failure.message
    control(webhook, 200, 0)
    _ready_again(stack, record.run_id)  # that state was given up (recorded): no late duplicate
    assert len(_posted(webhook, record.run_id)) == 1


def test_google_chat_webhook_and_email_each_get_one_message_per_state(tmp_path: Path, webhook: str) -> None:
    run = write_sample_run(tmp_path / "runs", "completed-resumed")
    with smtp_standin(tmp_path / "smtp", fail=1) as (port, out):  # the relay's first MAIL FROM is a 451
        stack = _stack(
            tmp_path,
            T0,
            webhook_url=webhook + GOOGLE_CHAT_PATH,
            webhook_kind="google_chat",
            smtp_host="127.0.0.1",
            smtp_port=port,
            smtp_from="rlcleanup@example.org",
            smtp_to="oncall@example.org,ml@example.org",
        )
        stack.emit(manual_event(str(run)))
        record = _only_record(stack)
        _ready_again(stack, record.run_id)
        [chat] = [m for m in messages(webhook) if f"run {record.run_id} " in m["body"]["text"]]
        assert chat["path"].startswith("/v1/spaces/") and chat["body"] == {"text": chat["body"]["text"]}
        [mail] = mails(out)
        assert mail["to"] == ["oncall@example.org", "ml@example.org"] and mail["from"] == "rlcleanup@example.org"
        assert f"Subject: rlcleanup: run {record.run_id} needs a person" in mail["data"]
        assert "command: rlcleanup grant" in mail["data"]


def test_the_message_is_bounded_neutral_and_only_for_a_person() -> None:
    hostile = "\x1b]52;c;cHduZWQ=\x07\u202eevil " + "x" * 5000
    record = CompletionRecord(
        run_id="r-1",
        run_uri="gs://b/r",
        status=RecordStatus.needs_person,
        remaining_work=[hostile] * 9,
        deadlines=[Deadline(at=T0 + HOUR, source="export", item=hostile)],
        errors=[RunError(step="notify", code="notification_failed", message="earlier failure")],
    )
    notice = build_notice(record, T0, warning=timedelta(hours=24))
    assert notice is not None and len(notice.text) <= 3000
    assert all(is_neutral(line, keep_newlines=False) for line in notice.text.splitlines())
    assert "(+4 more)" in notice.text and "(deadline soon)" in notice.subject
    # a recorded notification failure is not part of the state it reports
    cleared = record.model_copy(update={"errors": []})
    again = build_notice(cleared, T0, warning=timedelta(hours=24))
    assert again is not None and again.digest == notice.digest
    assert build_notice(record.model_copy(update={"status": RecordStatus.in_progress}), T0, warning=HOUR) is None
    done = record.model_copy(update={"status": RecordStatus.complete, "remaining_work": [], "deadlines": []})
    assert build_notice(done, T0, warning=HOUR) is None
    line = build_notice(done, T0, warning=HOUR, on_complete=True)
    assert line is not None and line.subject == "rlcleanup: run r-1 finished, nothing needs a person"


def test_the_webhook_secret_is_read_from_secret_manager_and_never_shown() -> None:
    import base64

    from rlcleanup.adapters.notify_webhook import WebhookChannel
    from rlcleanup.adapters.secret_manager import access_secret
    from rlcleanup.models.notifications import Notice
    from rlcleanup.ports.notifier import NotificationUndelivered

    url = "https://hooks.slack.com/services/T1/B2/sekrettoken123"
    asked: list[str] = []

    class _Answer:
        status_code = 200

        def json(self) -> dict[str, object]:
            return {"name": "v", "payload": {"data": base64.b64encode(url.encode()).decode()}}

    class _Session:
        def get(self, where: str, *, timeout: float) -> _Answer:
            asked.append(where)
            return _Answer()

    version = "projects/p/secrets/rlcleanup-notify-webhook/versions/latest"
    assert access_secret(version, session=_Session()) == url
    assert asked == [f"https://secretmanager.googleapis.com/v1/{version}:access"]

    unreachable = WebhookChannel("http://127.0.0.1:9/services/T1/B2/sekrettoken123", "slack", timeout=1)
    with pytest.raises(NotificationUndelivered) as caught:
        unreachable.send(Notice(run_id="r", digest="0" * 16, subject="s", text="t"))
    assert "sekrettoken123" not in str(caught.value) and "sekrettoken123" not in repr(unreachable)


def test_a_bad_webhook_url_is_named_without_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlcleanup.settings import SettingsError, load_settings

    monkeypatch.setenv("RLCLEANUP_NOTIFY_WEBHOOK_URL", "ftp://hooks.example/sekret")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "RLCLEANUP_NOTIFY_WEBHOOK_URL" in str(caught.value) and "sekret" not in str(caught.value)


def test_the_webhook_token_never_reaches_a_log_line_even_at_debug(
    webhook: str, caplog: pytest.LogCaptureFixture
) -> None:
    from rlcleanup.adapters.notify_webhook import WebhookChannel
    from rlcleanup.models.notifications import Notice

    caplog.set_level(logging.DEBUG)
    WebhookChannel(webhook + SLACK_PATH, "slack").send(Notice(run_id="r", digest="0" * 16, subject="s", text="t"))
    assert len(messages(webhook)) == 1
    assert "POST /[REDACTED]" in caplog.text  # urllib3's wire line is there, without the path
    assert "standinwebhooktoken" not in caplog.text and SLACK_PATH not in caplog.text


def test_an_unexplained_failure_before_a_cancel_tells_a_person_the_cause_command(tmp_path: Path, webhook: str) -> None:
    from authority_support import make_world

    from rlcleanup.authority.precancel import signature_id

    w = make_world(tmp_path, "completed-resumed", run=False)
    w.stack.ports.settings = w.stack.ports.settings.model_copy(
        update={"notify": NotifySettings(webhook_url=webhook + SLACK_PATH)}
    )
    for row, log in enumerate(sorted((w.tmp / "runs").rglob("attempts/*/logs/finelog.log"))[:2]):
        log.write_text(
            log.read_text() + 'Traceback (most recent call last):\n  File "/app/t.py", line 4, in train\n'
            f"ValueError: reward function returned NaN for row {1000 + row}\n"
        )
    event = pre_cancel_event(w.run_uri)
    w.stack.bus.publish("pre-cancel", event.model_dump_json().encode(), {})
    w.stack.bus.drain()
    record = w.record
    assert record.pre_cancel is not None and record.pre_cancel.unexplained_reproducing
    [text] = _posted(webhook, w.run_id)
    signature = record.pre_cancel.unexplained_reproducing[0]
    assert f"needed: explain reproducing failure {signature} before the cancel proceeds" in text
    assert f'command: rlcleanup cause {w.run_id} {signature_id(signature)} --note "&lt;why it fails&gt;"' in text


def test_a_failed_run_points_at_show_first() -> None:
    record = CompletionRecord(
        run_id="r-2",
        run_uri="gs://b/r",
        status=RecordStatus.awaiting_authority,
        remaining_work=["diagnose the first causal error before any relaunch", "reclaim: needs a separate reclaim"],
    )
    notice = build_notice(record, T0, warning=HOUR)
    assert notice is not None and notice.text.splitlines()[-1] == "command: rlcleanup show r-2"


def test_the_message_names_the_error_the_run_and_the_report() -> None:
    """Issue 47: a notification carries the error's own text, the run's location and a link to its report."""
    record = CompletionRecord(
        run_id="r-3",
        run_uri="gs://runs/durable/math-rl/2026.11.30",
        status=RecordStatus.failed,
        remaining_work=["rlcleanup could not finish step capture_part (retries_exhausted): see errors[]"],
        report_uri="gs://evidence/r-3/derived/report.html",
        errors=[
            RunError(step="capture_part", code="retries_exhausted", message="terminal.json: streamed 1,024 bytes"),
            RunError(step="notify", code="notify_failed", message="hidden: not part of the state it reports"),
        ],
    )
    notice = build_notice(record, T0, warning=HOUR)
    assert notice is not None
    lines = notice.text.splitlines()
    assert "run: gs://runs/durable/math-rl/2026.11.30" in lines
    assert "report: https://storage.cloud.google.com/evidence/r-3/derived/report.html" in lines
    assert "error: capture_part: retries_exhausted: terminal.json: streamed 1,024 bytes" in lines
    assert lines[-1].startswith("command: ")


def test_slack_gets_its_three_control_characters_escaped() -> None:
    """Slack reads `<`, `>` and `&` as markup (https://api.slack.com/reference/surfaces/formatting#escaping):
    a placeholder like `<DEST>` would vanish as a broken link; exactly those three are escaped, `&` first."""
    from rlcleanup.adapters.notify_webhook import slack_text

    assert slack_text("--destination <DEST> & <KEY>") == "--destination &lt;DEST&gt; &amp; &lt;KEY&gt;"
    assert slack_text("&lt;") == "&amp;lt;"  # a run's own text shows as written, never read as an entity
    assert slack_text("plain 'quotes' \"stay\"") == "plain 'quotes' \"stay\""


def test_a_report_link_is_percent_encoded_as_urllib_would() -> None:
    from urllib.parse import quote

    from rlcleanup.report.notice import report_link

    odd = "evidence/run 1/é#?&%/derived/report.html"
    assert report_link(f"gs://{odd}") == "https://storage.cloud.google.com/" + quote(odd, safe="/")
    assert report_link("/home/me/preserved/r/derived/report.html") == "/home/me/preserved/r/derived/report.html"
