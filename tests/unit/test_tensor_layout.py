"""Issue 14 item 9: tensor names checked against the declared architecture by transformers' own loading rules.

The dev env carries the `layout-check` extra (the Makefile installs the CPU torch build, then `.[dev,layout-check]`),
so the real check runs here: a missing install is a failure, never a quiet skip. The not-installed path, what a
deployment without the extra records, is tested by hiding transformers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_validate import make_layout  # the small RunLayout builder of the validator tests

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.checkpoints import tensor_layout
from rlcleanup.formats.checkpoints.tensor_layout import LayoutReport, check_tensor_layout
from rlcleanup.models.record import Candidate
from rlcleanup.samples.hf_export import model_config, shard_layout, write_hf_export
from rlcleanup.samples.moe import moe_config, moe_tensors, write_moe_export
from rlcleanup.steps.validate import validate_candidate


def test_the_layout_check_extra_is_installed_in_the_dev_env() -> None:
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - a broken setup, reported as such
        pytest.fail(f"the layout-check extra is missing from the dev env ({exc}): run `make setup`")
    assert torch.__version__ and int(transformers.__version__.split(".")[0]) >= 5


@pytest.fixture
def no_kept_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty verdict cache (layout_verdicts.py), as on a fresh install: the check is decided in this process."""
    monkeypatch.setenv("RLCLEANUP_LAYOUT_VERDICTS_DIR", str(tmp_path / "verdicts"))
    return tmp_path / "verdicts"


def test_without_transformers_the_check_is_skipped_and_says_why(
    monkeypatch: pytest.MonkeyPatch, no_kept_verdicts: Path
) -> None:
    tensor_layout._meta_model.cache_clear()
    tensor_layout._verdict.cache_clear()
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    report = check_tensor_layout(moe_config(), set(moe_tensors(fused=False)))
    assert (report.checked, report.mismatch) == (False, False)
    assert report.skipped_reason is not None and report.skipped_reason.startswith(
        "transformers/torch not installed or not importable"
    )
    tensor_layout._meta_model.cache_clear()
    tensor_layout._verdict.cache_clear()


def test_a_repeated_architecture_is_decided_once_and_a_changed_name_set_again(
    monkeypatch: pytest.MonkeyPatch, no_kept_verdicts: Path
) -> None:
    """A run's candidates share config.json and header names: the second is answered from the cached verdict
    (no name renamed again), while one changed name is a new question with its own answer, never a stale one."""
    import transformers.core_model_loading as loading

    tensor_layout._verdict.cache_clear()
    renamed: list[str] = []
    real = loading.rename_source_key
    monkeypatch.setattr(loading, "rename_source_key", lambda key, *a, **k: (renamed.append(key), real(key, *a, **k))[1])
    names = {name for shard in shard_layout() for name, _ in shard}
    first = check_tensor_layout(model_config(), names)
    calls = len(renamed)
    assert calls >= len(names)
    again = check_tensor_layout(model_config(), set(names))
    assert len(renamed) == calls  # nothing renamed: the verdict was reused
    assert (again.checked, again.missing, again.unexpected) == (True, [], [])
    assert (first.checked, first.missing, first.unexpected) == (True, [], [])
    again.missing.append("mutating a report must not touch the cache")
    changed = {n.replace("model.layers.0.mlp.gate_proj", "decoder.layers.0.mlp.linear_fc1") for n in names}
    off = check_tensor_layout(model_config(), changed)
    assert len(renamed) > calls
    assert off.missing == ["model.layers.0.mlp.gate_proj.weight"]
    assert check_tensor_layout(model_config(), names).missing == []


def test_candidates_checked_at_once_build_the_meta_model_once_and_agree(no_kept_verdicts: Path) -> None:
    """validate_many checks a batch's candidates from several threads: the first verdict is computed once (not
    once per thread, ~5 s each on a cold process) and every thread gets it, none a skipped check."""
    import threading

    tensor_layout._meta_model.cache_clear()
    tensor_layout._verdict.cache_clear()
    names = {name for shard in shard_layout() for name, _ in shard}
    start = threading.Barrier(8)
    reports: list[LayoutReport] = []

    def check() -> None:
        start.wait()
        reports.append(check_tensor_layout(model_config(), names))

    threads = [threading.Thread(target=check) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reports) == 8 and all(r.checked and not r.mismatch for r in reports), reports
    assert tensor_layout._meta_model.cache_info().misses == 1
    assert tensor_layout._verdict.cache_info().misses == 1


def test_a_verdict_kept_on_disk_answers_a_later_process_without_importing_transformers(
    monkeypatch: pytest.MonkeyPatch, no_kept_verdicts: Path
) -> None:
    """A later process (its in-memory caches empty) with the same config and names reads the kept verdict: here it
    cannot import transformers or torch at all and still gets the full answer, fused MoE flagged as before. A name
    set never decided is not answered from the disk."""
    fused = set(moe_tensors(fused=True))
    first = check_tensor_layout(moe_config(), fused)
    assert first.checked and first.unexpected and len(list(no_kept_verdicts.glob("*.json"))) == 1
    tensor_layout._meta_model.cache_clear()
    tensor_layout._verdict.cache_clear()
    for name in ("torch", "transformers"):
        monkeypatch.setitem(sys.modules, name, None)
    kept = check_tensor_layout(moe_config(), fused)
    assert (kept.checked, kept.architecture, kept.missing, kept.unexpected, kept.experts) == (
        True,
        first.architecture,
        first.missing,
        first.unexpected,
        first.experts,
    )
    assert not check_tensor_layout(moe_config(), set(moe_tensors(fused=False))).checked
    tensor_layout._meta_model.cache_clear()
    tensor_layout._verdict.cache_clear()


