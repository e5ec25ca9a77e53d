"""Layout D (run-layout-v3.md §1; MarinSkyRL cloud/iris/storage_policy.py): both roots of the storage policy are
recognised, the temp root is found under any allowed `tmp/ttl=<N>d/`, a run named by its temp root is read from its
durable root, and the `layout-d` sample goes through the embedded pipeline like the other layouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.models.vocab import ClassificationKind, RecordStatus, TerminalState
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import SCENARIOS, write_sample_run
from rlcleanup.samples.v3 import TTL_DAYS
from rlcleanup.steps import layout_d
from rlcleanup.steps.classify import classify
from rlcleanup.steps.layout import discover


@pytest.mark.parametrize(
    ("root", "user", "job", "durable", "first_temp", "ttl"),
    [
        # marin_prefix is the bucket root (upstream's default)
        (
            "gs://marin-us-central2/users/dlwh/skyrl/math-rl",
            "dlwh",
            "math-rl",
            "gs://marin-us-central2/users/dlwh/skyrl/math-rl",
            "gs://marin-us-central2/tmp/ttl=14d/skyrl/users/dlwh/math-rl",
            None,
        ),
        # a deeper marin_prefix: the temp root still hangs off the bucket root (resolve_storage_paths bucket_root)
        (
            "s3://marin-cw/prefix/a/users/ada/skyrl/job-1/",
            "ada",
            "job-1",
            "s3://marin-cw/prefix/a/users/ada/skyrl/job-1",
            "s3://marin-cw/tmp/ttl=14d/skyrl/users/ada/job-1",
            None,
        ),
        # named by its temp root, any allowed TTL
        (
            "gs://b/tmp/ttl=30d/skyrl/users/ada/job-2",
            "ada",
            "job-2",
            "gs://b/users/ada/skyrl/job-2",
            "gs://b/tmp/ttl=30d/skyrl/users/ada/job-2",
            30,
        ),
        (
            "/mirror/b/tmp/ttl=1d/skyrl/users/ada/job-3",
            "ada",
            "job-3",
            "/mirror/b/users/ada/skyrl/job-3",
            "/mirror/b/tmp/ttl=1d/skyrl/users/ada/job-3",
            1,
        ),
    ],
)
def test_layout_d_roots(root: str, user: str, job: str, durable: str, first_temp: str, ttl: int | None) -> None:
    pair = layout_d.roots(root)
    assert pair is not None
    assert (pair.user, pair.job, pair.durable_candidates[0], pair.temp_candidates[0], pair.ttl_days) == (
        user,
        job,
        durable,
        first_temp,
        ttl,
    )
    if ttl is None:  # every allowed TTL is searched, the default first
        days = [int(c.split("ttl=")[1].split("d/")[0]) for c in pair.temp_candidates[: len(layout_d.ALLOWED_TTL_DAYS)]]
        assert days == [14, 1, 2, 3, 4, 5, 6, 7, 30]


@pytest.mark.parametrize(
    "root",
    [
        "gs://b/iris/math-rl",  # legacy iris/<job> roots are not Layout D (read as before)
        "gs://b/users/dlwh/skyrl/iris",  # an `iris` segment is refused by the launcher
        "gs://b/math-rl/2026.11.30",  # Marin executor step
        "gs://b/tmp/ttl=14d/skyrl/math-rl/2026.11.30",  # Marin's temp area of an executor step
        "gs://b/users/dlwh/other/math-rl",
    ],
)
def test_other_roots_are_not_layout_d(root: str) -> None:
    assert layout_d.roots(root) is None


def _layout_d_run(tmp_path: Path, ttl: int) -> tuple[Path, Path]:
    bucket = tmp_path / "bucket"
    r = bucket / "users" / "ada" / "skyrl" / "job"
    t = bucket / "tmp" / f"ttl={ttl}d" / "skyrl" / "users" / "ada" / "job"
    r.mkdir(parents=True)
    (r / "resolved-skyrl.json").write_text(
        json.dumps({"entrypoint": "skyrl_train.entrypoints.main_base", "hydra_args": ["trainer.max_steps=10"]})
    )
    (t / "checkpoints" / "global_step_5").mkdir(parents=True)
    (t / "checkpoints" / "global_step_5" / "trainer_state.pt").write_bytes(b"s")
    (t / "checkpoints" / "latest_ckpt_global_step.txt").write_text("5")
    (t / "attempts").mkdir()
    (t / "attempts" / "0123456789ab.json").write_text(json.dumps({"response": {"state": "failed"}}))
    return r, t


@pytest.mark.parametrize("ttl", layout_d.ALLOWED_TTL_DAYS)
def test_discovery_finds_the_temp_root_under_every_allowed_ttl(tmp_path: Path, ttl: int) -> None:
    r, t = _layout_d_run(tmp_path, ttl)
    layout = discover(LocalStorage(checksums=False), str(r))
    assert (layout.run_uri, layout.temp_root, layout.checkpoints_root) == (str(r), str(t), str(t / "checkpoints"))
    assert (layout.marker_step, layout.checkpoint_steps) == (5, [5])
    assert [a.attempt_id for a in layout.attempts] == ["0123456789ab"]
    assert layout.exports_root == str(r / "exports")
    assert any("Layout D" in p and str(t) in p for p in layout.problems)


def test_a_run_named_by_its_temp_root_is_read_from_its_durable_root(tmp_path: Path) -> None:
    r, t = _layout_d_run(tmp_path, 3)
    layout = discover(LocalStorage(checksums=False), str(t))
    assert (layout.run_uri, layout.config_uri, layout.temp_root) == (str(r), str(r / "resolved-skyrl.json"), str(t))


def test_per_trial_outputs_under_the_layout_d_temp_root_are_agentic(tmp_path: Path) -> None:
    r, t = _layout_d_run(tmp_path, 14)
    storage = LocalStorage(checksums=False)
    assert classify(storage, discover(storage, str(r))).kind is ClassificationKind.standard
    (t / "trace_jobs" / "trial-0001").mkdir(parents=True)  # storage_policy.py trace_root = <temp>/trace_jobs
    (t / "trace_jobs" / "trial-0001" / "result.json").write_text("{}")
    decided = classify(storage, discover(storage, str(r)))
    assert decided.kind is ClassificationKind.unknown  # a standard entrypoint contradicted by per-trial outputs
    assert any(f"per-trial outputs under {t / 'trace_jobs'}" in e for e in decided.evidence)


def test_layout_d_sample_through_the_embedded_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "layout-d" in SCENARIOS
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
    root = write_sample_run(tmp_path / "runs", "layout-d")
    assert root.parts[-4:] == ("users", "dlwh", "skyrl", "math-rl-layout-d")
    temp = root.parents[3] / "tmp" / f"ttl={TTL_DAYS}d" / "skyrl" / "users" / "dlwh" / "math-rl-layout-d"
    record = run_embedded(str(root), db_path=tmp_path / "r.db", preserve_root=str(tmp_path / "p"))
    assert record is not None
    assert (record.run_id, record.run_uri, record.temp_root) == ("math-rl-layout-d", str(root), str(temp))
    assert record.classification.kind is ClassificationKind.standard
    assert (record.terminal_state, record.step_budget, record.last_saved_step) == (TerminalState.failed, 20, 15)
    assert record.first_failure_cause is not None
    assert record.first_failure_cause.error_type == "torch.OutOfMemoryError"
    assert len(record.chain.attempts) == 2
    assert [(c.step, c.valid) for c in record.candidates] == [(5, True), (10, True), (15, True)]
    assert record.resume_safety is not None and (record.resume_safety.safe, record.resume_safety.from_step) == (
        True,
        15,
    )
    assert record.status is RecordStatus.awaiting_authority

    # The same run named by its temp root (a notification on a checkpoint) is the same run, read the same way.
    again = run_embedded(str(temp), db_path=tmp_path / "r2.db", preserve_root=str(tmp_path / "p2"))
    assert again is not None
    assert (again.run_id, again.run_uri, again.terminal_state) == (record.run_id, str(root), TerminalState.failed)
