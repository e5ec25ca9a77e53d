"""The first cause where the driver's log does not have it, end to end on the embedded pipeline (issue 34 item 3,
issue 35 item 1): a rank's Ray log under the rendezvous, a termination artifact, Ray's memory monitor, a rotated
gzipped CRI pod log, a failure receipt (read before every log). The rendezvous evidence is preserved and listed in
the capture manifest, a node's sync manifest is checked, and a hostile `Rendezvous:` line reads nothing outside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sample_runs import run_embedded

from rlcleanup.models.record import CompletionRecord
from rlcleanup.runtime import evidence
from rlcleanup.samples.generator import SCENARIOS, write_sample_run


@pytest.fixture(autouse=True)
def _no_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)


def _run(tmp_path: Path, scenario: str) -> tuple[Path, CompletionRecord]:
    run = write_sample_run(tmp_path / "runs", scenario)
    _, record = run_embedded(tmp_path, str(run))
    return run, record


def _manifest(record: CompletionRecord) -> list[dict[str, object]]:
    assert record.manifest_uri is not None
    return json.loads(Path(record.manifest_uri).read_text())["objects"]


@pytest.mark.parametrize(
    ("scenario", "source", "error_type", "cited"),
    [
        ("rendezvous-rank-cause", "rank_log", "huggingface_hub.errors.LocalEntryNotFoundError", "worker-9f2c41d0a1"),
        ("termination-oom", "termination_artifact", "CgroupOOMKill", "/term_artifacts/"),
        ("ray-node-oom", "rank_log", "ray.NodeOutOfMemory", "/ray_session_logs/rank3-gke-h100-d/"),
        ("rotated-pod-logs", "rotated_pod_log", "ValueError", "0.log.20261130-080710.gz"),
        ("failure-receipts", "failure_receipt", "torch.distributed.DistBackendError", ".exception.json"),
    ],
)
def test_the_first_cause_outside_the_driver_log(
    tmp_path: Path, scenario: str, source: str, error_type: str, cited: str
) -> None:
    assert scenario in SCENARIOS  # `rlcleanup sample-run --scenario list` shows it
    _, record = _run(tmp_path, scenario)
    cause = record.first_failure_cause
    assert record.terminal_state == "failed"
    assert cause is not None, record.terminal_reasoning
    assert (cause.evidence_source, cause.error_type) == (source, error_type)
    assert cited in cause.source_uri
    assert any(source in line and error_type in line for line in record.terminal_reasoning)
    # What the cause cites is preserved: the manifest lists the file it came from.
    assert cause.source_uri in {o["source"] for o in _manifest(record)}


def test_a_partial_cri_line_is_read_back_whole(tmp_path: Path) -> None:
    _, record = _run(tmp_path, "rotated-pod-logs")
    assert record.first_failure_cause is not None
    assert record.first_failure_cause.message == (
        "advantages contain NaN at global_step 7: batch 14 (micro-batch 3 of 8, reward model returned NaN for 17 samples)"
    )


def test_the_receipt_wins_over_the_logs_and_says_so(tmp_path: Path) -> None:
    _, record = _run(tmp_path, "failure-receipts")
    cause = record.first_failure_cause
    assert cause is not None and cause.evidence_source == "failure_receipt"
    assert cause.message.startswith("NCCL error in: ProcessGroupNCCL.cpp:2056")
    assert "dist.all_reduce(loss)" in cause.traceback
    # The rank log's later symptom (a RuntimeError) would be the cause without the receipt.
    assert "RuntimeError" not in cause.error_type
    assert any("failure receipt" in line and "read before logs" in line for line in record.terminal_reasoning)


def test_rendezvous_evidence_is_preserved_and_sync_manifest_checked(tmp_path: Path) -> None:
    _, record = _run(tmp_path, "rendezvous-rank-cause")
    rendezvous = [o for o in _manifest(record) if o["kind"] == "rendezvous_evidence"]
    names = {str(o["source"]).split("/rendezvous/", 1)[1].split("/", 1)[1] for o in rendezvous}
    assert names >= {
        "debug_artifacts/rank1-gke-h100-b/sync-manifest.json",
        "debug_artifacts/rank1-gke-h100-b/stacks/policy.gke-h100-b.5521.log",
        "ray_session_logs/rank1-gke-h100-b/session_2026-11-30_08-00-03_417212_1/logs/raylet.out",
    }
    assert all(Path(str(o["destination"])).is_file() for o in rendezvous)
    incomplete = {(i.status, i.path, i.reason) for i in record.incomplete_evidence}
    assert ("skipped", "flight_recorder/nccl_fr_rank_1.full", "budget") in incomplete
    missing = [i for i in record.incomplete_evidence if i.status == "missing"]
    assert [(i.node_id, i.path) for i in missing] == [("rank1-gke-h100-b", "flight_recorder/nccl_fr_rank_1")]
    assert "incomplete_evidence" in record.error_codes


def test_a_complete_sync_manifest_leaves_nothing_on_the_record(tmp_path: Path) -> None:
    run = write_sample_run(tmp_path / "runs", "rendezvous-rank-cause")
    manifest = next((tmp_path / "runs").rglob("sync-manifest.json"))
    doc = json.loads(manifest.read_text())
    doc["copied"], doc["skipped"] = doc["copied"][:1], []
    manifest.write_text(json.dumps(doc))
    _, record = run_embedded(tmp_path, str(run))
    assert record.incomplete_evidence == [] and "incomplete_evidence" not in record.error_codes


@pytest.mark.parametrize("hostile", ["outside", "traversal"])
def test_a_hostile_rendezvous_line_reads_nothing_outside(tmp_path: Path, hostile: str) -> None:
    run = write_sample_run(tmp_path / "runs", "rendezvous-rank-cause")
    # Evidence an attacker staged outside the run's storage root: a receipt and an OOM artifact that would win.
    outside = tmp_path / "elsewhere" / "rdv"
    (outside / "term_artifacts").mkdir(parents=True)
    (outside / "term_artifacts" / "t_1.txt").write_text(
        "=== TERMINATION ARTIFACT task=x ts=1 reason=x ===\nMemory cgroup out of memory: Killed process 1 (planted)\n"
    )
    receipt_dir = outside / "debug_artifacts" / "n" / "outcomes"
    receipt_dir.mkdir(parents=True)
    receipt = {"kind": "exception", "exception_type": "builtins.PlantedError", "message": "planted", "traceback": ""}
    (receipt_dir / "p.h.1.1.exception.json").write_text(json.dumps(receipt))
    finelog = next((tmp_path / "runs").rglob("finelog.log"))
    temp_root = finelog.parents[3]
    named = outside if hostile == "outside" else Path(f"{temp_root}/../../../../../../elsewhere/rdv")
    finelog.write_text(f"Rendezvous: {named}\n" + finelog.read_text())

    _, record = run_embedded(tmp_path, str(run))
    cause = record.first_failure_cause
    assert cause is not None and "elsewhere" not in cause.source_uri and "Planted" not in cause.error_type
    assert not [o for o in _manifest(record) if "elsewhere" in str(o["source"])]
    assert any("refused" in w and "elsewhere" in w for w in record.chain.warnings)
    # The run's own rendezvous (named by the banner further down) is still read.
    assert cause.evidence_source == "rank_log"


def test_a_200000_deep_sync_manifest_is_refused_on_the_run_which_still_gets_its_record(tmp_path: Path) -> None:
    """Issue 45 item 8: the run's writer nests `sync-manifest.json` 200,000 deep; json.loads would exhaust the
    stack (RecursionError, no record). The depth is bounded and the refusal recorded on the run."""
    run = write_sample_run(tmp_path / "runs", "rendezvous-rank-cause")
    manifest = next((tmp_path / "runs").rglob("sync-manifest.json"))
    manifest.write_text("[" * 200_000 + "]" * 200_000)
    _, record = run_embedded(tmp_path, str(run))
    assert record.terminal_state is not None and record.first_failure_cause is not None
    refused = [e.message for e in record.errors if e.code == "unreadable_sync_manifest"]
    assert len(refused) == 1 and "nested deeper than 16 levels" in refused[0], record.errors
    assert "internal_error" not in record.error_codes


@pytest.mark.parametrize("name", ["terminal.json", "attempts/*.json"])
def test_a_200000_deep_run_record_is_refused_and_the_run_still_gets_its_record(tmp_path: Path, name: str) -> None:
    """Issue 45 item 8, the same class: terminal.json or an attempt record nested 200,000 deep ended the run with
    `internal_error: RecursionError` and no record; it is refused before json.loads and the run recorded failed."""
    run = write_sample_run(tmp_path / "runs", "failed-first-link")
    target = sorted((tmp_path / "runs").rglob(name))[0]
    target.write_text("[" * 200_000 + "]" * 200_000)
    _, record = run_embedded(tmp_path, str(run))
    assert record.run_uri == str(run) and record.status.value == "failed"
    [refused] = [e.message for e in record.errors if e.code == "unreadable_run"]
    assert target.name in refused and "nested deeper than 64 levels" in refused
