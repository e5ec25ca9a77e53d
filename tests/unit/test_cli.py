"""The `rlcleanup` command line: exact JSON on stdout, exit codes, one-line reasons on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcleanup.cli.main import app
from rlcleanup.models.record import CompletionRecord
from rlcleanup.samples.generator import SCENARIOS, write_sample_run

runner = CliRunner()


@pytest.fixture(autouse=True)
def _sqlite_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)  # `show` would read Firestore instead


def _one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize(
    ("scenario", "run_id", "terminal"),
    [
        ("completed-resumed", "math-rl-completed-resumed-2026.11.30", "completed"),
        ("failed-first-link", "math-rl-failed-first-link-2026.11.30", "failed"),
    ],
)
def test_run_json_prints_exactly_the_record(tmp_path: Path, scenario: str, run_id: str, terminal: str) -> None:
    root = write_sample_run(tmp_path / "src", scenario)
    db = tmp_path / "r.db"
    args = ["run", str(root), "--preserve-to", str(tmp_path / "p"), "--db", str(db), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    record = CompletionRecord.model_validate_json(result.stdout)  # the whole stdout is the record, nothing else
    assert (record.run_id, record.terminal_state and record.terminal_state.value) == (run_id, terminal)
    assert record.manifest_uri == str(tmp_path / "p" / run_id / "manifest.json")

    shown = runner.invoke(app, ["show", run_id, "--db", str(db), "--json"])
    assert shown.exit_code == 0
    assert CompletionRecord.model_validate_json(shown.stdout) == record
    summary = runner.invoke(app, ["show", run_id, "--db", str(db)])
    assert summary.exit_code == 0
    assert run_id in summary.stdout and terminal in summary.stdout


def test_run_summary_without_json(tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    result = runner.invoke(
        app, ["run", str(root), "--preserve-to", str(tmp_path / "p"), "--db", str(tmp_path / "r.db")]
    )
    assert result.exit_code == 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)
    assert "math-rl-completed-resumed-2026.11.30" in result.stdout


def test_missing_run_root_fails_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = runner.invoke(app, ["run", str(missing), "--db", str(tmp_path / "r.db"), "--json"])
    assert result.exit_code == 2  # a bad argument: usage
    assert result.stdout == ""
    assert _one_line(result.stderr) == f"rlcleanup: run root {missing} does not exist"
    assert not (tmp_path / "r.db").exists()


def test_a_path_that_is_not_a_run_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    root = tmp_path / "runs" / "math-rl" / "v1"
    root.mkdir(parents=True)
    (root / ".executor_status").write_text("SUCCESS\n")
    db = tmp_path / "r.db"
    args = ["run", str(root), "--preserve-to", str(tmp_path / "p"), "--db", str(db), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stdout == ""
    line = _one_line(result.stderr)
    assert line.startswith(f"rlcleanup: {root} is not a run root: no resolved configuration in it (looked for ")
    assert line.endswith("nothing was recorded")
    assert not db.exists()  # no permanent `failed` record cluttering `status`


def test_a_runs_parent_directory_suggests_the_run_roots_below_it(tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    db = tmp_path / "r.db"
    result = runner.invoke(app, ["run", str(tmp_path / "src"), "--db", str(db)])
    assert result.exit_code == 2
    assert _one_line(result.stderr).endswith(f"run roots below it: {root}")
    assert not db.exists()


def test_show_unknown_id_exits_1_and_creates_no_database(tmp_path: Path) -> None:
    result = runner.invoke(app, ["show", "no-such-run", "--db", str(tmp_path / "r.db")])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert _one_line(result.stderr).startswith(f"rlcleanup: no records database at {tmp_path / 'r.db'}")
    assert not (tmp_path / "r.db").exists()  # `show --db` on a missing file used to create it


def test_schema_is_the_record_json_schema() -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema == CompletionRecord.model_json_schema(mode="serialization")  # the record as written
    assert schema["title"] == "CompletionRecord"
    assert schema["properties"]["problem_codes"]["readOnly"] is True  # derived: written, never read as input
    for field in ("run_id", "classification", "terminal_state", "first_failure_cause", "chain", "candidates"):
        assert field in schema["properties"]


def test_sample_run_list_and_write(tmp_path: Path) -> None:
    listed = runner.invoke(app, ["sample-run", str(tmp_path), "--scenario", "list"])
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == list(SCENARIOS)
    assert not tmp_path.joinpath("durable").exists()  # listing writes nothing

    written = runner.invoke(app, ["sample-run", str(tmp_path), "--scenario", "launch-yaml"])
    assert written.exit_code == 0
    root = Path(written.stdout.strip())
    assert root == tmp_path / "durable" / "math-rl-launch-yaml" / "2026.11.30"
    assert (root / "launch.yaml").is_file()

    unknown = runner.invoke(app, ["sample-run", str(tmp_path), "--scenario", "nonsense"])
    assert unknown.exit_code == 2
    assert unknown.stderr.strip() == "rlcleanup: unknown scenario 'nonsense'"


def test_run_that_never_finishes_its_record_exits_non_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from rlcleanup.runtime.stage_table import stage_table

    # A selection that acks without finishing the record: the bus drains, the record stays in_progress.
    table = stage_table()
    lost = replace(table.row("select_candidate"), handler=lambda p, data, attributes: "lost")
    monkeypatch.setitem(table.rows, "select_candidate", lost)
    run = write_sample_run(tmp_path / "s", "completed-resumed")
    args = ["run", str(run), "--preserve-to", str(tmp_path / "p"), "--db", str(tmp_path / "r.db"), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 3
    assert result.stdout == ""
    assert _one_line(result.stderr).startswith(
        "rlcleanup: run math-rl-completed-resumed-2026.11.30 did not finish: "
        "its record is still in_progress after every message was handled; "
        "`rlcleanup show math-rl-completed-resumed-2026.11.30` has the record, "
    )
    assert _one_line(result.stderr).endswith(" --rerun` starts it over")  # the way on, not only the symptom
