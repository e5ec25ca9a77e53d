"""The audit of a Hub repo the run's own export job published to (authority/hub_audit.py), with the real
`huggingface_hub` client (2.4.0) against tests/servers/hub_standin.py, a STAND-IN for the Hub (model_info,
paths-info and resolve shapes from huggingface_hub 2.4.0's hf_api.py / file_download.py). Read-only: no case makes
a write request, which the stand-in's counters show."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hub_support import TOKEN, Standin, serve_standin

from rlcleanup.adapters.hf_hub import HubReadOnly
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority.hub_audit import HubTarget, audit, remaining_items
from rlcleanup.formats.model_manifest import MANIFEST_NAME, ManifestFile, manifest_identity
from rlcleanup.steps.remaining import Remaining

pytestmark = pytest.mark.integration
HF = "hf_" + "q" * 8 + "Z1x2C3v4B5n6M7a8S9d0F1g2"  # the secret tests' Hugging Face token shape
WRITES = ("POST /api/repos/create", "POST /api/models/{repo}/commit", "POST /api/models/{repo}/preupload")


def _files() -> dict[str, bytes]:
    return {
        "config.json": json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}).encode(),
        "model.safetensors.index.json": json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}}).encode(),
        "model-00001-of-00001.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + b"\x01" * 64,
        "tokenizer.json": b'{"version": "1.0"}',
        "tokenizer_config.json": b'{"model_max_length": 2048}',
        "README.md": b"# math-rl\nTrained with SkyRL.\n",
    }


def _export(root: Path, files: dict[str, bytes]) -> str:
    """An export dir with its model manifest, as MarinSkyRL's model_manifest.py writes it."""
    root.mkdir(parents=True)
    entries = [ManifestFile(p, len(b), hashlib.sha256(b).hexdigest()) for p, b in sorted(files.items())]
    for name, data in files.items():
        (root / name).write_bytes(data)
    manifest = {
        "format_version": 1,
        "model_id": "math-rl",
        "revision": None,
        "tokenizer_mode": "embedded",
        "identity": manifest_identity("math-rl", None, entries),
        "files": [{"path": e.path, "size": e.size, "sha256": e.sha256} for e in entries],
    }
    (root / MANIFEST_NAME).write_text(json.dumps(manifest))
    return str(root)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    yield from serve_standin(tmp_path_factory)


def _audit(hub: Standin, tmp_path: Path, repo: str, published: dict[str, bytes], *, private: bool = True) -> Any:
    export = _export(tmp_path / "policy", _files())
    hub.seed(repo, private, published)
    target = HubTarget(repo, "gs://b/ckpt/global_step_20/hf_export_request.json", 20, export, True, "main")
    return audit(LocalStorage(), HubReadOnly(endpoint=hub.url, token=TOKEN), target)


def test_a_clean_published_repo_is_recorded_as_checked(hub: Standin, tmp_path: Path) -> None:
    result = _audit(hub, tmp_path, "org/clean", _files())
    assert result.status == "checked", result.problems
    assert result.visibility == "private" and result.files_checked == 6 and result.text_files_scanned == 5
    assert result.endpoint == hub.url and remaining_items([result]) == []
    assert not any(hub.call("/__standin/stats").get(w) for w in WRITES)  # read-only


def test_a_public_repo_where_private_was_requested_needs_a_person(hub: Standin, tmp_path: Path) -> None:
    result = _audit(hub, tmp_path, "org/public", _files(), private=False)
    assert result.problem_codes == ["hub_visibility_mismatch"]
    assert "public but" in result.problems[0]
    items = remaining_items([result])
    assert Remaining(items).status.value == "needs_person"


