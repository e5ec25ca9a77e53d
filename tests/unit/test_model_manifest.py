"""The model manifest beside an export (run-layout-v3.md §3; MarinSkyRL marinskyrl/model_manifest.py): the reader
accepts what upstream writes (both tokenizer modes) and refuses what upstream's validators refuse; the export's files
are checked against it (sizes always, sha256 of the small files read here) and its identity reaches the candidate."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from layout_support import bare_layout

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.model_manifest import (
    MANIFEST_NAME,
    ManifestFile,
    check_manifest,
    manifest_identity,
    parse_manifest,
)
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.ports.storage import ObjectInfo
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import SCENARIOS, write_sample_run
from rlcleanup.samples.hf_export import write_hf_export
from rlcleanup.samples.v3 import write_model_manifest
from rlcleanup.steps.validate import validate_candidate

SHA = "ab" * 32


def _upstream_identity(value: dict[str, Any]) -> str:
    """model_manifest.py `_manifest_identity`, written out from the upstream source for the comparison."""
    body = {k: value[k] for k in ("files", "format_version", "model_id", "revision")}
    if value.get("tokenizer_mode", "embedded") != "embedded":
        body["tokenizer_mode"] = value["tokenizer_mode"]
    return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _manifest(**overrides: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "format_version": 1,
        "model_id": "org/model",
        "revision": "abc",
        "tokenizer_mode": "embedded",
        "files": [
            {"path": "config.json", "size": 10, "sha256": SHA},
            {"path": "model.safetensors.index.json", "size": 20, "sha256": SHA},
            {"path": "model-00001-of-00001.safetensors", "size": 30, "sha256": SHA},
        ],
    }
    value |= overrides
    value.setdefault("identity", _upstream_identity(value))
    return value


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12).filter(
    lambda n: n not in (".", "..") and ".." not in n
)


@settings(max_examples=60, deadline=None)
@given(
    extra=st.lists(st.tuples(_names, st.integers(0, 2**40)), max_size=6, unique_by=lambda t: t[0]),
    mode=st.sampled_from(["embedded", "policy"]),
    model_id=st.one_of(st.none(), _names),
    revision=st.one_of(st.none(), _names),
)
def test_identity_is_upstreams_for_any_file_list(
    extra: list[tuple[str, int]], mode: str, model_id: str | None, revision: str | None
) -> None:
    files = [{"path": "model.safetensors.index.json", "size": 5, "sha256": SHA}]
    files += [{"path": f"sub/{n}", "size": size, "sha256": SHA} for n, size in extra]
    value = _manifest(files=files, tokenizer_mode=mode, model_id=model_id, revision=revision)
    manifest, why = parse_manifest(value)
    assert manifest is not None, why
    entries = [ManifestFile(f["path"], f["size"], f["sha256"]) for f in files]
    assert manifest_identity(model_id, revision, entries, mode) == value["identity"] == manifest.identity


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (_manifest(extra_key=1), "unknown keys"),
        (_manifest(format_version=2), "format_version"),
        (_manifest(tokenizer_mode="both"), "tokenizer_mode"),
        (_manifest(identity="sha256:xyz"), "identity"),
        (_manifest(files=[]), "files"),
        (_manifest(files=[{"path": "config.json", "size": 1, "sha256": SHA}]), "model.safetensors.index.json"),
        (_manifest(files=[{"path": "/etc/passwd", "size": 1, "sha256": SHA}]), "relative and contained"),
        (_manifest(files=[{"path": "a/../../x", "size": 1, "sha256": SHA}]), "relative and contained"),
        (_manifest(files=[{"path": "x", "size": -1, "sha256": SHA}]), "size"),
        (_manifest(files=[{"path": "x", "size": True, "sha256": SHA}]), "size"),
        (_manifest(files=[{"path": "x", "size": 1, "sha256": "AB" * 32}]), "sha256"),
        (_manifest(files=[{"path": "x", "size": 1}]), "is not {path, size, sha256}"),
        (
            _manifest(
                files=[
                    {"path": "model.safetensors.index.json", "size": 1, "sha256": SHA},
                    {"path": "model.safetensors.index.json", "size": 1, "sha256": SHA},
                ]
            ),
            "duplicate",
        ),
        ([1, 2], "not a JSON object"),
    ],
)
def test_what_upstream_refuses_is_not_a_manifest(value: Any, why: str) -> None:
    manifest, reason = parse_manifest(value)
    assert manifest is None and reason is not None and why in reason


def _objects(sizes: dict[str, int]) -> dict[str, ObjectInfo]:
    return {name: ObjectInfo(uri=f"mem://e/{name}", size=size) for name, size in sizes.items()}


def test_check_against_the_listing() -> None:
    manifest, _ = parse_manifest(_manifest())
    assert manifest is not None
    fine = check_manifest(
        manifest,
        _objects({"config.json": 10, "model.safetensors.index.json": 20, "model-00001-of-00001.safetensors": 30}),
        {},
    )
    assert (fine.identity, fine.problems, fine.warnings) == (manifest.identity, [], [])

    listing = _objects({"config.json": 11, "model.safetensors.index.json": 20, "extra.txt": 1, MANIFEST_NAME: 9})
    bad = check_manifest(manifest, listing, {"model.safetensors.index.json": "cd" * 32})
    assert [code for code, _ in bad.problems] == [
        "manifest_size_mismatch",
        "manifest_sha256_mismatch",
        "manifest_file_missing",
    ]
    assert bad.identity == manifest.identity  # the manifest is sound; the bytes are not what it names
    assert bad.warnings == [f"1 file(s) not in {MANIFEST_NAME} (not covered by its identity): ['extra.txt']"]

    forged = _manifest()
    forged["files"][0]["size"] = 99  # the list was edited after the identity was computed
    tampered, _ = parse_manifest(forged)
    assert tampered is not None
    check = check_manifest(tampered, _objects({}), {})
    assert check.identity is None and check.problems[0][0] == "manifest_identity_mismatch"


@pytest.mark.parametrize(
    ("edit", "codes"),
    [
        (None, []),
        (
            lambda e: (e / "tokenizer_config.json").write_text((e / "tokenizer_config.json").read_text() + " "),
            ["manifest_size_mismatch"],
        ),
        (
            lambda e: (e / "config.json").write_text(
                (e / "config.json").read_text().replace('"bfloat16"', '"float16 "')
            ),
            ["manifest_sha256_mismatch"],
        ),
        (lambda e: (e / "generation_config.json").unlink(), ["manifest_file_missing"]),
        (lambda e: (e / MANIFEST_NAME).write_text("{}"), ["manifest_invalid"]),
    ],
)
def test_validation_checks_the_export_against_its_manifest(tmp_path: Path, edit: Any, codes: list[str]) -> None:
    export = tmp_path / "exports" / "global_step_5" / "policy"
    write_hf_export(export)
    identity = write_model_manifest(export, model_id="org/m", revision="step-5")
    if edit is not None:
        edit(export)
    candidate = validate_candidate(
        LocalStorage(checksums=False), bare_layout(tmp_path), 5, metric_steps=None, step_budget=None
    )
    assert candidate.problem_codes == codes
    assert candidate.model_identity == (None if codes == ["manifest_invalid"] else identity)


def test_without_a_manifest_nothing_changes(tmp_path: Path) -> None:
    write_hf_export(tmp_path / "exports" / "global_step_5" / "policy")
    candidate = validate_candidate(
        LocalStorage(checksums=False), bare_layout(tmp_path), 5, metric_steps=None, step_budget=None
    )
    assert (candidate.valid, candidate.model_identity) == (True, None)


def test_model_manifest_sample_through_the_embedded_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "model-manifest" in SCENARIOS
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
    root = write_sample_run(tmp_path / "runs", "model-manifest")
    identities = {
        s: json.loads((root / "exports" / f"global_step_{s}" / "policy" / MANIFEST_NAME).read_text())["identity"]
        for s in (5, 10, 15, 20)
    }
    record = run_embedded(str(root), db_path=tmp_path / "r.db", preserve_root=str(tmp_path / "p"))
    assert record is not None and record.status is RecordStatus.awaiting_authority
    assert [(c.step, c.valid, c.problem_codes, c.model_identity) for c in record.candidates] == [
        (5, True, [], identities[5]),
        (10, False, ["manifest_size_mismatch"], identities[10]),
        (15, False, ["manifest_sha256_mismatch"], identities[15]),
        (20, True, [], identities[20]),
    ]
    assert record.candidates[1].problems == [
        f"manifest_size_mismatch: tokenizer_config.json is "
        f"{(root / 'exports/global_step_10/policy/tokenizer_config.json').stat().st_size} bytes; {MANIFEST_NAME} says "
        f"{(root / 'exports/global_step_10/policy/tokenizer_config.json').stat().st_size - 1}"
    ]
