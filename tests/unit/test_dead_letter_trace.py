"""Issue 47 item 2: a failure always leaves a trace. In the embedded default a handler that keeps raising is retried
and then dead-lettered by the in-process bus; the dead letter lands on the run's record as an error with its code
and its fix (never a record left `in_progress` with `errors: []`), and `rlcleanup run` prints it.

The failing storage is a real one (the local files) with one object whose streamed copy never matches its listing:
every copy of it raises the transient StorageError a backend raises for a short read."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.storage import StorageError, WriteOutcome
from rlcleanup.runtime import embedded
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import write_sample_run

RUN_ID = "math-rl-completed-resumed-2026.11.30"
SHORT_READ = "streamed 1,024 bytes but its listing said 4,096"


class ShortReadStorage(RoutingStorage):
    """Local storage where copying the run's terminal.json always comes up short."""

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        if src_uri.endswith("/terminal.json"):
            raise StorageError(f"{src_uri}: {SHORT_READ}")
        return super().copy_if_absent(src_uri, dst_uri)


def test_a_message_that_keeps_failing_is_recorded_on_the_run_with_its_code_and_fix(tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "p"), storage=ShortReadStorage())
    stack.emit(manual_event(str(root)))
    assert stack.bus.dead_letters, "the failing copy was never given up on"
    record = SqliteRunRecords(tmp_path / "r.db").get(RUN_ID)
    assert record is not None
    assert record.status is not RecordStatus.in_progress, record.status
    [error] = [e for e in record.errors if e.code == "retries_exhausted"]
    assert error.step == "capture_part"
    assert SHORT_READ in error.message and "terminal.json" in error.message
    assert "fix:" in error.message and "rlcleanup run" in error.message


def test_run_prints_the_dead_letter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_cli_env(tmp_path, monkeypatch)
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    monkeypatch.setattr(embedded, "RoutingStorage", ShortReadStorage)
    code, out, err = invoke("run", str(root), "--db", str(tmp_path / "r.db"), "--preserve-to", str(tmp_path / "p"))
    shown = " ".join((out + err).split())
    assert "retries_exhausted" in shown and SHORT_READ in shown, shown
    assert code == 0 and "did not finish" not in shown, shown  # the run finished, its failed part on the record