def test_a_file_whose_sha_differs_from_the_manifest(hub: Standin, tmp_path: Path) -> None:
    files = _files() | {"model-00001-of-00001.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + b"\x02" * 64}
    result = _audit(hub, tmp_path, "org/sha", files)
    assert result.problem_codes == ["hub_sha256_mismatch"]
    assert "model-00001-of-00001.safetensors" in result.problems[0]


def test_a_regular_file_whose_bytes_differ_from_the_manifest(hub: Standin, tmp_path: Path) -> None:
    result = _audit(hub, tmp_path, "org/readme", _files() | {"README.md": b"# another card\n"})
    assert result.problem_codes == ["hub_sha256_mismatch"] and "README.md" in result.problems[0]


def test_a_missing_file(hub: Standin, tmp_path: Path) -> None:
    files = {k: v for k, v in _files().items() if k != "tokenizer_config.json"}
    result = _audit(hub, tmp_path, "org/missing", files)
    assert result.problem_codes == ["hub_file_missing"] and "tokenizer_config.json" in result.problems[0]


def test_a_token_in_a_published_readme_is_flagged_without_its_value(hub: Standin, tmp_path: Path) -> None:
    export_files = _files() | {"README.md": f"# math-rl\nexport HF_TOKEN={HF}\n".encode()}
    export = _export(tmp_path / "policy", export_files)
    hub.seed("org/secret", True, export_files)
    target = HubTarget("org/secret", "trainer.hf_hub_repo_id", 20, export, True, "main")
    result = audit(LocalStorage(), HubReadOnly(endpoint=hub.url, token=TOKEN), target)
    assert result.problem_codes == ["hub_secret_found"]
    assert result.problems == ["hub_secret_found: README.md:2: Hugging Face token"]
    assert HF not in result.model_dump_json()


def test_weights_nested_under_a_step_directory_do_not_load(hub: Standin, tmp_path: Path) -> None:
    nested = {f"global_step_20/{k}" if k != "README.md" else k: v for k, v in _files().items()}
    result = _audit(hub, tmp_path, "org/nested", nested)
    assert "hub_layout_unloadable" in result.problem_codes
    unloadable = next(p for p in result.problems if p.startswith("hub_layout_unloadable"))
    assert "config.json is missing at the root" in unloadable and "weights nested under a directory" in unloadable


def test_an_unparsable_config_does_not_load(hub: Standin, tmp_path: Path) -> None:
    export_files = _files() | {"config.json": b"{not json"}
    export = _export(tmp_path / "policy", export_files)
    hub.seed("org/badconfig", True, export_files)
    target = HubTarget("org/badconfig", "trainer.hf_hub_repo_id", 20, export, True, "main")
    result = audit(LocalStorage(), HubReadOnly(endpoint=hub.url, token=TOKEN), target)
    assert result.problem_codes == ["hub_layout_unloadable"] and "config.json does not parse" in result.problems[0]


def test_an_unreachable_hub_is_retried_then_recorded_not_passed(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    export = _export(tmp_path / "policy", _files())
    reader = HubReadOnly(endpoint=dead, token=TOKEN)
    result = audit(LocalStorage(), reader, HubTarget("org/any", "trainer.hf_hub_repo_id", 20, export, True, "main"))
    assert result.status == "unreachable" and result.problem_codes == ["hub_unreachable"]
    assert result.attempts == 3 and reader.requests == 3
    assert Remaining(remaining_items([result])).status.value == "needs_person"


def test_a_listed_file_that_reads_404_is_retried_then_recorded_not_passed(hub: Standin, tmp_path: Path) -> None:
    """Issue 45 item 8: the repo lists README.md, its download answers 404 (deleted between listing and read):
    the client's EntryNotFound reaches the audit as the adapter's ValueError; it is retried and recorded."""
    export = _export(tmp_path / "policy", _files())
    hub.seed("org/vanishing", True, _files(), unreadable=("README.md",))
    reader = HubReadOnly(endpoint=hub.url, token=TOKEN)
    result = audit(LocalStorage(), reader, HubTarget("org/vanishing", "x", 20, export, True, "main"))
    assert (result.status, result.problem_codes, result.attempts) == ("problems", ["hub_file_unreadable"], 3)
    assert "404" in result.problems[0]
    assert Remaining(remaining_items([result])).status.value == "needs_person"


def test_a_repo_id_the_validator_refuses_makes_no_request(tmp_path: Path) -> None:
    reader = HubReadOnly(endpoint="http://127.0.0.1:9", token=TOKEN)
    result = audit(LocalStorage(), reader, HubTarget("org/../etc", "x", 20, None, True, "main"))
    assert result.problem_codes == ["hub_repo_invalid"] and reader.requests == 0
