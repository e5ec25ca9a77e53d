"""A pre-cancel capture whose storage does not answer is retried, never captured as a run without a readable layout
(issue 46 item 7: `_admit_pre_cancel` swallowed transient errors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.errors import TransientError
from rlcleanup.models.events import JobEvent
from rlcleanup.runtime import authority_handlers
from rlcleanup.runtime.embedded import manual_event
from rlcleanup.runtime.ports import Ports
from rlcleanup.steps.layout import RunLayout


def _ports(tmp_path: Path) -> Ports:
    db = tmp_path / "r.db"
    return Ports(
        storage=LocalStorage(), records=SqliteRunRecords(db), claims=SqliteIdempotencyStore(db), bus=InProcessBus()
    )


def _event(tmp_path: Path) -> JobEvent:
    """A person's pre-cancel request for a live run."""
    live = manual_event(str(tmp_path / "runs" / "exp" / "v1"), "RUNNING")
    return live.model_copy(update={"intent": "pre_cancel"})


def test_a_transient_storage_error_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(storage: object, run_uri: str) -> RunLayout:
        raise TransientError("storage did not answer")

    monkeypatch.setattr(authority_handlers, "discover", unreachable)
    p = _ports(tmp_path)
    with pytest.raises(TransientError):
        authority_handlers._admit_pre_cancel(p, _event(tmp_path))
    assert list(p.records.list_runs()) == []  # nothing bound, nothing recorded


def test_a_run_without_a_readable_layout_is_captured_from_its_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable(storage: object, run_uri: str) -> RunLayout:
        raise ValueError("no config yet")

    monkeypatch.setattr(authority_handlers, "discover", unreadable)
    run_id, layout = authority_handlers._admit_pre_cancel(_ports(tmp_path), _event(tmp_path))
    assert layout is None and run_id == "exp-v1"
