"""Issue 40 through the CLI: `rlcleanup storage --json` across runs (largest first), `rlcleanup restore RUN_ID`
after a reclaim, and a Ray spill directory under a run root in the ledger and the reclaim plan with its reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from authority_support import World, make_world, published_then_reclaimed, rendered_preview
from typer.testing import CliRunner

from rlcleanup.authority.storage_ledger import measure
from rlcleanup.cli.main import app
from rlcleanup.runtime.embedded import manual_event
from rlcleanup.runtime.handlers import resolve_run_id
from rlcleanup.samples.generator import write_sample_run

runner = CliRunner()


def _sqlite_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI picks Firestore when an emulator variable is set (another test's stack in this worker): not here."""
    for var in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "RLCLEANUP_DB"):
        monkeypatch.delenv(var, raising=False)


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout


def _second_run(w: World, scenario: str) -> str:
    """Another sample run, finished by the same stack (one record store)."""
    run_root = write_sample_run(w.tmp / "more", scenario)
    event = manual_event(str(run_root))
    w.stack.emit(event)
    return resolve_run_id(w.stack.ports, event)


def test_storage_json_lists_every_run_largest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sqlite_only(monkeypatch)
    w = make_world(tmp_path)
    other = _second_run(w, "deferred-export")
    db = str(tmp_path / "records.db")
    code, out = _cli("storage", "--db", db, "--json", "--refresh")
    assert code == 0, out
    rows = json.loads(out)
    assert {r["run_id"] for r in rows} == {w.run_id, other}
    assert [r["bytes"] for r in rows] == sorted((r["bytes"] for r in rows), reverse=True)
    for row in rows:
        record = w.stack.ports.records.get(row["run_id"])
        assert record is not None and row["bytes"] == record.storage_bytes > 0
        assert sum(row["classes"].values()) == row["bytes"]
    code, text = _cli("storage", "--db", db)
    assert code == 0 and [line.split()[0] for line in text.splitlines()] == [r["run_id"] for r in rows]


def test_restore_through_the_cli_gives_back_every_reclaimed_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sqlite_only(monkeypatch)
    w = make_world(tmp_path)
    export = published_then_reclaimed(w)
    code, out = _cli("restore", w.run_id, "--db", str(tmp_path / "records.db"), "--json")
    assert code == 0, out
    assert sorted(json.loads(out)["restored"]) == sorted(export)
    assert {p: Path(p).read_bytes() for p in export} == export
    assert w.record.storage_ledger is not None and w.record.storage_ledger.label == "after restore"
    code, out = _cli("restore", w.run_id, "--db", str(tmp_path / "records.db"))
    assert code == 0 and out.startswith(f"restored 0 object(s) of {w.run_id}"), out


def test_a_ray_spill_directory_under_the_run_root_is_in_the_ledger_and_the_plan_with_its_reason(
    tmp_path: Path,
) -> None:
    """Ray spills into `<dir>/ray_spilled_objects/` (ray_constants.DEFAULT_OBJECT_PREFIX); a run whose spill dir
    lies under its root holds those bytes: a ledger class of their own, kept by a reclaim with the reason."""
    w = make_world(tmp_path, run=False)
    spill = Path(w.run_uri) / "ray_spill" / "ray_spilled_objects"
    spill.mkdir(parents=True)
    spilled = {spill / f"{i:040x}-multi-1": bytes([i]) * (1000 + i) for i in range(3)}
    for path, data in spilled.items():
        path.write_bytes(data)
    w.stack.emit(manual_event(w.run_uri))
    ledger = measure(w.stack.ports.storage, w.record, "test", datetime.now(UTC))
    ray = next(c for c in ledger.classes if c.name == "ray_spill")
    assert (ray.bytes, ray.objects) == (sum(len(d) for d in spilled.values()), len(spilled))
    w.deliver(w.message(w.grant("publish")))
    preview = rendered_preview(w.stack.ports.storage, w.stack.ports.records, w.record, w.grant("reclaim"))
    assert not any("ray_spilled_objects" in d["uri"] for d in preview["delete"])
    reason = "Ray object spill (ray_spilled_objects): no resume state; outside the granted artifact"
    assert preview["keep_reasons"].get(reason) == len(spilled), preview["keep_reasons"]
