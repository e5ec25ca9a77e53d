"""One list of weight-file kinds decides what capture lists instead of copying."""

from __future__ import annotations

import pytest

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


def test_every_weight_kind_has_a_weight_suffix() -> None:
    # What the secret scan reads as text is decided by parsing the bytes now (test_authority_properties), not names.
    for suffix in WEIGHT_SUFFIXES:
        assert has_weight_suffix(f"x{suffix}")
        assert has_weight_suffix(f"X{suffix.upper()}")
    assert not has_weight_suffix("config.json")
