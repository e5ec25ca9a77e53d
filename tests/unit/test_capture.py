"""Step 3 (capture) through the embedded pipeline: manifest, weight listings, idempotency, write-once, hostile input."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.local_storage import file_checksums
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.storage import WriteOutcome
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event, run_embedded
from rlcleanup.samples.generator import write_sample_run

RUN_ID = "math-rl-completed-resumed-2026.11.30"
WEIGHT_SUFFIXES = (".safetensors",)


def _is_weight(path: Path) -> bool:
    return path.name.endswith(WEIGHT_SUFFIXES) or (path.suffix == ".pt" and "_rank_" in path.name)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _temp_root(run_root: Path) -> Path:
    # Layout A samples: R = <dest>/durable/<name>/<version>, T = <dest>/tmp/ttl=14d/skyrl/<name>/<version>.
    dest = run_root.parents[2]
    return dest / "tmp" / "ttl=14d" / "skyrl" / run_root.parent.name / run_root.name


def _run(run_root: Path, db: Path, preserve: Path) -> CompletionRecord:
    record = run_embedded(str(run_root), db_path=db, preserve_root=str(preserve))
    assert record is not None
    return record


def _manifest(preserve: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((preserve / RUN_ID / "manifest.json").read_text())
    return manifest


@pytest.fixture()
def run_root(tmp_path: Path) -> Path:
    return write_sample_run(tmp_path / "src", "completed-resumed")


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, CompletionRecord]:
    """One clean run shared by the read-only checks: (run root, preserve root, record)."""
    base = tmp_path_factory.mktemp("captured")
    root = write_sample_run(base / "src", "completed-resumed")
    return root, base / "preserved", _run(root, base / "r.db", base / "preserved")


def test_manifest_lists_every_preserved_object_with_checksums(captured: tuple[Path, Path, CompletionRecord]) -> None:
    run_root, preserve, record = captured
    assert record.errors == []
    dest_root = preserve / RUN_ID
    manifest = _manifest(preserve)
    assert (manifest["run_id"], manifest["preserved_root"]) == (RUN_ID, str(dest_root))
    objects = manifest["objects"]
    assert manifest["object_count"] == len(objects)
    assert manifest["total_bytes"] == sum(o["size"] for o in objects)
    assert record.manifest_uri == str(dest_root / "manifest.json")
    assert [o["destination"] for o in objects] == sorted(o["destination"] for o in objects)

    # Sealed last: every file in the preserved location is listed and hashed, the report included; only the
    # manifest itself is not (it cannot hold its own hash).
    on_disk = {str(p) for p in _files(dest_root)} - {str(dest_root / "manifest.json")}
    assert {o["destination"] for o in objects} == on_disk
    for obj in objects:
        dest = Path(obj["destination"])
        assert dest.stat().st_size == obj["size"]
        assert (obj["crc32c"], obj["md5"]) == file_checksums(dest)
        if obj["source"] != "derived":
            source = Path(obj["source"])
            assert source.read_bytes() == dest.read_bytes()
            assert (obj["crc32c"], obj["md5"]) == file_checksums(source)
    by_name = {str(Path(o["destination"]).relative_to(dest_root)): o["kind"] for o in objects}
    assert {n: k for n, k in by_name.items() if k == "report"} == {
        "derived/report.md": "report",
        "derived/report.html": "report",
        "derived/timeline.png": "report",
    }
    assert by_name["_parts/capture-manifest.json"] == "pipeline"
    # The record counts the evidence (what capture copied or derived): the capture manifest's totals.
    evidence = [o for o in objects if o["kind"] not in ("report", "pipeline")]
    assert manifest["captured_object_count"] == len(evidence) == record.preserved_object_count
    assert manifest["captured_bytes"] == sum(o["size"] for o in evidence) == record.preserved_bytes
    # The report names the manifest that lists it.
    assert f"| {dest_root / 'manifest.json'} |" in (dest_root / "derived" / "report.md").read_text()

    # Every non-weight evidence file of R and T is preserved; agentic-only trees are not.
    temp = _temp_root(run_root)
    expected = {
        str(p)
        for p in _files(run_root) + _files(temp)
        if not _is_weight(p) and "/attempts/trajectories/" not in str(p) and "/attempts/trace_jobs/" not in str(p)
    }
    sources = {o["source"] for o in objects if o["source"] != "derived"}
    assert sources == expected
    kinds = {Path(o["source"]).name: o["kind"] for o in objects if o["source"] != "derived"}
    assert kinds["finelog.log"] == "log"
    assert kinds["resolved-skyrl.json"] == kinds["terminal.json"] == "run_record"
    assert kinds["latest_ckpt_global_step.txt"] == kinds["trainer_state.pt"] == "checkpoint_metadata"
    assert kinds["model.safetensors.index.json"] == "export_metadata"
    derived = sorted(Path(o["destination"]).name for o in objects if o["kind"] == "derived")
    assert derived == ["checkpoints-listing.jsonl", "exports-listing.jsonl", "launch_command.txt", "metrics.jsonl"]


def test_a_changed_location_seals_a_new_manifest_generation(tmp_path: Path) -> None:
    """Write-once: a location that changed after sealing gets manifest-<sha12>.json, never an overwrite."""
    from rlcleanup.adapters.local_storage import LocalStorage
    from rlcleanup.steps.manifest import seal_manifest

    root = tmp_path / "p" / RUN_ID
    (root / "derived").mkdir(parents=True)
    (root / "derived" / "report.md").write_text("one\n")
    storage = LocalStorage()
    first = seal_manifest(storage, str(root), RUN_ID)
    first_bytes = Path(first.uri).read_bytes()
    assert first.uri == str(root / "manifest.json") and first.object_count == 1
    assert seal_manifest(storage, str(root), RUN_ID) == first  # a replay: identical bytes, same name
    (root / "derived" / "report-0123456789ab.md").write_text("two\n")
    second = seal_manifest(storage, str(root), RUN_ID)
    assert Path(second.uri).name.startswith("manifest-") and second.object_count == 2
    assert Path(first.uri).read_bytes() == first_bytes
    listed = [o["destination"] for o in json.loads(Path(second.uri).read_text())["objects"]]
    assert listed == [str(root / "derived" / "report-0123456789ab.md"), str(root / "derived" / "report.md")]


def test_weights_are_listed_not_copied(captured: tuple[Path, Path, CompletionRecord]) -> None:
    run_root, preserve, _ = captured
    dest_root = preserve / RUN_ID
    assert not [p for p in _files(dest_root) if _is_weight(p)]

    def listing(name: str) -> dict[str, dict[str, Any]]:
        lines = (dest_root / "derived" / f"{name}-listing.jsonl").read_text().splitlines()
        return {row["uri"]: row for row in map(json.loads, lines)}

    exports, checkpoints = listing("exports"), listing("checkpoints")
    export_files = _files(run_root / "exports")
    ckpt_files = _files(_temp_root(run_root) / "checkpoints")
    assert set(exports) == {str(p) for p in export_files}
    assert set(checkpoints) == {str(p) for p in ckpt_files}
    weights = [p for p in export_files + ckpt_files if _is_weight(p)]
    # 4 exports x 3 shards; 2 kept checkpoints x world size 2 x (model, optim, extra_state).
    assert len(weights) == 4 * 3 + 2 * 2 * 3
    for path in weights:
        row = exports.get(str(path)) or checkpoints[str(path)]
        assert row["size"] == path.stat().st_size
        assert (row["crc32c"], row["md5"]) == file_checksums(path)


def test_rerun_is_idempotent(run_root: Path, tmp_path: Path) -> None:
    preserve = tmp_path / "preserved"
    first = _run(run_root, tmp_path / "r.db", preserve)
    manifest_bytes = (preserve / RUN_ID / "manifest.json").read_bytes()
    snapshot = {p: p.read_bytes() for p in _files(preserve)}

    # Same store: every step is already done.
    again = _run(run_root, tmp_path / "r.db", preserve)
    assert again.errors == []
    assert again.model_dump(exclude={"updated_at"}) == first.model_dump(exclude={"updated_at"})
    # A fresh store replays every write onto the same preserve root: all identical, no conflict.
    replay = _run(run_root, tmp_path / "fresh.db", preserve)
    assert replay.errors == []
    assert (preserve / RUN_ID / "manifest.json").read_bytes() == manifest_bytes
    assert {p: p.read_bytes() for p in _files(preserve)} == snapshot
    assert replay.preserved_object_count == first.preserved_object_count


def test_write_once_conflict_is_recorded_and_planted_file_untouched(run_root: Path, tmp_path: Path) -> None:
    preserve = tmp_path / "preserved"
    planted = preserve / RUN_ID / "run" / "resolved-skyrl.json"
    planted.parent.mkdir(parents=True)
    planted.write_text('{"planted": true}\n')
    record = _run(run_root, tmp_path / "r.db", preserve)
    conflicts = [e for e in record.errors if e.code == "write_once_conflict"]
    assert len(conflicts) == 1
    assert (conflicts[0].step, conflicts[0].message) == (
        "capture",
        f"write_once_conflict: {planted} exists with different content; not overwritten",
    )
    assert planted.read_text() == '{"planted": true}\n'
    listed = {o["destination"]: o for o in _manifest(preserve)["objects"]}
    # The sealed manifest lists the planted file (it is there) as unaccounted: never as captured evidence.
    assert (listed[str(planted)]["source"], listed[str(planted)]["kind"]) == ("unknown", "unaccounted")
    assert listed[str(planted)]["crc32c"] == file_checksums(planted)[0]
    capture_manifest = json.loads((preserve / RUN_ID / "_parts" / "capture-manifest.json").read_text())
    assert str(planted) not in {o["destination"] for o in capture_manifest["objects"]}
    assert str(preserve / RUN_ID / "run" / "terminal.json") in listed  # the rest is still captured


class VanishingStorage:
    """Delegates to the real storage, but `victim` disappears from disk right before it is copied."""

    def __init__(self, inner: Any, victim: Path) -> None:
        self._inner, self._victim = inner, victim

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        if src_uri == str(self._victim) and self._victim.exists():
            self._victim.unlink()
        outcome: WriteOutcome = self._inner.copy_if_absent(src_uri, dst_uri)
        return outcome


def test_vanished_source_is_recorded(run_root: Path, tmp_path: Path) -> None:
    victim = run_root / ".executor_info"  # read by no other step, so only capture notices
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))
    stack.ports.storage = VanishingStorage(stack.ports.storage, victim)  # type: ignore[assignment]
    stack.emit(manual_event(str(run_root)))
    record = stack.ports.records.get(RUN_ID)
    assert record is not None
    assert [(e.step, e.code, e.message) for e in record.errors] == [
        ("capture", "source_vanished", f"source_vanished: {victim} was listed but is gone")
    ]
    assert not victim.exists()
    assert str(victim) not in {o["source"] for o in _manifest(tmp_path / "preserved")["objects"]}
    assert record.terminal_state is not None and record.terminal_state.value == "completed"


def test_symlink_in_a_local_run_is_refused_not_followed(run_root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOP SECRET\n")
    link = run_root / "notes.txt"
    os.symlink(secret, link)
    preserve = tmp_path / "preserved"
    record = _run(run_root, tmp_path / "r.db", preserve)
    assert [(e.step, e.code) for e in record.errors] == [("capture", "unsafe_path")]
    assert str(link) in record.errors[0].message
    # The storage ledger's listing meets the same link: not measured, and the record says why (never a crash).
    assert record.storage_ledger is None and record.storage_ledger_note is not None
    assert "unsafe_path" in record.storage_ledger_note and "storage --refresh" in record.storage_ledger_note
    preserved = _files(preserve)
    assert all(b"TOP SECRET" not in p.read_bytes() for p in preserved)
    assert not any(p.name == "notes.txt" for p in preserve.rglob("*"))
    # Refusing one object must not cost the rest of the durable root's evidence.
    sources = {o["source"] for o in _manifest(preserve)["objects"]}
    for name in ("resolved-skyrl.json", "terminal.json", ".executor_status", ".artifact.json"):
        assert str(run_root / name) in sources
    assert str(run_root / "exports" / "global_step_20" / "policy" / "config.json") in sources
    exports_listing = (preserve / RUN_ID / "derived" / "exports-listing.jsonl").read_text().splitlines()
    assert len(exports_listing) == 4 * 9  # 4 exports x (3 shards + index + config + generation + 3 tokenizer)
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
