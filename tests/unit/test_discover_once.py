"""Discover once: classification lists the run; every later hop reads the stored layout snapshot instead.

Counted on a real embedded run of the 4-candidate sample (SQLite, local files, in-process bus): before the
snapshot, the pipeline's hops made 12 `discover()` calls and 44 listings; now the pipeline discovers once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.errors import InvalidMessage
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime import evidence, layouts
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event, resolve_run_id
from rlcleanup.runtime.stages import classify
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.steps.layout import discover
from rlcleanup.steps.layout_snapshot import LayoutSnapshot, load_layout, save_layout


@pytest.fixture
def run_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)  # charts are not under test here
    return str(write_sample_run(tmp_path / "runs", "completed-resumed"))


def _counting(calls: Counter[str], name: str) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return discover(*args, **kwargs)

    return counted


def test_the_pipeline_discovers_a_run_once(tmp_path: Path, run_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()
    monkeypatch.setattr(classify, "discover", _counting(calls, "handlers"))
    monkeypatch.setattr(layouts, "discover", _counting(calls, "fallback"))
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    event = manual_event(run_uri)
    stack.emit(event)
    assert calls == Counter({"handlers": 1})  # on-job-event only: no hop after it lists the run again
    record = stack.ports.records.get(resolve_run_id(stack.ports, event))
    assert record is not None and record.status is RecordStatus.awaiting_authority
    assert len(record.candidates) == 4 and all(c.valid for c in record.candidates)
    stored = stack.ports.claims.result(record.run_id, layouts.CLASSIFY_KEY)
    assert stored is not None and "/_parts/layout/" in stored["layout_uri"]


def test_snapshot_round_trips_the_layout_exactly(tmp_path: Path, run_uri: str) -> None:
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    layout = discover(stack.ports.storage, run_uri)
    dest = str(tmp_path / "preserved" / "run")
    uri = save_layout(stack.ports.storage, dest, layout)
    assert save_layout(stack.ports.storage, dest, layout) == uri  # content-addressed: a replay writes nothing new
    assert load_layout(stack.ports.storage, uri, dest_root=dest, run_uri=run_uri) == layout


@pytest.mark.parametrize("where", ["elsewhere", "other_run"])
def test_a_snapshot_outside_the_run_or_of_another_run_is_refused(tmp_path: Path, run_uri: str, where: str) -> None:
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    storage = stack.ports.storage
    layout = discover(storage, run_uri)
    dest = str(tmp_path / "preserved" / "run")
    if where == "elsewhere":
        uri = save_layout(storage, str(tmp_path / "attacker"), layout)
        match = "is not under"
    else:
        other = write_sample_run(tmp_path / "other", "missing-shard")
        uri = save_layout(storage, dest, discover(storage, str(other)))
        match = "not " + run_uri
    with pytest.raises(InvalidMessage, match=match):
        load_layout(storage, uri, dest_root=dest, run_uri=run_uri)


def test_a_run_classified_without_a_snapshot_is_discovered_again(tmp_path: Path, run_uri: str) -> None:
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    layout = layouts.run_layout(stack.ports, "never-classified", run_uri)
    assert layout == discover(stack.ports.storage, run_uri)
    assert LayoutSnapshot(layout=layout).layout is layout
