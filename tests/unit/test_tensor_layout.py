"""Issue 14 item 9: tensor names checked against the declared architecture by transformers' own loading rules."""

from __future__ import annotations

import sys

import pytest

from rlcleanup.formats.checkpoints import tensor_layout
from rlcleanup.formats.checkpoints.tensor_layout import check_tensor_layout
from rlcleanup.samples.v2 import moe_config, moe_tensors


def _importable() -> bool:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


INSTALLED = _importable()


def test_without_transformers_the_check_is_skipped_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    tensor_layout._meta_model.cache_clear()
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    report = check_tensor_layout(moe_config(), set(moe_tensors(fused=False)))
    assert (report.checked, report.mismatch) == (False, False)
    assert report.skipped_reason is not None and report.skipped_reason.startswith(
        "transformers/torch not installed or not importable"
    )
    tensor_layout._meta_model.cache_clear()


def test_per_expert_moe_loads_and_fused_moe_does_not() -> None:
    if not INSTALLED:  # the optional extra is absent: the skip path above is what runs in this environment
        assert not check_tensor_layout(moe_config(), set(moe_tensors(fused=True))).checked
        return
    per_expert = check_tensor_layout(moe_config(), set(moe_tensors(fused=False)), trace_memory=True)
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
