"""Issue 34 items 4 and 5 through the whole embedded pipeline: deferred HF exports (convertible and partial
candidates, the exports owed in remaining work) and LoRA adapter exports (their own candidate kind).

The runs are the `deferred-export` and `lora` samples (samples/exports_v3.py, built from MarinSkyRL's deferred
export and NovaSky SkyRL's LoRA save), some edited after writing to make one case each."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority.artifact import resolve_pinned
from rlcleanup.authority.grants import Action, Grant, Refusal
from rlcleanup.models.record import Candidate, CompletionRecord
from rlcleanup.models.vocab import CandidateKind, CandidateState
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.exports_v3 import HUB_REPO, SCENARIOS_EXPORTS_V3
from rlcleanup.samples.generator import SCENARIOS, write_sample_run
from rlcleanup.samples.hf_export import shard_layout, shard_name, write_safetensors

TRAILING_ONE = {"selection": {"metric": "reward/avg_raw_reward", "mode": "max", "trailing": 1}}


def _declare_policy(run: Path) -> None:
    config_path = run / "resolved-skyrl.json"
    config = json.loads(config_path.read_text())
    config["cleanup"] = TRAILING_ONE
    config_path.write_text(json.dumps(config, indent=2))


def _unfinished_upload(run: Path) -> None:
    """A cloud-path export that died after one shard: SkyRL stages locally then uploads, so `policy/` holds one
    shard and no config.json, while the step's request stays pending."""
    policy = run / "exports" / "global_step_20" / "policy"
    policy.mkdir(parents=True)
    write_safetensors(policy / shard_name(1), shard_layout()[0])


def _exports(run: Path, step: int) -> Path:
    return run / "exports" / f"global_step_{step}" / "policy"


def _break_adapters(run: Path) -> None:
    (_exports(run, 10) / "adapter_config.json").unlink()
    config_path = _exports(run, 15) / "adapter_config.json"
    config = json.loads(config_path.read_text())
    del config["base_model_name_or_path"]
    config_path.write_text(json.dumps(config))
    (_exports(run, 20) / "adapter_model.safetensors").unlink()


CASES: dict[str, tuple[str, Callable[[Path], None] | None]] = {
    "deferred": ("deferred-export", None),
    "deferred-with-policy": ("deferred-export", _declare_policy),
    "deferred-unfinished-upload": ("deferred-export", _unfinished_upload),
    "lora": ("lora", None),
    "lora-broken": ("lora", _break_adapters),
}


def _record_of(base: Path, scenario: str, edit: Callable[[Path], None] | None = None) -> CompletionRecord:
    """The record of `scenario` written under `base` (then edited), through the embedded pipeline, no charts."""
    run = write_sample_run(base, scenario)
    if edit is not None:
        edit(run)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
        record = run_embedded(str(run), db_path=base / "r.db", preserve_root=str(base / "p"))
    assert record is not None and record.errors == [], scenario
    return record


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CompletionRecord]:
    base = tmp_path_factory.mktemp("exports_v3")
    return {case: _record_of(base / case, scenario, edit) for case, (scenario, edit) in CASES.items()}


def _states(record: CompletionRecord) -> list[tuple[int, str, str, list[str]]]:
    return [(c.step, c.state.value, c.kind.value, sorted(c.problem_codes)) for c in record.candidates]


def _candidate(record: CompletionRecord, step: int) -> Candidate:
    return next(c for c in record.candidates if c.step == step)


def test_the_scenarios_are_listed() -> None:
    assert set(SCENARIOS_EXPORTS_V3) == {"deferred-export", "lora"} and set(SCENARIOS_EXPORTS_V3) <= set(SCENARIOS)


def test_pending_in_progress_and_failed_requests_are_convertible_or_partial(
    records: dict[str, CompletionRecord],
) -> None:
    r = records["deferred"]
    assert _states(r) == [
        (5, "valid", "full", []),
        (10, "convertible", "full", ["export_not_converted"]),
        (15, "partial", "full", ["partial_export"]),
        (20, "convertible", "full", ["export_not_converted"]),
    ]
    failed, running, never = (_candidate(r, s).export_request for s in (10, 15, 20))
    assert failed is not None and (failed.status, failed.attempts, failed.last_exit_code) == ("pending", 2, 1)
    assert running is not None and (running.status, running.attempts) == ("in_progress", 1)
    assert never is not None and (never.status, never.attempts, never.hub_repo_id) == ("pending", 0, HUB_REPO)
    assert _candidate(r, 10).uri.endswith("/checkpoints/global_step_10")  # what is convertible: the checkpoint
    assert ".tmp-hf-export-" in _candidate(r, 15).uri and _candidate(r, 15).digest is None
    assert all(not c.valid for c in r.candidates if c.step != 5)


