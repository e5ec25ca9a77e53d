"""A grant is bound to its digest (issue 38 item 2): a `--rerun` (or a later pass) whose candidate at the granted
step has other bytes reopens selection, publish and reclaim, drops the reclaimed bytes, and lists the earlier
grants that no longer apply; a reclaim preview never lists the new export. Unchanged bytes keep the grants."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from authority_support import World, files_under, make_world
from cli_support import invoke, isolated_cli_env

from rlcleanup.authority import ledger
from rlcleanup.authority.preview import preview_grant
from rlcleanup.cli.maintenance import archive, reset_for_rerun
from rlcleanup.cli.render import summary
from rlcleanup.report.verdict import build_verdict
from rlcleanup.runtime.backends import OpenStore, StoreBackend
from rlcleanup.runtime.embedded import manual_event
from rlcleanup.runtime.layouts import run_layout
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.steps.remaining import PUBLISH_ITEM, RECLAIM_ITEM, SELECTION_PREFIX
from rlcleanup.steps.wrapup import finish_record

SCENARIO = "completed-resumed"  # no declared selection policy: the publish grant is what chose step 20


def _rerun(w: World) -> None:
    """`rlcleanup run --rerun`: the old record kept as history, claims cleared, the pipeline run again."""
    ports = w.stack.ports
    opened = OpenStore(ports.records, ports.claims, "test", StoreBackend.sqlite, w.tmp / "records.db")
    archive(opened, w.record)
    reset_for_rerun(opened, w.run_id)
    w.stack.emit(manual_event(w.run_uri))


def _published_and_reclaimed(tmp_path: Path) -> tuple[World, str, str, str]:
    w = make_world(tmp_path, SCENARIO)
    publish = w.grant("publish", step=20)
    w.deliver(w.message(publish))
    reclaim = w.grant("reclaim", step=20)
    w.deliver(w.message(reclaim))
    record = w.record
    assert record.status.value == "complete" and record.remaining_work == [] and record.reclaimed_bytes > 0
    assert "step 20 chosen by a publish grant" in build_verdict(record).line
    assert publish.digest is not None
    return w, publish.grant_id, reclaim.grant_id, publish.digest


def _new_export_bytes(w: World) -> None:
    """The step-20 export written again with other bytes (a new export job, a regenerated run)."""
    export = Path(w.candidate(20).uri)
    donor = write_sample_run(w.tmp / "donor", SCENARIO)
    donor_export = Path(str(export).replace(w.run_uri, str(donor)))
    shutil.rmtree(export)
    shutil.copytree(donor_export, export)
    config = export / "config.json"
    config.write_text(config.read_text().replace("{", '{"regenerated": true, ', 1))


def test_a_rerun_with_other_export_bytes_reopens_selection_publish_and_reclaim(tmp_path: Path) -> None:
    w, publish_id, reclaim_id, old_digest = _published_and_reclaimed(tmp_path)
    _new_export_bytes(w)
    _rerun(w)

    record = w.record
    new_digest = w.candidate(20).digest
    assert w.candidate(20).valid and new_digest and new_digest != old_digest
    assert record.status.value == "awaiting_authority"
    assert any(item.startswith(SELECTION_PREFIX) for item in record.remaining_work)  # selection reopened
    assert PUBLISH_ITEM in record.remaining_work and RECLAIM_ITEM in record.remaining_work
    assert record.reclaimed_bytes == 0 and record.authority_actions == []
    assert [(g.grant_id, g.action, g.step, g.digest, g.now_digest, g.gone) for g in record.superseded_grants] == [
        (publish_id, "publish", 20, old_digest, new_digest, False),
        (reclaim_id, "reclaim", 20, old_digest, new_digest, False),
    ]
    assert "chosen by a publish grant" not in build_verdict(record).line
    text = summary(record)  # console-readable: each grant, what it did, and why it no longer applies
    assert f"publish grant {publish_id[:16]} (published to {w.dest_root / 'model'}) no longer applies" in text
    assert f"now has digest {new_digest}" in text

    # The reclaim preview of the new export (its digest, or the old one) lists nothing for deletion.
    export = {str(p) for p in files_under(Path(w.candidate(20).uri))}
    for digest in (new_digest, old_digest):
        preview = preview_grant(
            w.stack.ports.storage, record, w.grant("reclaim", step=20, digest=digest), datetime.now(UTC),
            w.stack.ports.records,
        )  # fmt: skip
        assert preview["would"] == "refuse" and "delete" not in preview, preview
    # ... and a reclaim grant of it deletes nothing.
    grant = w.grant("reclaim", step=20)
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["refusal"] == "destination_unverified"
    assert {str(p) for p in files_under(Path(w.candidate(20).uri))} == export


def test_a_rerun_with_unchanged_bytes_keeps_the_grant_applying(tmp_path: Path) -> None:
    w = make_world(tmp_path, SCENARIO)
    publish = w.grant("publish", step=20)
    w.deliver(w.message(publish))
    _rerun(w)
    record = w.record
    assert w.candidate(20).digest == publish.digest
    assert record.superseded_grants == []
    assert [a.grant_id for a in record.authority_actions] == [publish.grant_id]
    assert record.remaining_work == [RECLAIM_ITEM]  # selection answered, publish closed: as before the rerun
    assert "step 20 chosen by a publish grant" in build_verdict(record).line


def test_a_rerun_after_the_runs_own_reclaim_keeps_publish_and_reclaim_applying(tmp_path: Path) -> None:
    """The export is gone because this run's reclaim grant deleted exactly those bytes: not new bytes."""
    w, publish_id, reclaim_id, _ = _published_and_reclaimed(tmp_path)
    reclaimed = w.record.reclaimed_bytes
    _rerun(w)
    record = w.record
    assert record.superseded_grants == [] and record.status.value == "complete", record.remaining_work
    assert [a.grant_id for a in record.authority_actions] == [publish_id, reclaim_id]
    assert record.reclaimed_bytes == reclaimed


