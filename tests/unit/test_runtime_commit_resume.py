"""Resuming across a runtime-commit change is unsafe (run-layout-v3.md §7; marin docs/references/rl-launching.md):
each place an attempt names its commit (MarinSkyRL cloud/iris/protocol.py RuntimeIdentity, older records'
launcher_commit, a launch manifest's document), and the reason names both attempts and commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from layout_support import bare_layout

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.samples.hf_export import write_checkpoint_dir
from rlcleanup.steps.layout import AttemptFiles, RunLayout
from rlcleanup.steps.runtime_commits import attempt_commit, commit_change
from rlcleanup.steps.validate import check_resume_safety

OLD, NEW = "1" * 40, "2" * 40


def _request(c: str) -> dict[str, Any]:
    return {"request": {"runtime": {"commit": c, "profile": "fsdp"}}}


def _response(c: str) -> dict[str, Any]:
    return {"response": {"runtime": {"commit": c, "profile": "fsdp"}}}


def _legacy(c: str) -> dict[str, Any]:
    return {"response": {"runtime": {"launcher_commit": c}}}


def _launch(c: str) -> dict[str, Any]:
    return {"config": {"runtime": {"launcher_commit": c}}, "result": {"state": "failed"}}


SHAPES = [_request, _response, _legacy, _launch]


@pytest.mark.parametrize("shape", SHAPES)
def test_each_record_shape_names_its_commit(shape: Any) -> None:
    assert attempt_commit(AttemptFiles("a", record=shape(OLD))) == OLD


def _layout(tmp_path: Path, records: list[dict[str, Any]]) -> RunLayout:
    ckpt = tmp_path / "checkpoints"
    write_checkpoint_dir(ckpt / "global_step_10", 10)
    (ckpt / "latest_ckpt_global_step.txt").write_text("10")
    return bare_layout(
        tmp_path,
        skyrl={"trainer": {"ckpt_interval": 5}},
        checkpoints_root=str(ckpt),
        attempts=[AttemptFiles(f"att{i}", record=r) for i, r in enumerate(records)],
        marker_step=10,
        marker_uri=str(ckpt / "latest_ckpt_global_step.txt"),
        checkpoint_steps=[10],
    )


@pytest.mark.parametrize("first", SHAPES)
@pytest.mark.parametrize("then", SHAPES)
def test_a_commit_change_between_resumed_attempts_is_unsafe(tmp_path: Path, first: Any, then: Any) -> None:
    safety = check_resume_safety(LocalStorage(checksums=False), _layout(tmp_path, [first(OLD), then(NEW)]))
    assert not safety.safe
    (reason,) = [r for r in safety.reasons if r.startswith("runtime_commit_changed:")]
    assert f"attempt att0 ran runtime commit {OLD[:12]}, attempt att1 ran {NEW[:12]}" in reason
    assert "private Torch or distributed state" in reason


@pytest.mark.parametrize(
    "records",
    [
        [_request(OLD), _response(OLD)],  # the same commit, named two ways
        [_request(OLD), {"response": {"state": "failed"}}],  # an attempt that names none decides nothing
        [],
    ],
)
def test_the_same_commit_stays_safe(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    safety = check_resume_safety(LocalStorage(checksums=False), _layout(tmp_path, records))
    assert safety.safe and safety.from_step == 10


def test_the_last_change_is_named_and_the_count_given() -> None:
    attempts = [AttemptFiles(f"a{i}", record=_request(c)) for i, c in enumerate([OLD, NEW, OLD])]
    reason = commit_change(attempts)
    assert reason is not None and reason.startswith(f"attempt a1 ran runtime commit {NEW[:12]}, attempt a2 ran")
    assert "(2 changes in the chain; the last shown)" in reason
