"""Notification channels are a registry that fails closed (docs/architecture.md, "Add a notification channel"): a
new channel is its adapter (here a class in the test), one `ChannelKind` and its settings; a channel name nobody
registered is refused as `unknown_channel` and dead-lettered, never skipped."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.notify_registry import BUILTIN, ChannelKind, ChannelRegistry
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.models.notifications import Notice
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.notifier import UnknownChannelError
from rlcleanup.runtime.handlers import dispatch
from rlcleanup.runtime.ports import Ports
from rlcleanup.settings import NotifySettings


class PagerChannel:
    """A channel of the test's own: it keeps what it was sent."""

    def __init__(self) -> None:
        self.sent: list[Notice] = []

    @property
    def name(self) -> str:
        return "pager"

    def send(self, notice: Notice) -> None:
        self.sent.append(notice)


def _ports(tmp_path: Path, registry: ChannelRegistry, **notify: object) -> tuple[Ports, InProcessBus]:
    bus = InProcessBus()
    db = tmp_path / "r.db"
    ports = Ports(storage=LocalStorage(), records=SqliteRunRecords(db), claims=SqliteIdempotencyStore(db), bus=bus)
    settings = ports.settings.model_copy(update={"notify": NotifySettings.model_validate(notify)})
    ports = replace(ports, settings=settings, channels=registry)
    ports.records.create_if_absent(CompletionRecord(run_id="r", run_uri="/runs/r", status=RecordStatus.complete))
    return ports, bus


def _ready(ports: Ports) -> str:
    data = json.dumps({"run_id": "r", "status": "complete"}).encode()
    return dispatch(ports, "notify", "notify-dlq", data, {"run_id": "r"}, message_id="m1")


def test_a_channel_added_through_the_registry_alone_is_posted_once_per_state(tmp_path: Path) -> None:
    pager = PagerChannel()
    registry = ChannelRegistry([*BUILTIN.kinds, ChannelKind("pager", lambda conf, secret: pager)])
    ports, _ = _ports(tmp_path, registry, channels="pager", on_complete=True)
    assert "pager: posted" in _ready(ports)
    assert "pager: already told" in _ready(ports)
    assert [n.run_id for n in pager.sent] == ["r"]


def test_an_unknown_channel_is_refused_and_dead_lettered(tmp_path: Path) -> None:
    ports, bus = _ports(tmp_path, BUILTIN, channels="pager", on_complete=True)
    answer = _ready(ports)
    assert answer.startswith("permanent error recorded: unknown_channel")
    [parked] = [m for m in bus.published if m.topic == "notify-dlq"]
    assert parked.attributes["rlcleanup_error"] == "unknown_channel"
    with pytest.raises(UnknownChannelError, match=r"no notification channel 'pager' \(known: email, webhook\)"):
        BUILTIN.build("pager", NotifySettings(), lambda version: "")


def test_a_channel_registered_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="registered twice: webhook"):
        ChannelRegistry([*BUILTIN.kinds, ChannelKind("webhook", lambda conf, secret: None)])


def test_builtin_channels_are_built_only_when_their_settings_are_given() -> None:
    assert BUILTIN.configured(NotifySettings(), lambda version: "") == []
    both = NotifySettings(webhook_url="https://hooks.example/x", smtp_host="relay", smtp_to="a@example.com")
    assert [c.name for c in BUILTIN.configured(both, lambda version: "")] == ["webhook:slack", "email"]
