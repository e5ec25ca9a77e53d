"""Secret scan rules: what detect-secrets lacks, line numbers, metadata-only safetensors, never the secret."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority.secrets import scan_objects

HF = "hf_" + "q" * 8 + "Z1x2C3v4B5n6M7a8S9d0F1g2"
WANDB = "0123456789abcdef" * 2 + "01234567"


def _safetensors(path: Path, metadata: dict[str, str], payload: bytes) -> None:
    header = {"w": {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}}
    if metadata:
        header["__metadata__"] = metadata  # type: ignore[assignment]
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + payload)


def _scan(*paths: Path) -> list[str]:
    storage = LocalStorage()
    report = scan_objects(storage, [storage.stat(str(p)) for p in paths])  # type: ignore[misc]
    return [str(f) for f in report.findings]


def test_rules_detect_secrets_lacks(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(f"step 1\nexport HF_TOKEN={HF}\nWANDB_API_KEY={WANDB}\ncommit {'a1' * 20}\n")
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine api.wandb.ai\n  login user\n  password {WANDB}\n")
    sa = tmp_path / "sa.json"
    sa.write_text(
        json.dumps({"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIE\n"}, indent=1)
    )
    found = _scan(log, netrc, sa)
    assert f"{log}:2: Hugging Face token" in found
    assert f"{log}:3: W&B API key" in found
    assert f"{netrc}:3: W&B API key (netrc)" in found
    assert any(f.startswith(f"{sa}:") and "GCP service-account private key" in f for f in found)
    assert not any(":4:" in f for f in found if f.startswith(str(log)))  # a git SHA is not a secret
    assert all(HF not in f and WANDB not in f for f in found)


def test_safetensors_metadata_scanned_tensor_bytes_never(tmp_path: Path) -> None:
    clean = tmp_path / "model-00001.safetensors"
    _safetensors(clean, {"format": "pt"}, f"token={HF}".encode())  # looks like a token, but it is tensor data
    dirty = tmp_path / "model-00002.safetensors"
    _safetensors(dirty, {"format": "pt", "hub_token": HF}, b"\x00" * 16)
    found = _scan(clean, dirty)
    assert found == [f"{dirty}#header:1: Hugging Face token"]  # the whole header: tensor names and __metadata__
