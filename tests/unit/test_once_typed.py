"""`once` is the one idempotency guard (issue 46 item 4): its result is always a model, and a repeat returns what the
first delivery stored, read back as that model (as Powertools' idempotency returns the stored response:
aws-powertools/powertools-lambda-python, aws_lambda_powertools/utilities/idempotency/persistence/base.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.runtime.claims import once, once_ran
from rlcleanup.runtime.ports import Ports


class Counted(BaseModel):
    calls: int
    note: str


def _ports(tmp_path: Path) -> Ports:
    db = tmp_path / "r.db"
    return Ports(
        storage=LocalStorage(), records=SqliteRunRecords(db), claims=SqliteIdempotencyStore(db), bus=InProcessBus()
    )


def test_a_repeat_returns_the_stored_result_as_its_model(tmp_path: Path) -> None:
    p = _ports(tmp_path)
    calls: list[int] = []

    def work() -> Counted:
        calls.append(1)
        return Counted(calls=len(calls), note="first")

    first = once_ran(p, "r", "step", work, model=Counted)
    again = once_ran(p, "r", "step", work, model=Counted)
    assert (first.repeat, again.repeat) == (False, True)
    assert again.result == first.result == Counted(calls=1, note="first") and isinstance(again.result, Counted)
    assert once(p, "r", "step", work, model=Counted) == Counted(calls=1, note="first")
    assert calls == [1]  # the work ran once


def test_the_model_is_mandatory() -> None:
    untyped: Any = once
    with pytest.raises(TypeError, match="model"):
        untyped(None, "r", "step", lambda: {"a": 1})
