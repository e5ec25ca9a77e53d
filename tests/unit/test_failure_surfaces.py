"""Learning across runs through the whole embedded pipeline and its faces: every failure class from a sample
scenario, a second run dying the same way listing the first at wrap-up, `rlcleanup similar` (text and --json),
`rlcleanup show` and the report's "Seen before?" section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcleanup.cli.main import app
from rlcleanup.models.failures import FailureClass
from rlcleanup.models.record import CompletionRecord
from rlcleanup.report.build import build_document
from rlcleanup.report.inputs import ReportInputs
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

runner = CliRunner()
INFRA, CONFIG, TRAINING = FailureClass.infrastructure, FailureClass.configuration, FailureClass.training
# scenario -> (class, rule, evidence, rank, host): one or more sample runs per class
EXPECTED = {
    "failed-first-link": (TRAINING, "cuda_oom", "cause", None, None),
    "rotated-pod-logs": (TRAINING, "nan_divergence", "cause", None, None),
    "layout-d": (TRAINING, "cuda_oom", "cause", None, None),
    "termination-oom": (INFRA, "kernel_oom_kill", "cause", None, None),
    "ray-node-oom": (INFRA, "ray_memory_monitor", "cause", 3, "gke-h100-d"),
    "failure-receipts": (INFRA, "nccl_failure", "cause", 2, "gke-h100-c"),
    "rendezvous-rank-cause": (INFRA, "network_error", "cause", 1, "gke-h100-b"),
    "gpu-xid": (INFRA, "gpu_xid", "cause", None, None),
    "config-key-error": (CONFIG, "config_key", "cause", 0, "gke-h100-a"),
    "all-teardown": (FailureClass.unknown, "no_rule", "none", None, None),
}
NOT_FAILED = ("completed-resumed", "killed-iris")  # completed; cancelled by a person: no class


@pytest.fixture(autouse=True)
def _sqlite_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, CompletionRecord]]:
    base = tmp_path_factory.mktemp("learn")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evidence, "publish_report", lambda *args, **kwargs: None)  # the report is built below
        for scenario in (*EXPECTED, *NOT_FAILED):  # failed-first-link before layout-d: the earlier one
            root = write_sample_run(base / "src" / scenario, scenario)
            record = run_embedded(str(root), db_path=base / "r.db", preserve_root=str(base / "p"))
            assert record is not None
            out[scenario] = record
    return base / "r.db", out


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_each_sample_failure_has_its_class_and_deciding_evidence(
    runs: tuple[Path, dict[str, CompletionRecord]], scenario: str
) -> None:
    record = runs[1][scenario]
    ev = record.failure_evidence
    assert ev is not None
    assert (record.failure_class, ev.rule, ev.evidence, ev.rank, ev.host) == EXPECTED[scenario]
    if record.first_failure_cause:
        assert ev.evidence_uri == record.first_failure_cause.source_uri
        assert record.signature is not None and record.signature.startswith("sig1:")
    else:
        assert record.signature is None


@pytest.mark.parametrize("scenario", NOT_FAILED)
def test_a_run_that_did_not_fail_has_no_class(runs: tuple[Path, dict[str, CompletionRecord]], scenario: str) -> None:
    record = runs[1][scenario]
    assert (record.failure_class, record.failure_evidence, record.signature, record.similar_runs) == (
        None,
        None,
        None,
        [],
    )


def test_wrapup_lists_the_earlier_run_that_died_the_same_way(runs: tuple[Path, dict[str, CompletionRecord]]) -> None:
    """layout-d's CUDA OOM is failed-first-link's (the same message shape and frames on another run): its record
    lists it, with its class and how it ended; no run of that experiment completed, so no fix is known."""
    records = runs[1]
    later, earlier = records["layout-d"], records["failed-first-link"]
    assert later.signature == earlier.signature
    assert [(s.run_id, s.failure_class, s.terminal_state, s.fix) for s in later.similar_runs] == [
        (earlier.run_id, TRAINING, "failed", None)
    ]
    assert earlier.similar_runs == []  # wrapped up first: layout-d was not recorded yet


def test_similar_cli_text_and_json(runs: tuple[Path, dict[str, CompletionRecord]]) -> None:
    db, records = runs
    run_id, earlier = records["layout-d"].run_id, records["failed-first-link"].run_id
    result = runner.invoke(app, ["similar", run_id, "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"run {run_id}",
        "class: training (rule cuda_oom, from the cause)",
        f"decided by: {records['layout-d'].first_failure_cause.source_uri}",  # type: ignore[union-attr]
        f"signature: {records['layout-d'].signature}",
        f"other runs with this signature: 1 (1 before this run, 0 after; run {earlier} came first)",
        f"before: run {earlier} failed the same way; no later run of its experiment has completed: nothing known "
        "about a fix",
    ]
    result = runner.invoke(app, ["similar", run_id, "--db", str(db), "--json"])
    payload = json.loads(result.stdout)
    assert (payload["failure_class"], payload["signature"]) == ("training", records["layout-d"].signature)
    assert [(s["run_id"], s["came"]) for s in payload["similar_runs"]] == [(earlier, "before")]
    assert payload["signature_basis"]["frames"][0] == "utils/torch_utils.py:logprobs_from_logits"
    # Asked live, the run that failed first sees the one that failed after it (issue 44 item 7).
    result = runner.invoke(app, ["similar", earlier, "--db", str(db)])
    assert result.stdout.splitlines()[-2:] == [
        "other runs with this signature: 1 (0 before this run, 1 after; this run came first)",
        f"after: run {run_id} failed the same way; no later run of its experiment has completed: nothing known "
        "about a fix",
    ]
    missing = runner.invoke(app, ["similar", "no-such-run", "--db", str(db)])
    assert missing.exit_code == 1


def test_show_and_report_carry_the_failure_section(runs: tuple[Path, dict[str, CompletionRecord]]) -> None:
    db, records = runs
    shown = runner.invoke(app, ["show", records["config-key-error"].run_id, "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert "failure        class: configuration (rule config_key, from the cause)" in shown.stdout
    doc = build_document(ReportInputs(record=records["layout-d"]), with_figure=False)
    section = next(s for s in doc.sections if s.anchor == "failures")
    assert section.title == "Seen before?"
    completed = build_document(ReportInputs(record=records["completed-resumed"]), with_figure=False)
    assert all(s.anchor != "failures" for s in completed.sections)
