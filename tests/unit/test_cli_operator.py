"""`status`, `watch`, `report`: their --json outputs, exit codes (0 ok, 1 not found, 2 usage, 3 failure) and errors
that name the fix; plus the published JSON Schema matching the model."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.cli.main import app
from rlcleanup.cli.stores import close_matches
from rlcleanup.models.record import CompletionRecord
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
SELECTED = "math-rl-selection-policy-2026.11.30"
FAILED = "math-rl-failed-first-link-2026.11.30"


@pytest.fixture(autouse=True)
def _sqlite_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("cli")
    for scenario in ("selection-policy", "failed-first-link"):
        root = write_sample_run(base / "src", scenario)
        assert run_embedded(str(root), db_path=base / "r.db", preserve_root=str(base / "p")) is not None
    return base / "r.db"


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# ------------------------------------------------------------------ status


def test_status_json_lists_every_run(db: Path) -> None:
    code, out, _ = _invoke("status", "--db", str(db), "--json")
    assert code == 0
    rows = {row["run_id"]: row for row in json.loads(out)}
    assert set(rows) == {SELECTED, FAILED}
    assert rows[SELECTED]["verdict"].startswith(f"{SELECTED}: completed · selected step 30")  # report/verdict.py's
    assert rows[SELECTED] | {"updated_at": None, "run_uri": None, "verdict": None} == {
        "run_id": SELECTED,
        "status": "awaiting_authority",
        "terminal_state": "completed",
        "selection": "selected",
        "selected_step": 30,
        "errors": 0,
        "remaining_work": 3,
        "updated_at": None,
        "run_uri": None,
        "verdict": None,
    }
    assert rows[FAILED]["terminal_state"] == "failed" and rows[FAILED]["selected_step"] is None


def test_status_filters_by_state_and_one_run(db: Path) -> None:
    code, out, _ = _invoke("status", "--db", str(db), "--state", "failed", "--json")
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == [FAILED]
    code, out, _ = _invoke("status", SELECTED, "--db", str(db), "--json")
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == [SELECTED]


def test_status_table_shows_the_runs(db: Path) -> None:
    code, out, _ = _invoke("status", "--db", str(db))
    assert code == 0
    line = next(line for line in out.splitlines() if SELECTED in line)
    assert "awaiting_authority" in line and "completed" in line and "step 30" in line


def test_unknown_run_exits_1_with_close_matches(db: Path) -> None:
    code, out, err = _invoke("status", "math-rl-selection-polcy", "--db", str(db), "--json")
    assert (code, out) == (1, "")
    assert f"did you mean {SELECTED}?" in err


def test_close_matches_prefer_fragments_then_spelling() -> None:
    known = ["math-rl-a-2026.11.30", "math-rl-b-2026.11.30", "other"]
    assert close_matches("rl-b", known)[0] == "math-rl-b-2026.11.30"
    assert close_matches("math-rl-a-2026.11.3O", known)[0] == "math-rl-a-2026.11.30"
    assert close_matches("zzz", known) == []


def test_usage_errors_exit_2(db: Path) -> None:
    code, _, err = _invoke("status", "--db", str(db), "--state", "sideways")
    assert code == 2 and "unknown --state sideways" in err
    # Fixed sets are Enums: typer refuses other values and names the choices (also in --help and completion).
    code, _, err = _invoke("report", SELECTED, "--db", str(db), "--format", "pdf")
    assert code == 2 and "'pdf' is not one of 'md', 'html', 'json'" in " ".join(err.replace("│", " ").split())
    code, _, err = _invoke("status", "--db", str(db), "--backend", "postgres")
    assert code == 2 and "'postgres' is not one of 'sqlite', 'firestore'" in " ".join(err.replace("│", " ").split())


def test_missing_database_exits_1_and_says_how_to_make_one(tmp_path: Path) -> None:
    code, _, err = _invoke("status", "--db", str(tmp_path / "none.db"))
    assert code == 1 and "`rlcleanup run RUN_ROOT --db" in err
    assert not (tmp_path / "none.db").exists()  # a read command creates nothing


def test_unreachable_emulator_names_stack_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    code, _, err = _invoke("status", "--json")
    # Both fixes: start the stack, or forget its variables (issue 38: they outlive `stack down` unless eval'd).
    assert code == 3 and "not reachable" in err and 'eval "$(rlcleanup stack up)"' in err
    assert 'eval "$(rlcleanup stack down)"' in err


def test_missing_credentials_name_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    def no_credentials(*_a: object, **_k: object) -> None:
        raise DefaultCredentialsError("none")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    code, _, err = _invoke("watch", "some-run", "--backend", "firestore")
    assert code == 3 and "GOOGLE_APPLICATION_CREDENTIALS" in err
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    code, _, err = _invoke("status", "--backend", "firestore")
    assert code == 2 and "GOOGLE_CLOUD_PROJECT" in err


# ------------------------------------------------------------------ report


def test_report_json(db: Path) -> None:
    code, out, _ = _invoke("report", FAILED, "--db", str(db), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["verdict"].startswith(f"{FAILED}: failed · first cause torch.OutOfMemoryError")
    assert [p["key"] for p in doc["verdict_parts"]] == ["terminal", "cause", "selection", "resume", "person"]
    assert doc["verdict_tone"] == "bad"
    assert [s["anchor"] for s in doc["sections"]][:2] == ["person", "chain"]


def test_report_markdown_to_stdout_and_html_to_a_directory(db: Path, tmp_path: Path) -> None:
    code, out, _ = _invoke("report", SELECTED, "--db", str(db))
    assert code == 0 and out.splitlines()[2].startswith(f"**Verdict:** {SELECTED}: completed · selected step 30")
    code, out, _ = _invoke("report", SELECTED, "--db", str(db), "--format", "html", "--out", str(tmp_path / "r"))
    assert code == 0 and out.splitlines() == [str(tmp_path / "r" / "report.html"), str(tmp_path / "r" / "timeline.png")]
    assert "<svg" in (tmp_path / "r" / "report.html").read_text()
    code, _, err = _invoke("report", "nope", "--db", str(db))
    assert code == 1 and "no record for run 'nope'" in err


# ------------------------------------------------------------------ watch


def _lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_watch_a_finished_run_exits_0_at_once(db: Path) -> None:
    code, out, _ = _invoke("watch", SELECTED, "--db", str(db), "--json")
    assert code == 0
    (snap,) = _lines(out)
    assert snap["finished"] is True and snap["status"] == "awaiting_authority"
    stages = {s["name"]: s for s in snap["stages"]}  # type: ignore[attr-defined]
    assert stages["selection"] == {"name": "selection", "done": 1, "running": 0, "total": 1}
    assert stages["validation"]["done"] == stages["validation"]["total"] == 8  # 7 exports + resume


def _in_progress(db: Path, run_id: str) -> SqliteRunRecords:
    store, claims = SqliteRunRecords(db), SqliteIdempotencyStore(db)
    store.create_if_absent(CompletionRecord(run_id=run_id, run_uri=f"/runs/{run_id}"))
    claims.complete(run_id, "classify", {"kind": "standard"})
    claims.complete(run_id, "capture-plan", {"parts": ["run-0", "attempt-a-0"]})
    claims.complete(run_id, "capture-part:run-0", {})
    return store


def test_watch_times_out_with_exit_3(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    _in_progress(db, "slow-run")
    code, out, err = _invoke("watch", "slow-run", "--db", str(db), "--json", "--interval", "0.05", "--timeout", "0.2")
    assert code == 3 and "not finished after 0.2s" in err
    stages = {s["name"]: s for s in _lines(out)[0]["stages"]}  # type: ignore[attr-defined]
    assert (stages["capture parts"]["done"], stages["capture parts"]["total"]) == (1, 2)
    assert stages["validation"]["total"] is None  # not fanned out yet


def test_watch_follows_a_run_to_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "w.db"
    store = _in_progress(db, "live-run")
    # Each change waits until watch has polled twice since the last one (so a poll surely saw it), not for a
    # fixed sleep: under load a slow first poll would otherwise miss the middle state.
    from rlcleanup.cli import progress

    polls = [0]
    real_snapshot = progress.snapshot

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        polls[0] += 1
        return real_snapshot(*args, **kwargs)

    monkeypatch.setattr(progress, "snapshot", counted)

    def after_two_more_polls() -> None:
        seen, deadline = polls[0], time.monotonic() + 15
        while polls[0] < seen + 2 and time.monotonic() < deadline:
            time.sleep(0.01)

    def finish() -> None:
        after_two_more_polls()
        SqliteIdempotencyStore(db).complete("live-run", "capture-part:attempt-a-0", {})
        after_two_more_polls()
        store.update("live-run", {"status": "complete"})

    worker = threading.Thread(target=finish)
    worker.start()
    code, out, _ = _invoke("watch", "live-run", "--db", str(db), "--json", "--interval", "0.05", "--timeout", "20")
    worker.join()
    snaps = _lines(out)
    assert code == 0 and len(snaps) >= 3  # one line per change: start, second part, finished
    assert snaps[0]["finished"] is False and snaps[-1]["finished"] is True
    assert snaps[-1]["status"] == "complete"


def test_watch_of_a_failed_record_exits_3(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    SqliteRunRecords(db).create_if_absent(CompletionRecord(run_id="bad", run_uri="/r", status="failed"))
    code, _, err = _invoke("watch", "bad", "--db", str(db))
    assert code == 3 and "finished as failed" in err


# ------------------------------------------------------------------ the published schema


def test_published_schema_matches_the_model() -> None:
    code, out, _ = _invoke("schema")
    assert code == 0
    published = json.loads((REPO / "docs" / "completion-record.schema.json").read_text())
    assert published == json.loads(out), (
        "docs/completion-record.schema.json drifted from models/record.py: "
        "regenerate it with `.venv/bin/rlcleanup schema > docs/completion-record.schema.json`"
    )
