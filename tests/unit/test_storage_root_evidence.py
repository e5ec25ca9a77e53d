"""Evidence outside the driver's log, wherever the run's storage root is (issue 44 item 5).

- On an `s3://` run whose rendezvous lies in the run's bucket under `iris/rl-rdv/<job>/`, the termination
  artifact's cgroup OOM line and a non-zero rank's Ray worker log are the cause, not the driver's Python exception
  that followed (the artifact's dmesg stamps are no wall-clock stamps, so the files are compared in scan order, where
  the driver's log comes first: only the infrastructure statement's rank puts the kill first).
- On a local mirror of a bucket (a gcsfuse mount, a copy kept for debugging) the rendezvous the log names by its cloud
  URI is read where the mirror keeps it, under the run's storage root (steps/readable_roots.run_storage_root, the
  one definition the rendezvous reader shares), end to end on the embedded pipeline.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sample_runs import run_embedded

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.models.failures import FailureClass
from rlcleanup.models.vocab import TerminalState
from rlcleanup.parsing.attempt_logs import assemble_attempt
from rlcleanup.parsing.log_scanner import scan_lines
from rlcleanup.runtime import evidence
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.steps.failure_rules import classify_failure
from rlcleanup.steps.first_cause import find_first_error
from rlcleanup.steps.layout_rendezvous import resolve
from rlcleanup.steps.readable_roots import run_storage_root

RDV = "s3://marin-runs/iris/rl-rdv/math-rl-oom"
DRIVER = """\
2026-11-30 08:15:40,000 INFO trainer.py:212 -- step 5 rollout start
Traceback (most recent call last):
  File "/app/skyrl_train/trainer.py", line 212, in train
    ray.get(refs)
RuntimeError: policy update failed: 1 of 8 workers returned no result
""".splitlines()
TERM_ARTIFACT = """\
=== TERMINATION ARTIFACT task=/marin/job/2 ts=1796026020 reason=signal 15 (worker rank 2) ===
--- dmesg OOM/kill tail ---
[ 4211.118812] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
[ 4211.119920] Memory cgroup out of memory: Killed process 5533 (ray::RayWorkerW) total-vm:912345678kB, anon-rss:1853412000kB
""".splitlines()
RANK3_WORKER = """\
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: FSDPPolicyWorker
The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: \
Task was killed due to the node running low on memory.
""".splitlines()


@pytest.mark.parametrize(
    ("evidence_uri", "lines", "error_type"),
    [
        (f"{RDV}/term_artifacts/_marin_job_2_1796026020.txt", TERM_ARTIFACT, "CgroupOOMKill"),
        (
            f"{RDV}/ray_session_logs/rank3-gke-h100-d/session_latest/logs/worker-1.err",
            RANK3_WORKER,
            "ray.NodeOutOfMemory",
        ),
    ],
)
def test_on_s3_the_evidence_beside_the_driver_log_states_the_cause(
    evidence_uri: str, lines: list[str], error_type: str
) -> None:
    driver = scan_lines(DRIVER, "s3://marin-runs/math-rl-oom/2026.11.30/logs/finelog.log", "a1")
    other = scan_lines(lines, evidence_uri, "a1")
    first = find_first_error([assemble_attempt("a1", [driver, other])])
    assert first is not None and first.causal
    assert (first.candidate.source_uri, first.candidate.error_type) == (evidence_uri, error_type)
    failure_class, found = classify_failure(TerminalState.failed, first.cause())
    assert failure_class is FailureClass.infrastructure and found is not None
    assert found.rule in {"kernel_oom_kill", "ray_memory_monitor"}


def _mirror(tmp_path: Path, named: str) -> Path:
    """The termination-oom sample as a local mirror keeps a legacy run: its rendezvous at the top of the bucket
    under `iris/rl-rdv/<job>`, the driver's log naming it as `named` (the cloud URI, or the mirror's own path)."""
    run = write_sample_run(tmp_path / "mirror", "termination-oom")
    bucket = tmp_path / "mirror"
    rendezvous = next(bucket.rglob("rendezvous/*/term_artifacts")).parent
    moved = bucket / "iris" / "rl-rdv" / "math-rl-termination-oom-2026-11-30"
    moved.parent.mkdir(parents=True)
    shutil.move(str(rendezvous), str(moved))
    log = next(bucket.rglob("finelog.log"))
    text = log.read_text()
    log.write_text(text.replace(f"Rendezvous: {rendezvous}", f"Rendezvous: {named.format(bucket=bucket)}"))
    return run


@pytest.fixture
def _no_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)


@pytest.mark.usefixtures("_no_report")
@pytest.mark.parametrize(
    "named",
    [
        "gs://marin-us-central2/iris/rl-rdv/math-rl-termination-oom-2026-11-30",  # the log names the cloud URI
        "{bucket}/iris/rl-rdv/math-rl-termination-oom-2026-11-30",  # or the mirror's own path
    ],
)
def test_a_local_mirror_reads_the_rendezvous_under_its_storage_root(tmp_path: Path, named: str) -> None:
    run = _mirror(tmp_path, named)
    assert run_storage_root(LocalStorage(checksums=False), str(run)) == str(tmp_path / "mirror")
    _, record = run_embedded(tmp_path, str(run))
    cause = record.first_failure_cause
    assert cause is not None, record.terminal_reasoning
    assert (cause.evidence_source, cause.error_type) == ("termination_artifact", "CgroupOOMKill")
    assert cause.source_uri.startswith(str(tmp_path / "mirror" / "iris" / "rl-rdv"))
    assert record.failure_class == FailureClass.infrastructure


def test_a_mirror_reads_nothing_outside_its_storage_root_or_for_another_job(tmp_path: Path) -> None:
    run = _mirror(tmp_path, "gs://marin-us-central2/iris/rl-rdv/math-rl-termination-oom-2026-11-30")
    from rlcleanup.steps.layout import discover

    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(run))
    root = run_storage_root(storage, str(run))
    assert resolve("gs://any/iris/rl-rdv/another-job", layout, root) == (
        None,
        "its job segment 'another-job' does not name this run's job",
    )
    assert resolve("/etc/iris/rl-rdv/math-rl-termination-oom-2026-11-30", layout, root)[0] is None
    assert resolve(f"{root}/iris/../../etc", layout, root)[0] is None
    outside = tmp_path / "elsewhere" / "iris" / "rl-rdv" / "math-rl-termination-oom-2026-11-30"
    outside.mkdir(parents=True)
    (tmp_path / "mirror" / "iris" / "link").symlink_to(outside.parent.parent)
    assert resolve(f"{root}/iris/link/rl-rdv/math-rl-termination-oom-2026-11-30", layout, root)[0] is None
