"""Reclaim: a separate grant, a destination re-verified at reclaim time, an exact plan recorded first."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from authority_support import World, files_under, make_world


def _published(tmp_path: Path) -> World:
    w = make_world(tmp_path)
    w.deliver(w.message(w.grant("publish")))
    return w


def _export_files(w: World, step: int = 40) -> list[Path]:
    return files_under(Path(w.candidate(step).uri))


def _plan(w: World, grant_id: str) -> dict:  # type: ignore[type-arg]
    doc = w.stack.ports.records.get_doc(f"runs/{w.run_id}/reclaim_plans", grant_id)
    assert doc is not None
    return doc


def test_reclaim_deletes_exactly_the_plan(tmp_path: Path) -> None:
    w = _published(tmp_path)
    before = {str(p) for p in files_under(tmp_path / "runs")}
    export = {str(p) for p in _export_files(w)}
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["state"] == "reclaimed", action
    assert action["uri"] == f"runs/{w.run_id}/reclaim_plans/{grant.grant_id}"  # the record store, not a bucket
    plan = _plan(w, grant.grant_id)
    planned = {d["uri"] for d in plan["delete"]}
    assert planned == export  # the granted artifact's source copy, nothing else
    assert {k["uri"] for k in plan["keep"]} == before - export and plan["keep_count"] == len(before - export)
    temp_root = w.record.temp_root  # outside run_uri in this layout: the record's roots are what is inventoried
    assert (
        temp_root and not temp_root.startswith(w.run_uri) and any(k["uri"].startswith(temp_root) for k in plan["keep"])
    )
    after = {str(p) for p in files_under(tmp_path / "runs")}
    quarantined = {p for p in after if "/_rlcleanup-quarantine/" in p}
    assert after - quarantined == before - planned  # issue 40: removed from the run, held in quarantine
    assert {q.split(f"/{grant.grant_id}/", 1)[1] for q in quarantined} == {
        u.split("/math-rl-selection-policy/", 1)[1] for u in planned
    }
    assert w.record.reclaimed_bytes == plan["delete_bytes"] == sum(d["size"] for d in plan["delete"])
    assert files_under(Path(w.record.preserved_locations[0]))  # preserved evidence untouched
    assert (w.dest_root / "model" / "_PUBLISHED.json").exists()
    assert not list(Path(w.record.preserved_locations[0]).rglob("reclaim-*.json"))  # no plan file anywhere


def test_reclaim_without_a_verified_destination_deletes_nothing(tmp_path: Path) -> None:
    w = make_world(tmp_path)  # nothing was published
    before = files_under(tmp_path / "runs")
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["refusal"] == "destination_unverified"
    assert files_under(tmp_path / "runs") == before


def test_reclaim_after_destination_was_altered_deletes_nothing(tmp_path: Path) -> None:
    w = _published(tmp_path)
    shard = w.dest_root / "model" / "model-00002-of-00003.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes: only a checksum re-read catches it
    shard.write_bytes(bytes(data))
    before = files_under(tmp_path / "runs")
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "destination_altered" and "model-00002-of-00003.safetensors" in action["detail"]
    assert files_under(tmp_path / "runs") == before


def test_objects_written_after_the_plan_are_kept_and_rerun_is_idempotent(tmp_path: Path) -> None:
    from rlcleanup.authority.reclaim import ReclaimPlan, execute

    w = _published(tmp_path)
    grant = w.grant("reclaim")
    export = _export_files(w)
    storage = w.stack.ports.storage
    real_delete = storage.delete
    storage.delete = lambda uri, **kw: False  # type: ignore[method-assign,assignment]  # plan, delete nothing
    w.deliver(w.message(grant))
    storage.delete = real_delete  # type: ignore[method-assign]
    plan = ReclaimPlan.model_validate(_plan(w, grant.grant_id))
    export[0].write_text("rewritten after the plan")
    late = export[0].parent / "written-later.json"
    late.write_text("{}")
    run = {"records": w.stack.ports.records, "record": w.record, "now": datetime.now(UTC)}
    result = execute(storage, plan, **run)
    assert result.kept_changed == [str(export[0])] and export[0].exists() and late.exists()
    assert set(result.deleted) == {str(p) for p in export[1:]}
    again = execute(storage, plan, **run)  # idempotent: gone objects count once more as deleted, nothing else happens
    assert set(again.deleted) == set(result.deleted) and again.reclaimed_bytes == result.reclaimed_bytes


def test_plan_is_recorded_before_deleting(tmp_path: Path) -> None:
    w = _published(tmp_path)
    storage = w.stack.ports.storage
    seen_at_first_delete: list[str | None] = []
    real = storage.delete

    def watching(uri: str, **kw: object) -> bool:
        if not seen_at_first_delete and uri.startswith(str(tmp_path / "runs")):
            grants = w.stack.ports.records.list_docs(f"runs/{w.run_id}/grants")
            seen_at_first_delete.append(
                next(d for _, d in grants if d["grant"]["action"] == "reclaim")["outcome"]["uri"]
            )
        return real(uri, **kw)  # type: ignore[arg-type]

    storage.delete = watching  # type: ignore[method-assign]
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    assert seen_at_first_delete == [f"runs/{w.run_id}/reclaim_plans/{grant.grant_id}"]


def test_planted_plan_file_is_never_read(tmp_path: Path) -> None:
    w = _published(tmp_path)
    grant = w.grant("reclaim")
    victim = tmp_path / "someone-else" / "weights.bin"
    victim.parent.mkdir()
    victim.write_bytes(b"not ours")
    preserved = Path(w.record.preserved_locations[0])
    manifest = preserved / "manifest.json"
    planted = {"delete": [{"uri": str(victim), "size": 8, "crc32c": "x"}, {"uri": str(manifest), "size": 1}]}
    for where in (preserved / "authority" / f"reclaim-{grant.grant_id}.json", w.dest_root / "model" / "plan.json"):
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(json.dumps(planted))
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "reclaimed"
    assert victim.exists() and manifest.exists()
    assert all(d["uri"].startswith(w.candidate().uri + "/") for d in _plan(w, grant.grant_id)["delete"])


def test_destination_deleted_mid_reclaim_keeps_the_source(tmp_path: Path) -> None:
    """The twin of the next object vanishes right after an earlier delete: its source must stay."""
    w = _published(tmp_path)
    export = sorted(_export_files(w))
    storage = w.stack.ports.storage
    real = storage.delete
    dest = w.dest_root / "model"

    def delete_then_lose_a_twin(uri: str, **kw: object) -> bool:
        done = real(uri, **kw)  # type: ignore[arg-type]
        if uri == str(export[0]):
            (dest / export[1].name).unlink()  # someone deletes the destination copy meanwhile
        return done

    storage.delete = delete_then_lose_a_twin  # type: ignore[method-assign]
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "destination_altered" and export[1].name in action["detail"], action
    for src in export:  # never both copies gone
        assert src.exists() or (dest / src.name).exists(), src
    assert export[1].exists()


def test_resumed_reclaim_re_verifies(tmp_path: Path) -> None:
    from rlcleanup.ports.storage import StorageError

    w = _published(tmp_path)
    export = sorted(_export_files(w))
    storage = w.stack.ports.storage
    real = storage.delete
    calls = {"n": 0}

    def crash_after_first(uri: str, **kw: object) -> bool:
        calls["n"] += 1
        if calls["n"] >= 2:  # the first delete lands, then the worker keeps dying
            raise StorageError("worker lost")
        return real(uri, **kw)  # type: ignore[arg-type]

    storage.delete = crash_after_first  # type: ignore[method-assign]
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))  # crashes mid-plan; every redelivery in drain crashes on its own second delete
    storage.delete = real  # type: ignore[method-assign]
    remaining = [p for p in export if p.exists()]
    assert remaining
    twin = w.dest_root / "model" / remaining[-1].name
    data = bytearray(twin.read_bytes())
    data[-1] ^= 0xFF
    twin.write_bytes(bytes(data))  # altered before the resume
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "destination_altered", action
    assert remaining[-1].exists()


def test_edited_plan_in_the_store_is_rejected(tmp_path: Path) -> None:
    from rlcleanup.ports.storage import StorageError

    w = _published(tmp_path)
    grant = w.grant("reclaim")
    storage = w.stack.ports.storage
    real = storage.delete

    def failing(uri: str, **kw: object) -> bool:
        raise StorageError("unavailable")

    storage.delete = failing  # type: ignore[method-assign]
    w.deliver(w.message(grant))  # the plan is stored; deleting fails, so the grant waits for a redelivery
    storage.delete = real  # type: ignore[method-assign]
    plan = _plan(w, grant.grant_id)
    manifest = Path(w.record.manifest_uri or "")
    plan["delete"][0]["uri"] = str(manifest)  # someone with store access aims it at the evidence
    w.stack.ports.records.put_doc(f"runs/{w.run_id}/reclaim_plans", grant.grant_id, plan)
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "plan_rejected" and "outside the granted export" in action["detail"], action
    assert manifest.exists()
    assert all(p.exists() for p in _export_files(w))
