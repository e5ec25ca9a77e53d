"""Issue 44 item 3, second half: a Marin export step that failed names its own error as the run's first cause.

MarinSkyRL `cloud/iris/export_job.py` `execute_export` (@4505b55) catches the export's own error and keeps only
`str(error)` in the attempt record's `response.failure`; the export step writes no log to storage. The
`export-expired` sample (its checkpoint gone from temp) is tested end to end in tests/unit/test_scenarios_v2.py;
here the protocol-v2 sample's export is made to fail while the training step's temp area (logs, checkpoints) is
still there: clean training logs, and training logs holding an error the training recovered from. The training
reached its budget in valid artifacts (marker 20, a valid receipt), so the run is completed by rule (1) and the
export's error is the one logged error the reasoning reports, never as the cause (the field is null): the export is
owed work, not a failed training.
"""

from __future__ import annotations

import json
from pathlib import Path

from decision_properties import contradictions, settle

from rlcleanup.models.vocab import TerminalState
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.steps.terminal_decision import TerminalDecision

# What `str(subprocess.CalledProcessError)` reads when the conversion job the export submits exits non-zero.
CONVERSION_FAILED = "Command '['iris', 'job', 'run', 'export-policy']' returned non-zero exit status 1."
RECOVERED = """\
Traceback (most recent call last):
  File "/app/skyrl_train/trainer.py", line 300, in train
    self.sync_weights()
RuntimeError: NCCL communicator was aborted on rank 1 during weight sync
"""


def _failed_export(tmp_path: Path) -> tuple[Path, Path]:
    """protocol-v2 with its export step failed as export_job.py records it: the attempt's response says failed
    with the caught error, no terminal.json or .artifact.json, `.executor_status` FAILED."""
    root = tmp_path / "runs"
    run = write_sample_run(root, "protocol-v2")
    (record_path,) = (run / "attempts").glob("*.json")
    record = json.loads(record_path.read_text())
    record["response"] |= {"state": "failed", "model": None, "failure": CONVERSION_FAILED}
    record_path.write_text(json.dumps(record))
    for name in ("terminal.json", ".artifact.json"):
        (run / name).unlink()
    (run / ".executor_status").write_text("FAILED\n")
    return root, record_path


def _settled(root: Path) -> tuple[TerminalDecision, list[str]]:
    verdict, fields = settle(next(root.rglob("math-rl-protocol-v2/2026.11.30")))
    assert verdict.decision is not None and contradictions(verdict.decision, fields) == []
    assert verdict.terminal_state is TerminalState.completed and verdict.first_failure_cause is None
    return verdict.decision, list(fields["terminal_reasoning"])


def test_a_failed_export_with_clean_training_logs_names_its_own_error(tmp_path: Path) -> None:
    root, record_path = _failed_export(tmp_path)
    decision, reasoning = _settled(root)
    logged = decision.recovered_error
    assert logged is not None
    error = logged.error
    assert (error.error_type, error.message) == ("export attempt failure", CONVERSION_FAILED)
    assert (error.source_uri, error.line, error.evidence_source) == (str(record_path), 1, "attempt_record")
    (said,) = [
        s for s in reasoning if s.startswith(f"An error was logged, export attempt failure: {CONVERSION_FAILED}")
    ]
    assert said.endswith("the export that failed is work still owed, not a failure of the run.")
    assert f"The export step failed: {CONVERSION_FAILED}." in reasoning


def test_an_error_the_succeeded_training_recovered_from_is_not_the_reported_one(tmp_path: Path) -> None:
    """The training step's terminal record says it succeeded: an error its log holds was recovered from; the error
    the run reports is the export's (chain order alone would have named the training's earlier error)."""
    root, record_path = _failed_export(tmp_path)
    (finelog,) = root.rglob("attempts/*/logs/finelog.log")
    finelog.write_text(finelog.read_text() + RECOVERED)
    decision, reasoning = _settled(root)
    logged = decision.recovered_error
    assert logged is not None and logged.error.source_uri == str(record_path)
    assert not any("NCCL communicator was aborted" in s for s in reasoning)


def test_a_training_attempts_failure_is_never_a_cause(tmp_path: Path) -> None:
    """Only the export's `failure` is its own error; a training attempt's is Iris's word on the job, which its
    logs explain: the all-teardown run (Iris says 'task 0 exited with code 134') still has no cause."""
    verdict, fields = settle(write_sample_run(tmp_path / "runs", "all-teardown"))
    assert verdict.first_failure_cause is None and fields["first_failure_reason"] == "no_causal_error_found"


def test_an_export_that_succeeded_on_a_retry_reports_no_export_error(tmp_path: Path) -> None:
    """A failed first export attempt followed by a successful one (terminal.json written): nothing is owed."""
    root = tmp_path / "runs"
    run = write_sample_run(root, "protocol-v2")
    (record_path,) = (run / "attempts").glob("*.json")
    record = json.loads(record_path.read_text())
    record["response"] |= {"state": "failed", "model": None, "failure": CONVERSION_FAILED}
    (run / "attempts" / "000000000000.json").write_text(json.dumps(record))
    verdict, fields = settle(run)
    assert verdict.terminal_state is TerminalState.completed and verdict.decision is not None
    assert verdict.decision.recovered_error is None and verdict.first_failure_cause is None
    assert not any(CONVERSION_FAILED in s for s in fields["terminal_reasoning"] if s.startswith("An error was logged"))
