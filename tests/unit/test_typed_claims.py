"""0 untyped claims (issue 46 item 4): every claim is written and read through its model. A module that completes
a claim with a dict or reads a claim's result as a dict (`claims.complete`/`result`/`results` outside the port's
own typed `complete_as`/`result_as`/`results_as`) fails here; a grant's outcome holds only the facts its model
names (no `extra="allow"`), and the pre-cancel capture a cancel is cleared on is read as its model."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest
from pydantic import ValidationError

import rlcleanup
from rlcleanup.authority.grants import Refusal
from rlcleanup.authority.outcome import ACTION_FACTS, Outcome
from rlcleanup.models.claims import GrantApplied, PreCancelCaptured

PACKAGE = Path(rlcleanup.__file__).parent
TYPED_HOME = PACKAGE / "ports" / "records.py"  # complete_as / result_as / results_as are written there, once
UNTYPED = {"complete", "result", "results"}


def untyped_claim_calls(paths: list[Path], root: Path = PACKAGE) -> list[str]:
    """`<...>claims.complete(...)`, `.result(...)`, `.results(...)`: a claim written or read as a dict."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = ast.unparse(node.func.value)
            if node.func.attr in UNTYPED and receiver.split(".")[-1] == "claims":
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}: {receiver}.{node.func.attr}")
    return found


def test_no_claim_is_written_or_read_without_its_model() -> None:
    modules = [p for p in PACKAGE.rglob("*.py") if p != TYPED_HOME]
    assert len(modules) > 200
    assert untyped_claim_calls(modules) == []


def test_the_scan_finds_an_untyped_claim(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def f(p, claims):\n"
        "    p.claims.complete('r', 'k', {'a': 1})\n"
        "    claims.results('r', 'pre-cancel:')\n"
        "    p.claims.result_as('r', 'k', M)\n"
    )
    assert untyped_claim_calls([planted], tmp_path) == [
        "planted.py:2: p.claims.complete",
        "planted.py:3: claims.results",
    ]


def test_every_fact_an_outcome_carries_is_a_field_of_the_grant_claim() -> None:
    assert {f.name for f in fields(Outcome)} >= set(ACTION_FACTS)
    assert set(ACTION_FACTS) <= set(GrantApplied.model_fields)
    full = Outcome(
        state="reclaimed",
        refusal=Refusal.destination_altered,
        twins=[{"name": "model.safetensors"}],
        model_manifest={"identity": "m", "sha256_verified": ["a"], "sha256_not_checked": [], "statement": "s"},
        purged=["p"],
        deleted=["d"],
        kept_changed=["k"],
        quarantined=["q"],
        refused_objects=[{"uri": "u", "reason": "r"}],
    )
    applied = GrantApplied.model_validate(full.as_doc())
    assert applied.model_manifest is not None and applied.model_manifest.sha256_verified == ["a"]
    assert applied.deleted == ["d"] and applied.refusal == "destination_altered"
    assert "purged" not in Outcome(state="used").as_doc()  # a fact an action did not add is not stored


def test_a_grant_claim_with_an_unnamed_fact_is_refused() -> None:
    with pytest.raises(ValidationError, match="extra"):
        GrantApplied.model_validate({"state": "published", "smuggled": 1})


def test_a_pre_cancel_capture_reads_its_reproducing_failures_as_models() -> None:
    stored = {
        "capture_uri": "gs://b/c",
        "job_id": "j",
        "source": "iris",
        "captured_at": "2026-12-01T00:00:00+00:00",
        "reproducing": [{"signature": "OOM", "signature_id": "abc", "attempts": ["0", "1"], "cause_recorded": False}],
        "run_uri": "gs://b/r",
        "layout_read": True,
    }
    capture = PreCancelCaptured.model_validate(stored)
    assert capture.reproducing[0].signature_id == "abc" and capture.reproducing[0].attempts == ["0", "1"]
    with pytest.raises(ValidationError):
        PreCancelCaptured.model_validate({**stored, "reproducing": [{"signature": "OOM"}]})
