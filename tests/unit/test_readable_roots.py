"""A run's configuration never widens where we read (issue 37 item 14): on the embedded default (no run buckets)
a local run is read only inside its storage root, the directory that plays its bucket; a config root anywhere
else (`trainer.ckpt_path` at ~/.ssh, a link out of the root, `..`) is refused as root_outside_allowed with the
fix, before any byte is copied into evidence. RLCLEANUP_READABLE_ROOTS widens it; another prefix inside the same
storage root is accepted (the bucket is the boundary)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.handlers import resolve_run_id
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.settings import unconfigured
from rlcleanup.steps.readable_roots import local_storage_root

SECRET = b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


def _point_checkpoints_at(run_root: Path, storage_root: Path, target: str) -> None:
    """Rewrite every config of the run (resolved config, terminal record, attempt records) to name `target` as
    `trainer.ckpt_path`, as a hostile or mistaken config would."""
    old = next(str(p) for p in storage_root.glob("tmp/ttl=*/skyrl/*/*/checkpoints") if p.is_dir())
    for path in storage_root.rglob("*.json"):
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, target))


def _outside_dir(tmp_path: Path) -> Path:
    ssh = tmp_path / "home" / ".ssh"
    step = ssh / "global_step_10" / "policy"
    step.mkdir(parents=True)
    (ssh / "id_ed25519").write_bytes(SECRET)
    (ssh / "latest_ckpt_global_step.txt").write_text("10")
    (step / "payroll.log").write_text("salary: 1\n")
    return ssh


def _run(tmp_path: Path, readable_roots: tuple[str, ...] | None = None) -> tuple[EmbeddedStack, str]:
    storage_root = tmp_path / "runs"
    settings = unconfigured().model_copy(update={"readable_roots": readable_roots})
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"), settings=settings)
    run_root = next(storage_root.glob("durable/*/*"))
    event = manual_event(str(run_root))
    stack.emit(event)
    return stack, resolve_run_id(stack.ports, event)


def _evidence_holds_secret(tmp_path: Path) -> bool:
    return any(SECRET in p.read_bytes() for p in (tmp_path / "preserved").rglob("*") if p.is_file())


def _refused(stack: EmbeddedStack, run_id: str) -> str:
    """A run refused at admission gets no record (docs/authority.md §8 P11): the refusal is filed and dead-lettered."""
    assert stack.ports.records.get(run_id) is None
    codes = {d["code"]: d["message"] for _, d in stack.ports.records.list_docs("poison_messages")}
    assert "root_outside_allowed" in codes, codes
    return codes["root_outside_allowed"]


def test_the_storage_root_is_the_directory_holding_the_temp_area(tmp_path: Path) -> None:
    run_root = write_sample_run(tmp_path / "runs", "selection-policy")
    assert local_storage_root(RoutingStorage(), str(run_root)) == str(tmp_path / "runs")
    lone = tmp_path / "lone" / "run"
    lone.mkdir(parents=True)
    assert local_storage_root(RoutingStorage(), str(lone)) == str(lone)  # no temp area: the run itself


@pytest.mark.parametrize("how", ["absolute", "home-relative dots"])
def test_a_config_root_outside_the_storage_root_is_refused_with_the_fix(tmp_path: Path, how: str) -> None:
    run_root = write_sample_run(tmp_path / "runs", "selection-policy")
    ssh = _outside_dir(tmp_path)
    target = {
        "absolute": str(ssh),
        "home-relative dots": str(tmp_path / "runs" / ".." / "home" / ".ssh"),
    }[how]
    _point_checkpoints_at(run_root, tmp_path / "runs", target)
    stack, run_id = _run(tmp_path)
    detail = _refused(stack, run_id)
    assert "RLCLEANUP_READABLE_ROOTS" in detail and str(tmp_path / "runs") in detail
    assert not _evidence_holds_secret(tmp_path)


def test_a_config_root_through_a_link_inside_the_root_is_refused_as_unsafe(tmp_path: Path) -> None:
    """A config root that names a link inside the storage root is never followed, not even to read its marker
    while the layout is read (before, that read followed the link out to ~/.ssh): the run is recorded with
    unsafe_path naming the link, and nothing of the outside reaches evidence."""
    run_root = write_sample_run(tmp_path / "runs", "selection-policy")
    ssh = _outside_dir(tmp_path)
    target = tmp_path / "runs" / "tmp" / "innocent"
    os.symlink(ssh, target)
    _point_checkpoints_at(run_root, tmp_path / "runs", str(target))
    stack, run_id = _run(tmp_path)
    record = stack.ports.records.get(run_id)
    assert record is not None
    unsafe = [e.message for e in record.errors if e.code == "unsafe_path"]
    assert unsafe and "innocent" in unsafe[0], record.errors
    assert not _evidence_holds_secret(tmp_path)


def test_readable_roots_widen_the_default(tmp_path: Path) -> None:
    run_root = write_sample_run(tmp_path / "runs", "selection-policy")
    ssh = _outside_dir(tmp_path)
    _point_checkpoints_at(run_root, tmp_path / "runs", str(ssh))
    stack, run_id = _run(tmp_path, readable_roots=(str(ssh),))
    record = stack.ports.records.get(run_id)
    assert record is not None and "root_outside_allowed" not in {e.code for e in record.errors}


def test_another_prefix_inside_the_same_storage_root_is_accepted(tmp_path: Path) -> None:
    run_root = write_sample_run(tmp_path / "runs", "selection-policy")
    old = next(p for p in (tmp_path / "runs").glob("tmp/ttl=*/skyrl/*/*/checkpoints"))
    moved = tmp_path / "runs" / "elsewhere" / "checkpoints"
    moved.parent.mkdir(parents=True)
    old.rename(moved)
    _point_checkpoints_at_path(run_root, str(old), str(moved))
    stack, run_id = _run(tmp_path)
    record = stack.ports.records.get(run_id)
    assert record is not None and "root_outside_allowed" not in {e.code for e in record.errors}


def _point_checkpoints_at_path(run_root: Path, old: str, new: str) -> None:
    for path in run_root.parent.parent.parent.rglob("*.json"):
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new))
