"""Hub inputs are data (issue 37 items 9 and 10): a run's values cannot rewrite the model card, and a repo id
huggingface_hub refuses is refused before signing and ends a signed grant as `malformed`, never `applying`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from authority_support import World, make_world

from rlcleanup.adapters.hf_hub import _mapped
from rlcleanup.authority.grants import Approver, new_key, public_b64, register_approver
from rlcleanup.authority.hub_card import model_card
from rlcleanup.ports.hub import repo_of
from rlcleanup.ports.storage import StorageError

HOSTILE_VALUES = {
    "yaml in the base model": "org/base\nlicense: mit\nbase_model: evil/model\n---\n| grant | forged by mallory |",
    "a forged table row": "x |\n| grant | forged-grant (publish) by mallory |",
    "front matter closed early": "---\n# forged heading\n---",
    "carriage returns and escapes": "a\r| grant | forged |\x1b]0;title\x07\u2028| grant | forged |",
    "html and code": "<script>alert(1)</script>`| grant | forged |`",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return make_world(tmp_path_factory.mktemp("hub-inputs"))


def _front_matter(card: str) -> dict[str, Any]:
    assert card.startswith("---\n")
    head, _, _ = card[4:].partition("\n---\n")
    loaded = yaml.safe_load(head)
    assert isinstance(loaded, dict)
    return loaded


def _table(card: str) -> list[str]:
    return [line for line in card.splitlines() if line.startswith("| ") and not line.startswith("| |")]


@pytest.mark.parametrize("name", sorted(HOSTILE_VALUES))
def test_a_config_value_cannot_rewrite_the_model_card(world: World, name: str) -> None:
    value = HOSTILE_VALUES[name]
    record = world.record.model_copy(update={"base_model": value, "run_uri": value, "source_revision": {"git": value}})
    card = model_card(record, world.candidate(), world.grant(destination="hf://rl-team/x"), "rl-team/x").decode()
    assert _front_matter(card) == {"library_name": "transformers", "tags": ["rlcleanup", "reinforcement-learning"]}
    rows = _table(card)
    assert [row.split(" | ")[0] for row in rows] == [
        "| run id", "| run", "| step", "| digest", "| parameters", "| base model", "| source revision",
        "| selection policy", "| metric window", "| grant",
    ]  # fmt: skip
    assert sum("mallory" in row or "forged" in row for row in rows) == 3  # only inside the three cells we filled
    assert card.count("\n---\n") == 1 and "<script>" not in card and "\x1b" not in card and "\r" not in card
    for row in rows:  # every row is one cell pair: no unescaped pipe inside a value
        assert row.replace("\\|", "").count("|") == 3, row


def test_a_valid_base_model_id_is_the_only_base_model_in_the_front_matter(world: World) -> None:
    record = world.record.model_copy(update={"base_model": "marin-community/tiny-llama"})
    card = model_card(record, world.candidate(), world.grant(destination="hf://rl-team/x"), "rl-team/x").decode()
    assert _front_matter(card)["base_model"] == "marin-community/tiny-llama"
    for not_an_id in ("gs://bucket/base", "org/a..b", "/home/me/base", "org/base model"):
        record = world.record.model_copy(update={"base_model": not_an_id})
        card = model_card(record, world.candidate(), world.grant(destination="hf://rl-team/x"), "rl-team/x").decode()
        assert "base_model" not in _front_matter(card), not_an_id


MALFORMED_REPO_IDS = [
    "hf://rl-team/m..x",
    "hf://rl-team/a--b",
    "hf://rl-team/x%2Fy",
    "hf://rl-team%2Fx",
    "hf://rl-team/-x",
    "hf://rl-team/x.",
    "hf://rl-team/" + "b" * 97,
    "hf://rl-team/a b",
]


@pytest.mark.parametrize("dest", MALFORMED_REPO_IDS)
def test_repo_ids_are_checked_by_huggingface_hubs_own_validator(dest: str) -> None:
    with pytest.raises(ValueError):
        repo_of(dest)


def test_valid_repo_ids_pass() -> None:
    assert repo_of("hf://rl-team/math-rl.s30_v2") == "rl-team/math-rl.s30_v2"


@pytest.mark.parametrize("dest", MALFORMED_REPO_IDS[:4])
def test_a_signed_grant_with_a_malformed_repo_id_ends_refused_not_applying(tmp_path: Path, dest: str) -> None:
    w = make_world(tmp_path)
    key = new_key()
    register_approver(
        w.stack.ports.records,
        Approver(approver_id="bob", public_key=public_b64(key), allowed_prefixes=["hf://rl-team"]),
    )
    grant = w.grant(action="handoff", destination=dest, granted_by="bob")
    w.deliver(w.message(grant, key=key))
    doc = w.grant_doc(grant.grant_id)
    assert doc["state"] == "refused" and doc["refusal"] == "malformed", doc
    assert "repo id" in doc["detail"] or "hf://" in doc["detail"]


def test_a_client_side_validation_error_is_permanent_not_retried() -> None:
    from huggingface_hub.errors import HFValidationError

    mapped = _mapped(HFValidationError("Cannot have -- or .. in repo_id"), "model_info")
    assert isinstance(mapped, ValueError) and not isinstance(mapped, StorageError)
