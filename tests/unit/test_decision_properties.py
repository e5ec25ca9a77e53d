"""One decision behind every terminal field (issue 44): over every bundled sample scenario and generated variations
of them, the record's terminal fields are the decision's and the reasoning rendered from it never names a cause the
field lacks nor says the budget was and was not reached (the checks: tests/unit/decision_properties.py). Then issue
44 item 4's case itself: a protocol-v2 run that reached its budget in every artifact but wrote no training receipt.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from corpus_support import DECORATIONS, decorate, load_corpus
from decision_properties import contradictions, settle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.models.vocab import TerminalState
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import SCENARIOS, write_sample_run
from rlcleanup.steps.layout import discover
from rlcleanup.steps.terminal_decision import BudgetStatus


def _drop_training_receipts(run_root: Path) -> None:
    for receipt in run_root.rglob("receipts/*.json"):
        if "exports" not in receipt.parts and "outcomes" not in receipt.parts:
            receipt.unlink()


def _status(value: str) -> Callable[[Path], None]:
    def write(run_root: Path) -> None:
        for status in run_root.rglob(".executor_status"):
            status.write_text(value + "\n")

    return write


def _drop(pattern: str) -> Callable[[Path], None]:
    def drop(run_root: Path) -> None:
        for path in run_root.rglob(pattern):
            path.unlink()

    return drop


def _marker(step: int) -> Callable[[Path], None]:
    def write(run_root: Path) -> None:
        for marker in run_root.rglob("latest_ckpt_global_step.txt"):
            marker.write_text(f"{step}\n")

    return write


def _strip_lines(needle: str) -> Callable[[Path], None]:
    def strip(run_root: Path) -> None:
        for log in run_root.rglob("*.log"):
            text = log.read_text(errors="replace")
            if needle in text:
                log.write_text("".join(ln for ln in text.splitlines(keepends=True) if needle not in ln))

    return strip


# What a variation may do to a generated run: the facts the terminal rules weigh, each changed alone or together.
VARIATIONS: dict[str, Callable[[Path], None]] = {
    "no training receipt": _drop_training_receipts,
    "status SUCCESS": _status("SUCCESS"),
    "status FAILED": _status("FAILED"),
    "status RUNNING": _status("RUNNING"),
    "no terminal.json": _drop("terminal.json"),
    "no attempt records": _drop("attempts/*.json"),
    "no marker": _drop("latest_ckpt_global_step.txt"),
    "marker 19": _marker(19),
    "marker 20": _marker(20),
    "marker 21": _marker(21),
    "no 'Training done!'": _strip_lines("Training done!"),
    "no stop-at-budget line": _strip_lines("Reached max"),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_sample_scenario_renders_its_decision(scenario: str, tmp_path: Path) -> None:
    verdict, fields = settle(write_sample_run(tmp_path / "runs", scenario))
    assert verdict.decision is not None
    assert contradictions(verdict.decision, fields) == []


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=st.sampled_from(sorted(SCENARIOS)),
    changes=st.lists(st.sampled_from(sorted(VARIATIONS)), min_size=1, max_size=3, unique=True),
)
def test_variations_never_contradict_their_decision(scenario: str, changes: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        run = write_sample_run(root, scenario)
        for change in changes:
            VARIATIONS[change](root)
        verdict, fields = settle(run)
    assert verdict.decision is not None
    assert contradictions(verdict.decision, fields) == [], (scenario, changes)


def test_protocol_v2_without_its_receipt_says_what_decided_and_what_to_check(tmp_path: Path) -> None:
    """Issue 44 item 4: the marker equals the budget, an export sits at the marker, 'Training done!' and 'Saved
    final checkpoint.' are logged and the controller says SUCCESS, but the training receipt protocol v2 requires
    (run-layout-v2.md §2: "success = valid receipt") is missing. The run stays indeterminate (rule (1) needs valid
    artifacts), and the reasoning says why, in agreement with itself, and what a person should check; it used to
    close with "the durable outputs do not show the budget reached" two lines after saying they did."""
    root = tmp_path / "runs"
    run = write_sample_run(root, "protocol-v2")
    _drop_training_receipts(root)
    verdict, fields = settle(run)
    decision = verdict.decision
    assert decision is not None
    assert (decision.state, decision.rule, decision.budget_status) == (
        TerminalState.indeterminate,
        "(proof)",
        BudgetStatus.reached_unproven,
    )
    assert decision.proof is not None and decision.proof.missing and decision.proof.name == "the training receipt"
    reasoning = fields["terminal_reasoning"]
    budget = next(s for s in reasoning if s.startswith("Budget: "))
    assert "the budget 20 was reached in the artifacts" in budget
    assert "the completion proof the protocol requires, the training receipt " in budget and "is missing" in budget
    assert reasoning.index(budget) + 1 == next(i for i, s in enumerate(reasoning) if s.startswith("Rule (proof) "))
    check = next(s for s in reasoning if s.startswith("To check: "))
    assert decision.proof.uri is not None and decision.proof.uri in check and "global_step_20" in check
    assert not any("do not show the budget" in s for s in reasoning)
    assert contradictions(decision, fields) == []


def test_a_recovered_error_is_never_called_the_first_cause(tmp_path: Path) -> None:
    """A completed run whose chain logged a causal error it recovered from: the field holds no cause, so no
    sentence presents the error as the first causal error (it used to read "First causal error: ..." above
    "did not stop the chain from completing the budget")."""
    root = tmp_path / "runs"
    run = write_sample_run(root, "failed-first-link")
    _marker(20)(root)
    _status("SUCCESS")(root)
    verdict, fields = settle(run)
    assert verdict.decision is not None and verdict.terminal_state is TerminalState.completed
    assert fields["first_failure_cause"] is None and verdict.decision.recovered_error is not None
    assert not any(s.startswith("First causal error") for s in fields["terminal_reasoning"])
    assert any("it is not the run's failure cause" in s for s in fields["terminal_reasoning"])
    assert contradictions(verdict.decision, fields) == []


def test_the_pipeline_records_the_unproven_completion_and_asks_a_person_to_check(tmp_path: Path) -> None:
    """Item 4 end to end: the record the pipeline writes for the receipt-less protocol-v2 run agrees with itself
    (class, signature and reasoning included), and its remaining work carries what to check."""
    root = tmp_path / "runs"
    run = write_sample_run(root, "protocol-v2")
    _drop_training_receipts(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
        record = run_embedded(str(run), db_path=tmp_path / "r.db", preserve_root=str(tmp_path / "p"))
    assert record is not None and record.terminal_state is TerminalState.indeterminate
    assert contradictions(None, record.model_dump(mode="json")) == []
    (check,) = [item for item in record.remaining_work if item.startswith("check how the run ended: ")]
    assert "/receipts/" in check and "global_step_20" in check


# -- the failure corpus inside runs -----------------------------------------------------------------------------------
# Every corpus excerpt (tests/corpus/failures.yaml), decorated as corpus_support does (each excerpt one way, in
# turn: plain, ANSI, Ray prefix, tqdm, CRI), becomes the first attempt's log of a failed run (all-teardown: one link,
# Iris says FAILED); every third one also becomes the preempted first link's log of a run that completed on resume
# (completed-resumed: the error did not decide). ~200 settles, about 20 ms each.
CORPUS_EVERY_NTH_COMPLETED = 3


def _first_attempt_logs(run: Path) -> Path:
    layout = discover(LocalStorage(checksums=False), str(run))
    prefix = layout.attempts[0].log_prefix
    assert prefix is not None
    return Path(prefix)


def _embed(logs: Path, original: str, excerpt: str, how: str, *, keep_original: bool) -> None:
    """The excerpt as the attempt's log: a CRI pod log under pods/, else the attempt's finelog."""
    shutil.rmtree(logs / "pods", ignore_errors=True)
    body = decorate(excerpt, how)
    if how == "cri":
        (logs / "pods").mkdir()
        (logs / "pods" / "0.log").write_text(body, encoding="utf-8")
        (logs / "finelog.log").write_text(original if keep_original else "", encoding="utf-8")
    else:
        (logs / "finelog.log").write_text((original if keep_original else "") + body, encoding="utf-8")


def test_every_corpus_excerpt_in_a_run_renders_its_decision(tmp_path: Path) -> None:
    failed_run = write_sample_run(tmp_path / "failed", "all-teardown")
    completed_run = write_sample_run(tmp_path / "completed", "completed-resumed")
    failed_logs, completed_logs = _first_attempt_logs(failed_run), _first_attempt_logs(completed_run)
    completed_log = (completed_logs / "finelog.log").read_text(encoding="utf-8")
    found: list[str] = []
    causes = completed = 0
    for index, excerpt in enumerate(load_corpus()):
        how = DECORATIONS[index % len(DECORATIONS)]
        _embed(failed_logs, "", excerpt.log, how, keep_original=False)
        verdict, fields = settle(failed_run)
        assert verdict.decision is not None and verdict.terminal_state is TerminalState.failed, excerpt.id
        causes += fields["first_failure_cause"] is not None
        found += [f"{excerpt.id} [{how}] failed run: {c}" for c in contradictions(verdict.decision, fields)]
        if index % CORPUS_EVERY_NTH_COMPLETED == 0:
            _embed(completed_logs, completed_log, excerpt.log, how, keep_original=True)
            verdict, fields = settle(completed_run)
            assert verdict.decision is not None and verdict.terminal_state is TerminalState.completed, excerpt.id
            assert fields["first_failure_cause"] is None
            completed += 1
            found += [f"{excerpt.id} [{how}] completed run: {c}" for c in contradictions(verdict.decision, fields)]
    assert found == [], "\n".join(found)
    # The sample is the corpus, not a handful: most excerpts state a cause, and the completed runs were settled.
    assert causes >= 0.9 * len(load_corpus()) and completed >= len(load_corpus()) // CORPUS_EVERY_NTH_COMPLETED


# Issue 44 item 3's first case, as NovaSky SkyRL's tracker logs it (skyrl/train/utils/tracking.py log_exception:
# `logger.error(f"Training failed at step {step} with {type(e).__name__}:\n{tb_str}")`, tb_str cut to its last
# 10000 characters, so the traceback's header may be gone): the final export's shard write hit the disk quota.
SKYRL_TRACKER_EXPORT_FAILED = """\
(skyrl_entrypoint pid=5120) 2026-12-02 10:00:01.123 | ERROR | skyrl.train.utils.tracking:log_exception:88 - \
Training failed at step 20 with SafetensorError:
    save_file(shard, os.path.join(export_dir, name), metadata={"format": "pt"})
  File "/usr/local/lib/python3.12/site-packages/safetensors/torch.py", line 286, in save_file
    serialize_file(_flatten(tensors), filename, metadata=metadata)
safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 122, kind: FilesystemQuotaExceeded, \
message: "Disk quota exceeded" })
[slurm] job 733101 step 0 exited with code 1
"""


@pytest.mark.parametrize("committed", [True, False], ids=["marker-at-budget", "final-save-uncommitted"])
def test_skyrl_tracker_export_error_is_named_only_as_the_field_holds_it(tmp_path: Path, committed: bool) -> None:
    """The novasky-head run whose final export died of `SafetensorError … Disk quota exceeded`, logged through the
    tracker line, after 'Reached max_training_steps=20' and without 'Training done!'. Committed at the budget, the
    run completed and the error did not decide: the field is null and no sentence calls it the first causal error
    (the reasoning used to name it while the field was null). Not committed (marker 15, no export at 20), the error
    is the field's cause and the sentence names that same error. Before issue 44 the tracker line opened no
    traceback at all ("No traceback or fatal line was found")."""
    root = tmp_path / "runs"
    run = write_sample_run(root, "novasky-head")
    (log,) = root.rglob("*.out")
    kept = [ln for ln in log.read_text().splitlines(keepends=True) if "Training done!" not in ln]
    kept = [ln for ln in kept if "exited with code 0" not in ln]
    log.write_text("".join(kept) + SKYRL_TRACKER_EXPORT_FAILED)
    if not committed:
        next(root.rglob("latest_ckpt_global_step.txt")).write_text("15\n")
        shutil.rmtree(run / "exports" / "global_step_20")
    verdict, fields = settle(run)
    decision = verdict.decision
    assert decision is not None and contradictions(decision, fields) == []
    reasoning = fields["terminal_reasoning"]
    error = "safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 122, kind: "
    line = len(kept) + 5  # the exception line; the cause cites the tracker line that opens the traceback
    if committed:
        assert verdict.terminal_state is TerminalState.completed and fields["first_failure_cause"] is None
        assert decision.recovered_error is not None and decision.recovered_error.error.line == line - 4
        assert not any(s.startswith("First causal error") for s in reasoning)
        (logged,) = [s for s in reasoning if s.startswith(f"An error was logged, {error}")]
        assert "Disk quota exceeded" in logged and "it is not the run's failure cause" in logged
    else:
        cause = verdict.first_failure_cause
        assert cause is not None and cause.error_type == "safetensors_rust.SafetensorError"
        assert cause.line == line - 4 and "Disk quota exceeded" in cause.message
        assert cause.traceback.startswith("Training failed at step 20 with SafetensorError:")
        (named,) = [s for s in reasoning if s.startswith("First causal error: ")]
        assert named.startswith(f"First causal error: {error}") and f"{log}:{line - 4} " in named
