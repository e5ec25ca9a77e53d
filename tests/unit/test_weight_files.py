"""One list of weight-file kinds decides what capture lists instead of copying and what is never read as text."""

from __future__ import annotations

import pytest

from rlcleanup.authority.secrets import is_text
from rlcleanup.formats.weight_files import WEIGHT_SUFFIXES, has_weight_suffix, is_bulk_weight


@pytest.mark.parametrize(
    ("name", "bulk"),
    [
        ("exports/global_step_10/policy/model-00001-of-00002.safetensors", True),
        ("policy/pytorch_model-00001-of-00002.bin", True),
        ("policy/__0_0.distcp", True),
        ("policy/model_world_size_8_rank_3.pt", True),
        ("policy/optim_world_size_8_rank_7.pt", True),
        ("global_step_10/trainer_state.pt", False),  # small resume evidence: preserved
        ("global_step_10/data.pt", False),
        ("policy/config.json", False),
        ("MODEL.SAFETENSORS", True),
    ],
)
def test_bulk_weights(name: str, bulk: bool) -> None:
    assert is_bulk_weight(name) is bulk


def test_every_weight_kind_is_binary_for_the_secret_scan() -> None:
    for suffix in WEIGHT_SUFFIXES:
        assert has_weight_suffix(f"x{suffix}")
        assert not is_text(f"gs://b/run/x{suffix}")
    assert is_text("gs://b/run/config.json")