def test_a_later_pass_with_other_candidates_reopens_what_its_grants_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a --rerun: a later pass re-derives the candidates on the same record (wrap-up, then the grants'
    summary), and the grant used on the earlier pass stops closing anything."""
    isolated_cli_env(tmp_path, monkeypatch)
    w = make_world(tmp_path, SCENARIO)
    publish = w.grant("publish", step=20)
    w.deliver(w.message(publish))
    record = w.record
    assert PUBLISH_ITEM not in record.remaining_work
    candidates = [c.model_copy(update={"digest": "b" * 64}) if c.step == 20 else c for c in record.candidates]
    layout = run_layout(w.stack.ports, w.run_id, w.run_uri)
    fields = finish_record(
        w.stack.ports.storage, layout, record, candidates, record.resume_safety, w.stack.ports.clock.now()
    )
    assert PUBLISH_ITEM in fields["remaining_work"]  # wrap-up itself no longer counts the grant
    w.stack.ports.records.update(w.run_id, fields)
    ledger.sync_record(w.stack.ports.records, w.run_id)
    record = w.record
    assert PUBLISH_ITEM in record.remaining_work and any(i.startswith(SELECTION_PREFIX) for i in record.remaining_work)
    ((gone,),) = [record.superseded_grants]
    assert (gone.grant_id, gone.now_digest, gone.gone) == (publish.grant_id, "b" * 64, False)
    rows = {r["grant_id"]: r for r in _grant_rows(w)}
    assert rows[publish.grant_id]["applies"] is False


def _grant_rows(w: World) -> list[dict[str, Any]]:
    code, out, err = invoke("grants", w.run_id, "--db", str(w.tmp / "records.db"), "--json")
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


# ------------------------------------------------------------------ the scenario through the CLI


def _cli_json(*args: str) -> Any:
    code, out, err = invoke(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_cli_rerun_says_which_grants_no_longer_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = isolated_cli_env(tmp_path, monkeypatch)
    root = write_sample_run(tmp_path / "src", SCENARIO)
    run_id = _cli_json("run", str(root))["run_id"]
    code, out, err = invoke("keygen", "--id", "alice")
    assert code == 0, err
    public = next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))
    assert invoke("approver", "add", "alice", "--public-key", public, "--prefix", str(home / "models"))[0] == 0
    base = ["grant", run_id, "--step", "20", "--destination", str(home / "models" / "m20"), "--key", "alice"]
    published = _cli_json(*base, "--action", "publish")
    reclaimed = _cli_json(*base, "--action", "reclaim")
    assert reclaimed["record_status"] == "complete" and reclaimed["remaining_work"] == []
    old = next(c for c in _cli_json("show", run_id)["candidates"] if c["step"] == 20)

    export = Path(old["uri"])  # emptied by the reclaim; a new export job writes other bytes there
    donor = write_sample_run(tmp_path / "donor", SCENARIO)
    shutil.rmtree(export)
    shutil.copytree(Path(str(export).replace(str(root), str(donor))), export)
    (export / "config.json").write_text((export / "config.json").read_text().replace("{", '{"again": 1, ', 1))
    again = _cli_json("run", str(root), "--rerun")

    new = next(c for c in again["candidates"] if c["step"] == 20)
    assert new["valid"] and new["digest"] != old["digest"]
    assert again["status"] == "awaiting_authority" and again["reclaimed_bytes"] == 0
    assert again["authority_actions"] == []
    assert any(item.startswith(SELECTION_PREFIX) for item in again["remaining_work"])
    assert PUBLISH_ITEM in again["remaining_work"] and RECLAIM_ITEM in again["remaining_work"]
    superseded = {g["grant_id"]: g for g in again["superseded_grants"]}
    assert set(superseded) == {published["grant_id"], reclaimed["grant_id"]}
    for gone in superseded.values():
        assert (gone["step"], gone["digest"], gone["now_digest"], gone["gone"]) == (
            20, old["digest"], new["digest"], False
        )  # fmt: skip

    code, text, _ = invoke("show", run_id)
    assert code == 0 and "chosen by a publish grant" not in text and "selection unresolved" in text
    assert f"publish grant {published['grant_id'][:16]} (published to {home / 'models' / 'm20'})" in text
    assert "no longer applies" in text
    report = (Path(again["preserved_locations"][0]) / "derived" / "report.md").read_text()
    assert "no longer apply" in report and published["grant_id"][:16] in report
    rows = {r["grant_id"]: r for r in _cli_json("grants", run_id)}
    assert not rows[published["grant_id"]]["applies"] and not rows[reclaimed["grant_id"]]["applies"]

    before = files_under(export)
    code, out, _ = invoke(*base, "--action", "reclaim", "--dry-run", "--json")  # the new export: never listed
    preview = json.loads(out)
    assert code == 3 and preview["would"] == "refuse" and "delete" not in preview, preview
    assert before and files_under(export) == before
