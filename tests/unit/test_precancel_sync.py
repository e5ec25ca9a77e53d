"""Pre-cancel waits (bounded) for every node's final sync-manifest.json, then says what was not synced
(authority/precancel_sync.py; issue 35 item 4). A fake monotonic clock and sleep: no real wait."""

from __future__ import annotations

import json
from pathlib import Path

from authority_support import make_world, pre_cancel_event

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority.precancel_sync import wait_for_final_sync
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.steps.layout import discover


class _Clock:
    def __init__(self, on_sleep: object = None) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        if callable(self.on_sleep):
            self.on_sleep()


def _periodic_run(tmp_path: Path) -> tuple[Path, Path]:
    run = write_sample_run(tmp_path / "runs", "rendezvous-rank-cause")
    manifest = next((tmp_path / "runs").rglob("sync-manifest.json"))
    doc = json.loads(manifest.read_text())
    doc["reason"] = "periodic"  # the timer's sync: the node may still hold evidence it has not copied
    manifest.write_text(json.dumps(doc))
    return run, manifest


def test_the_final_manifest_arrives_within_the_wait(tmp_path: Path) -> None:
    run, manifest = _periodic_run(tmp_path)

    def final_sync() -> None:
        doc = json.loads(manifest.read_text())
        doc["reason"], doc["copied"], doc["skipped"] = "signal 15 (head)", doc["copied"][:1], []
        manifest.write_text(json.dumps(doc))

    clock = _Clock(final_sync)
    storage = LocalStorage()
    waited = wait_for_final_sync(storage, discover(storage, str(run)), 60, monotonic=clock.monotonic, sleep=clock.sleep)
    assert waited.final is True and waited.not_synced == []
    assert clock.sleeps == [5.0]  # one poll: the final manifest was there at the next look


def test_the_wait_runs_out_and_the_capture_says_what_was_not_synced(tmp_path: Path) -> None:
    run, _ = _periodic_run(tmp_path)
    clock = _Clock()
    storage = LocalStorage()
    waited = wait_for_final_sync(storage, discover(storage, str(run)), 12, monotonic=clock.monotonic, sleep=clock.sleep)
    assert waited.final is False and sum(clock.sleeps) == 12  # bounded by the setting, never longer
    assert any(
        "rank1-gke-h100-b: no final sync-manifest.json after 12s (last: reason 'periodic')" in n
        for n in waited.not_synced
    )
    assert "rank1-gke-h100-b/flight_recorder/nccl_fr_rank_1: missing (listed as copied (periodic) but absent)" in (
        waited.not_synced
    )


def test_the_pre_cancel_capture_puts_what_was_not_synced_on_the_record(tmp_path: Path) -> None:
    w = make_world(tmp_path, "rendezvous-rank-cause", run=False)  # a live run
    manifest = next((tmp_path / "runs").rglob("sync-manifest.json"))
    doc = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(doc | {"reason": "periodic"}))
    ports = w.stack.ports
    ports.settings = ports.settings.model_copy(update={"precancel_sync_wait_seconds": 0.0})  # no real wait here
    event = pre_cancel_event(w.run_uri, "j1")
    w.stack.emit(event)
    pre = w.record.pre_cancel
    assert pre is not None and pre.final_sync is False
    assert any("rank1-gke-h100-b: no final sync-manifest.json" in n for n in pre.not_synced)
    assert any("flight_recorder/nccl_fr_rank_1: missing" in n for n in pre.not_synced)
    assert any("the final sync did not arrive within 0s" in p for p in pre.problems)