def test_verdicts_are_kept_under_the_cache_home_unless_a_directory_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlcleanup.paths import layout_verdicts_dir

    monkeypatch.delenv("RLCLEANUP_LAYOUT_VERDICTS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert layout_verdicts_dir() == tmp_path / "cache" / "rlcleanup" / "tensor-layout"
    monkeypatch.setenv("RLCLEANUP_LAYOUT_VERDICTS_DIR", str(tmp_path / "shared"))
    assert layout_verdicts_dir() == tmp_path / "shared"


def test_a_kept_verdict_that_does_not_read_back_is_decided_again(no_kept_verdicts: Path) -> None:
    names = set(moe_tensors(fused=False))
    assert check_tensor_layout(moe_config(), names).checked
    (entry,) = no_kept_verdicts.glob("*.json")
    for garbage in ("{not json", "[]", json.dumps({"architecture": 7}), json.dumps({"missing": ["x"]})):
        entry.write_text(garbage)
        tensor_layout._verdict.cache_clear()
        again = check_tensor_layout(moe_config(), names)
        assert (again.checked, again.missing, again.unexpected, again.experts) == (True, [], [], [])
        assert json.loads(entry.read_text())["architecture"] == again.architecture  # written whole again


def test_per_expert_moe_loads_and_fused_moe_does_not() -> None:
    per_expert = check_tensor_layout(moe_config(), set(moe_tensors(fused=False)))
    assert (per_expert.checked, per_expert.missing, per_expert.unexpected) == (True, [], [])
    assert per_expert.architecture == "Qwen3MoeForCausalLM"
    fused = check_tensor_layout(moe_config(), set(moe_tensors(fused=True)))
    assert fused.missing == [
        f"model.layers.{layer}.mlp.experts.{name}" for layer in (0, 1) for name in ("down_proj", "gate_up_proj")
    ]
    assert fused.unexpected == [f"model.layers.{layer}.mlp.moe.experts.w{i}" for layer in (0, 1) for i in (1, 2, 3)]
    # A dropped layer norm is missing; a stray name is unexpected, even in the per-expert form.
    names = set(moe_tensors(fused=False)) - {"model.norm.weight"} | {"model.extra.weight"}
    broken = check_tensor_layout(moe_config(), names)
    assert (broken.missing, broken.unexpected) == (["model.norm.weight"], ["model.extra.weight"])


def test_dense_model_names_and_a_renamed_dense_export() -> None:
    names = {name for shard in shard_layout() for name, _ in shard}
    dense = check_tensor_layout(model_config(), names)
    assert (dense.checked, dense.architecture, dense.missing, dense.unexpected) == (True, "LlamaForCausalLM", [], [])
    # A Megatron-style export that kept its own names (`decoder.layers.0.mlp.linear_fc1.weight`) does not load.
    megatron = {n.replace("model.layers.0.mlp.gate_proj", "decoder.layers.0.mlp.linear_fc1") for n in names}
    off = check_tensor_layout(model_config(), megatron)
    assert off.missing == ["model.layers.0.mlp.gate_proj.weight"]
    assert off.unexpected == ["decoder.layers.0.mlp.linear_fc1.weight"]


def _validate(root: Path) -> Candidate:
    layout = make_layout(root, marker=20)
    return validate_candidate(LocalStorage(checksums=False), layout, 20, metric_steps=None, step_budget=None)


@pytest.mark.parametrize("kind", ["fused-moe", "per-expert-moe", "dense"])
def test_candidates_through_the_validator(tmp_path: Path, kind: str) -> None:
    """Written exports (real safetensors headers, config.json, tokenizer) validated as a run's candidates are."""
    policy = tmp_path / "exports" / "global_step_20" / "policy"
    if kind == "dense":
        write_hf_export(policy)
    else:
        write_moe_export(policy, fused=kind == "fused-moe")
    candidate = _validate(tmp_path)
    assert not any(w.startswith("tensor layout check skipped") for w in candidate.warnings)
    codes = [p.split(":", 1)[0] for p in candidate.problems]
    if kind != "fused-moe":
        assert "tensor_layout_mismatch" not in codes, candidate.problems
        return
    (problem,) = [p for p in candidate.problems if p.startswith("tensor_layout_mismatch")]
    assert problem == (
        "tensor_layout_mismatch: Qwen3MoeForCausalLM from config.json would load with 4 missing, first: "
        "model.layers.0.mlp.experts.down_proj, model.layers.0.mlp.experts.gate_up_proj, "
        "model.layers.1.mlp.experts.down_proj, model.layers.1.mlp.experts.gate_up_proj; 6 unexpected, first: "
        "model.layers.0.mlp.moe.experts.w1, model.layers.0.mlp.moe.experts.w2, model.layers.0.mlp.moe.experts.w3, "
        "model.layers.1.mlp.moe.experts.w1, model.layers.1.mlp.moe.experts.w2 (+1 more)"
    )
    assert json.loads((policy / "config.json").read_text())["model_type"] == "qwen3_moe"
