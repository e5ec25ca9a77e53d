"""Reclaim: a separate grant, a destination re-verified at reclaim time, an exact plan recorded first."""

from __future__ import annotations

import json
from pathlib import Path

from authority_support import World, files_under, make_world


def _published(tmp_path: Path) -> World:
    w = make_world(tmp_path)
    w.deliver(w.message(w.grant("publish")))
    return w


def _export_files(w: World, step: int = 40) -> list[Path]:
    return files_under(Path(w.candidate(step).uri))


def test_reclaim_deletes_exactly_the_plan(tmp_path: Path) -> None:
    w = _published(tmp_path)
    before = {str(p) for p in files_under(tmp_path / "runs")}
    export = {str(p) for p in _export_files(w)}
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["state"] == "reclaimed", action
    result = json.loads(Path(action["uri"]).read_text())
    plan = json.loads(Path(result["plan"]).read_text())
    planned = {d["uri"] for d in plan["delete"]}
    assert planned == export  # the granted artifact's source copy, nothing else
    assert {k["uri"] for k in plan["keep"]} == before - export
    after = {str(p) for p in files_under(tmp_path / "runs")}
    assert after == before - planned
    assert w.record.reclaimed_bytes == plan["delete_bytes"] == sum(d["size"] for d in plan["delete"])
    assert files_under(Path(w.record.preserved_locations[0]))  # preserved evidence untouched
    assert (w.dest_root / "model" / "_PUBLISHED.json").exists()


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
    from rlcleanup.authority.reclaim import execute

    w = _published(tmp_path)
    grant = w.grant("reclaim")
    export = _export_files(w)
    storage = w.stack.ports.storage
    plan = {
        "delete": [
            {"uri": str(p), "size": p.stat().st_size, "crc32c": storage.stat(str(p)).crc32c, "generation": None}  # type: ignore[union-attr]
            for p in export
        ]
    }
    export[0].write_text("rewritten after the plan")
    late = export[0].parent / "written-later.json"
    late.write_text("{}")
    deleted, changed, reclaimed = execute(storage, plan)
    assert changed == [str(export[0])] and export[0].exists() and late.exists()
    assert set(deleted) == {str(p) for p in export[1:]}
    again = execute(storage, plan)  # idempotent: gone objects count once more as deleted, nothing else happens
    assert set(again[0]) == set(deleted) and again[2] == reclaimed
    assert grant.action.value == "reclaim"


def test_plan_is_recorded_before_deleting(tmp_path: Path) -> None:
    w = _published(tmp_path)
    storage = w.stack.ports.storage
    seen_at_first_delete: list[str | None] = []
    real = storage.delete

    def watching(uri: str) -> bool:
        if not seen_at_first_delete:
            grants = w.stack.ports.records.list_docs(f"runs/{w.run_id}/grants")
            seen_at_first_delete.append(
                next(d for _, d in grants if d["grant"]["action"] == "reclaim")["outcome"]["uri"]
            )
        return real(uri)

    storage.delete = watching  # type: ignore[method-assign]
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    assert (
        seen_at_first_delete
        and seen_at_first_delete[0]
        and seen_at_first_delete[0].endswith(f"reclaim-{grant.grant_id}.json")
    )