def test_remaining_work_names_the_owed_exports_and_why(records: dict[str, CompletionRecord]) -> None:
    owed = [item for item in records["deferred"].remaining_work if item.startswith("export owed")]
    assert owed == [
        "export owed: global_step_10 (request pending (2 attempts, last exit code 1)); global_step_20 (request "
        "pending (0 attempts)): committed checkpoints whose HF export was requested but never made; convert each "
        "(cloud/iris/export_hf_checkpoint.py --request <checkpoint dir>) before it can be handed off",
        "export owed: global_step_15 (request in_progress (1 attempt)): the export job stopped mid-write (partial "
        "export, never valid); rerun the export from the checkpoint and discard the partial output",
        *(
            f"export owed: run global_step_{step}'s export under a grant: `rlcleanup grant "
            f"{records['deferred'].run_id} --action export --step {step} --key <key id> --dry-run`"
            for step in (10, 20)
        ),
    ]
    hub = [item for item in records["deferred"].remaining_work if "Hub repo" in item]
    assert hub and HUB_REPO in hub[0] and "outside any grant" in hub[0]


def test_selection_never_picks_a_convertible_or_partial_candidate(records: dict[str, CompletionRecord]) -> None:
    s = records["deferred-with-policy"].selection
    assert s is not None and (s.status, s.step, s.candidates_considered) == ("selected", 5, [5])


def test_an_unfinished_export_in_policy_is_partial_never_invalid_or_valid(records: dict[str, CompletionRecord]) -> None:
    c = _candidate(records["deferred-unfinished-upload"], 20)
    assert (c.state, c.valid) == (CandidateState.partial, False)
    assert {"missing_config", "partial_export"} <= set(c.problem_codes) and c.digest is None
    assert c.export_request is not None and c.export_request.status == "pending"


@pytest.mark.parametrize("step", [10, 15, 20])
def test_a_grant_refuses_a_convertible_or_partial_candidate(
    records: dict[str, CompletionRecord], tmp_path: Path, step: int
) -> None:
    record = records["deferred"]
    now = datetime.now(UTC)
    grant = Grant(
        run_id=record.run_id,
        action=Action.publish,
        step=step,
        digest="0" * 64,
        destination=str(tmp_path / "dest"),
        granted_by="approver",
        granted_at=now,
        expires_at=now + timedelta(hours=1),
    )
    candidate, objects, refused = resolve_pinned(LocalStorage(), record, grant)
    assert candidate is None and objects == {} and refused is not None
    assert refused.refusal == Refusal.candidate_invalid.value
    assert f"candidate {step} is {_candidate(record, step).state.value}, not an export to grant" in (
        refused.detail or ""
    )


def test_lora_adapters_are_valid_adapter_candidates_counted_from_their_tensors(
    records: dict[str, CompletionRecord],
) -> None:
    r = records["lora"]
    assert _states(r) == [(s, "valid", "adapter", []) for s in (5, 10, 15, 20)]
    for c in r.candidates:
        assert (c.format, c.parameter_count, c.size_label) == ("peft-lora-adapter", 8192, "8.2K")
        assert c.base_model == "marin-community/tiny-llama-2l-h64"
    assert r.selection is not None and r.selection.candidates_considered == [5, 10, 15, 20]


def test_broken_adapters_are_invalid_with_their_problem(records: dict[str, CompletionRecord]) -> None:
    assert _states(records["lora-broken"]) == [
        (5, "valid", "adapter", []),
        (10, "invalid", "adapter", ["missing_adapter_config"]),
        (15, "invalid", "adapter", ["missing_base_model_reference"]),
        (20, "invalid", "adapter", ["missing_adapter_weights"]),
    ]
    assert _candidate(records["lora-broken"], 20).kind is CandidateKind.adapter


def test_a_step_with_a_complete_request_and_no_export_is_not_owed(tmp_path: Path) -> None:
    """Iris reported the export done, but it is not where this run keeps exports: invalid, never convertible."""

    def complete_10(run: Path) -> None:
        ckpt = tmp_path / "tmp" / "ttl=14d" / "skyrl" / "math-rl-deferred-export" / "2026.11.30" / "checkpoints"
        request_path = ckpt / "global_step_10" / "hf_export_request.json"
        request = json.loads(request_path.read_text()) | {"status": "complete", "last_exit_code": 0}
        request_path.write_text(json.dumps(request))
        shutil.rmtree(run / "exports" / "global_step_15")  # one case at a time

    record = _record_of(tmp_path, "deferred-export", complete_10)
    c = _candidate(record, 10)
    assert (c.state, c.problem_codes) == (CandidateState.invalid, ["export_not_found"])
    assert not any("global_step_10" in item for item in record.remaining_work if item.startswith("export owed"))
