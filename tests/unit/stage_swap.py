"""Swap one stage's handler for a test (the stage table's row, as dispatch reads it), restored by monkeypatch. The
stand-in takes the payload as it came (its row's message becomes `bytes`), so a test can push any payload."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlcleanup.runtime.stage_table import Handler, stage_table


def swap_handler(monkeypatch: pytest.MonkeyPatch, entry_point: str, handler: Handler) -> None:
    table = stage_table()
    monkeypatch.setitem(table.rows, entry_point, replace(table.row(entry_point), handler=handler, message=bytes))
