"""The checkpoint/export format seam and the problem-code registry fail closed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from test_validate import codes, make_checkpoint, make_export, rcodes, resume, validate

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.checkpoints.base import Findings, FormatKind, UnknownFormatError
from rlcleanup.formats.checkpoints.fsdp import FsdpCheckpoint
from rlcleanup.formats.checkpoints.registry import BUILTIN, FormatRegistry
from rlcleanup.models.record import Candidate
from rlcleanup.models.vocab import PROBLEM_CODES, UnknownProblemCode, problem, problem_code
from rlcleanup.steps.validate import candidate_digest

# The contract's vocabulary (README, run-layout.md), plus the codes added since.
CONTRACT = [
    "missing_shard",
    "unindexed_shard",
    "tensor_not_in_shard",
    "truncated_shard",
    "corrupt_header",
    "index_total_size_mismatch",
    "missing_config",
    "missing_tokenizer",
    "step_mismatch",
    "beyond_last_saved_step",
    "metric_coverage_gap",
    "marker_missing",
    "marker_step_mismatch",
    "missing_rank_shard",
    "missing_trainer_state",
    "inconsistent_checkpoint_folder",
    "missing_index",
    "no_weights",
    "unsafe_path",
    "missing_checkpoint_dir",
]


def test_every_contract_problem_code_is_declared() -> None:
    assert set(CONTRACT) <= PROBLEM_CODES


def test_an_undeclared_problem_code_fails_closed() -> None:
    with pytest.raises(UnknownProblemCode, match="missing_shards"):
        problem("missing_shards", "typo of missing_shard")
    with pytest.raises(UnknownProblemCode):
        Findings().add("made_up", "x")
    with pytest.raises(UnknownProblemCode):
        problem_code("made_up: x")
    with pytest.raises(ValidationError, match="undeclared problem code 'made_up'"):
        Candidate(step=1, uri="/x", valid=False, problems=["made_up: x"])
    assert problem_code(problem("missing_shard", "a: b")) == "missing_shard"


def test_candidate_says_which_format_it_is(tmp_path: Path) -> None:
    make_export(tmp_path)
    c = validate(tmp_path)
    assert c.valid and c.format == "hf-safetensors"


def test_files_no_format_recognises_are_invalid_with_no_format(tmp_path: Path) -> None:
    policy = make_export(tmp_path, shards=[], index=False)
    (policy / "pytorch_model.bin").write_bytes(b"\x00" * 16)  # a legacy export: no registered format reads it
    c = validate(tmp_path)
    assert c.format is None and not c.valid and codes(c) == ["no_weights"]


def test_unknown_format_name_and_strategy_fail_closed() -> None:
    with pytest.raises(UnknownFormatError, match=r"'onnx'.*known: fsdp, hf-safetensors, megatron"):
        BUILTIN.get("onnx")
    with pytest.raises(UnknownFormatError, match="'deepspeed'"):
        BUILTIN.for_strategy("deepspeed")
    assert BUILTIN.for_strategy("FSDP2").name == "fsdp"
    assert BUILTIN.names(FormatKind.export) == ["hf-safetensors", "peft-lora-adapter"]  # issue 34 item 5


def test_a_checkpoint_of_an_unknown_strategy_is_not_resumable(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10)
    r = resume(tmp_path, skyrl={"trainer": {"strategy": "deepspeed", "ckpt_interval": 10}})
    assert not r.safe and rcodes(r) == ["unknown_format"] and "deepspeed" in r.reasons[0]


def test_without_a_declared_strategy_the_files_decide(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path, 10)
    for pt in (d / "policy").glob("*_rank_*.pt"):
        pt.unlink()
    # A complete torch_dist save (run-layout-v2.md §5): common.pt, the shards, .metadata, metadata.json.
    (d / "policy" / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    for name in ("common.pt", "__0_0.distcp", ".metadata"):
        (d / "policy" / name).write_bytes(b"x")
    assert resume(tmp_path, skyrl={"trainer": {"ckpt_interval": 10}}).safe  # detected as Megatron


def test_a_recorded_format_nobody_registered_is_never_digested(tmp_path: Path) -> None:
    make_export(tmp_path)
    c = validate(tmp_path)
    assert candidate_digest(LocalStorage(), c) == c.digest
    with pytest.raises(UnknownFormatError):
        candidate_digest(LocalStorage(), c.model_copy(update={"format": "onnx"}))


def test_registration_refuses_duplicate_names_and_strategies() -> None:
    registry = FormatRegistry([FsdpCheckpoint()])
    with pytest.raises(ValueError, match="already registered"):
        registry.register(FsdpCheckpoint())

    class OtherFsdp(FsdpCheckpoint):
        name = "fsdp-other"

    with pytest.raises(ValueError, match="strategies"):
        registry.register(OtherFsdp())
