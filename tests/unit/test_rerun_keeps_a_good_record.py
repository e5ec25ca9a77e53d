"""Issue 47 item 6: bad settings never overwrite a good record. The preserve target is checked before anything is
written (an unsupported `--preserve-to s3://...` is a one-line usage refusal, exit 2); a rerun that cannot finish
puts back the record it was asked to redo (its claims too) and keeps the attempt as history; the failed attempt's
to-do names what redoes a run in the mode it ran in (`rlcleanup run ROOT --rerun`, not "re-emit the terminal
event")."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.cli.maintenance import history
from rlcleanup.cli.stores import open_store
from rlcleanup.errors import PermanentError
from rlcleanup.runtime.stage_table import stage_table
from rlcleanup.samples.generator import write_sample_run

RUN = "math-rl-completed-resumed-2026.11.30"


@pytest.fixture
def finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    isolated_cli_env(tmp_path, monkeypatch)
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    db = tmp_path / "r.db"
    code, _, err = invoke("run", str(root), "--db", str(db), "--preserve-to", str(tmp_path / "p"), "--json")
    assert code == 0, err
    return root, db


def test_an_unsupported_preserve_target_is_refused_before_anything_is_written(finished: tuple[Path, Path]) -> None:
    root, db = finished
    before = SqliteRunRecords(db).get(RUN)
    code, out, err = invoke("run", str(root), "--db", str(db), "--rerun", "--preserve-to", "s3://evidence/x")
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and "not a supported preserve target" in err, err
    assert SqliteRunRecords(db).get(RUN) == before
    assert history(open_store(None, db, None), RUN) == []  # not even archived


def test_a_rerun_that_cannot_finish_puts_the_record_back(
    finished: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, db = finished
    before = SqliteRunRecords(db).get(RUN)
    assert before is not None and before.status.value == "awaiting_authority"
    claims_before = SqliteIdempotencyStore(db).results(RUN, "")

    def broken(p: object, data: bytes, attributes: dict[str, str]) -> str:
        raise PermanentError("select_broken", "selection cannot run with these settings")

    table = stage_table()
    monkeypatch.setitem(table.rows, "select_candidate", replace(table.row("select_candidate"), handler=broken))
    code, _, err = invoke("run", str(root), "--db", str(db), "--rerun", "--preserve-to", str(tmp_path / "p"))
    text = " ".join(err.split())
    assert code == 3, err
    assert "could not finish" in text and "select_broken" in text and "left as it was (awaiting_authority)" in text
    assert SqliteRunRecords(db).get(RUN) == before  # the good record, unchanged
    assert SqliteIdempotencyStore(db).results(RUN, "") == claims_before  # and its claims: nothing runs again
    kept = history(open_store(None, db, None), RUN)
    assert [doc.record.status.value for doc in kept] == ["awaiting_authority", "failed"]
    todo = kept[-1].record.remaining_work[-1]
    assert f"`rlcleanup run {root} --rerun`" in todo and "re-emit" not in todo, todo
    # Plain `run` prints the good record again.
    code, out, err = invoke("run", str(root), "--db", str(db), "--preserve-to", str(tmp_path / "p"), "--json")
    assert code == 0 and "already had a record" in err, err
    assert json.loads(out)["status"] == "awaiting_authority"
