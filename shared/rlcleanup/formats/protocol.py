"""MarinSkyRL manifests and completion receipts (run-layout-v2.md §0, §2), validated as upstream validates them.

Upstream (MarinSkyRL @7160a11): `cloud/iris/protocol.py` (PROTOCOL_VERSION 2, `training_receipt_uri`,
`SkyRLLaunchResponse.training`, `SkyRLExportResponse`), `marinskyrl/training_completion.py` (`TrainingReceipt`,
`NativeCheckpoint`), `cloud/iris/training_result.py` (`read_training_result`, `validate_native_checkpoint`),
`marinskyrl/export_completion.py` (`ExportReceipt`, `verify_export_receipt`, `validate_hf_export`).
Every check here names the upstream rule it mirrors; a failed check is a reason string, never an exception.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from rlcleanup.formats.config import get
from rlcleanup.formats.hydra_overrides import compose_overrides
from rlcleanup.ports.storage import Storage
from rlcleanup.uris import join, parent

_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_TRAINER_STATE_BYTES = 512 * 1024 * 1024  # trainer_state.pt holds the step and the config: kilobytes, not GiB


class ManifestShape(StrEnum):
    v1 = "v1 {request, execution, response{..., model, failure}}"
    v2 = "v2 {schema_version: 2, request, execution, response{..., training}}"
    launch = "launch {config, result{..., runtime_profile, model}}"
    unknown = "unknown"


def manifest_shape(manifest: dict[str, Any]) -> ManifestShape:
    """§0: versions disagree and their order is unknown, so the keys decide."""
    if "result" in manifest and ("config" in manifest or isinstance(manifest.get("result"), dict)):
        return ManifestShape.launch
    if manifest.get("schema_version") == 2 or isinstance(get(manifest, "response.training"), dict):
        return ManifestShape.v2
    if isinstance(manifest.get("response"), dict):
        return ManifestShape.v1
    return ManifestShape.unknown


# -- wire types, tolerant pydantic mirrors of upstream's dataclasses ------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


class CheckpointFile(_Wire):
    path: str
    size: int


class NativeCheckpoint(_Wire):
    checkpoint_path: str
    global_step: int
    trainer_state_sha256: str
    files: list[CheckpointFile]

    @field_validator("trainer_state_sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        if not _SHA256.fullmatch(value):
            raise ValueError("trainer_state_sha256 is not a lowercase SHA-256 hex string")
        return value


class TrainingReceipt(_Wire):
    schema_version: int
    run_id: str
    attempt_id: str
    request_fingerprint: str
    completion_mode: str  # metrics | checkpoint
    global_step: int
    checkpoint: NativeCheckpoint | None = None


class ExportReceipt(_Wire):
    schema_version: int
    request_fingerprint: str
    attempt_id: str
    export_path: str
    global_step: int


@dataclass
class ReceiptCheck:
    uri: str
    valid: bool
    global_step: int | None = None
    completion_mode: str | None = None
    checkpoint_path: str | None = None
    fingerprint: str | None = None  # the receipt's request_fingerprint
    reasons: list[str] = field(default_factory=list)  # why it is invalid; empty when valid
    notes: list[str] = field(default_factory=list)  # what was checked

    def summary(self) -> str:
        state = "valid" if self.valid else "invalid"
        detail = "; ".join(self.reasons) if self.reasons else "; ".join(self.notes)
        return f"receipt {self.uri} is {state}" + (f" ({detail})" if detail else "")


def training_receipt_uri(terminal_manifest_uri: str, attempt_id: str) -> str:
    """`posixpath.join(dirname(terminal_manifest_uri), "receipts", f"{attempt_id}.json")` (protocol.py)."""
    return join(parent(terminal_manifest_uri), "receipts", f"{attempt_id}.json")


def _read_json(storage: Storage, uri: str) -> tuple[dict[str, Any] | None, str | None]:
    import json

    if storage.stat(uri) is None:
        return None, "absent"
    try:
        value = json.loads(storage.read_bytes(uri, 16 * 1024 * 1024))
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"unreadable: {exc}"
    return (value, None) if isinstance(value, dict) else (None, "not a JSON object")


_Receipt = TypeVar("_Receipt", bound=BaseModel)


def _parse_receipt(
    storage: Storage, uri: str, model: type[_Receipt], names: tuple[str, str], out: ReceiptCheck
) -> _Receipt | None:
    """The receipt parsed, or None with why on `out` (names: as said when absent, as said when it does not parse)."""
    raw, why = _read_json(storage, uri)
    if raw is None:
        out.reasons.append(f"{names[0]} {why}")
        return None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        out.reasons.append(f"{names[1]} does not parse: {'.'.join(map(str, first['loc']))}: {first['msg']}")
        return None


def recorded_completion(resolved_config: dict[str, Any]) -> dict[str, Any]:
    """`trainer.completion.*` from the resolved config's hydra_args, parsed with Hydra (training_result.py)."""
    args = resolved_config.get("hydra_args")
    if not isinstance(args, list):
        completion = get(resolved_config, "trainer.completion")
        return dict(completion) if isinstance(completion, dict) else {}
    composed = compose_overrides(args).config
    completion = get(composed, "trainer.completion")
    return dict(completion) if isinstance(completion, dict) else {}


def check_training_receipt(  # noqa: C901 -- one check per receipt field, in the receipt's order
    storage: Storage,
    *,
    receipt_uri: str,
    run_id: str | None,
    attempt_id: str | None,
    completion_mode: str | None,
    resolved_config: dict[str, Any] | None,
    checkpoint_root: str | None,
    marker_step: int | None,
    check_files: bool = True,
) -> ReceiptCheck:
    """§2: valid iff ids match the request and the resolved config carries equal `trainer.completion.*`; checkpoint
    mode adds path `<checkpoint_root>/global_step_<N>`, files incl. trainer_state.pt, data.pt, `policy/*`, sizes > 0
    and exact, sha256(trainer_state.pt) matches, marker == N."""
    out = ReceiptCheck(uri=receipt_uri, valid=False)
    receipt = _parse_receipt(storage, receipt_uri, TrainingReceipt, ("training receipt", "receipt"), out)
    if receipt is None:
        return out
    out.global_step, out.completion_mode = receipt.global_step, receipt.completion_mode
    out.fingerprint = receipt.request_fingerprint
    reasons = out.reasons
    if receipt.schema_version != 1:
        reasons.append(f"schema_version {receipt.schema_version} (training_completion.py reads 1)")
    if receipt.global_step < 0:
        reasons.append(f"global_step {receipt.global_step} is negative")
    if not _SHA256.fullmatch(receipt.request_fingerprint):
        reasons.append("request_fingerprint is not a SHA-256 hex digest")
    for label, expected, actual in (
        ("run_id", run_id, receipt.run_id),
        ("attempt_id", attempt_id, receipt.attempt_id),
        ("completion_mode", completion_mode, receipt.completion_mode),
    ):
        if expected is not None and expected != actual:
            reasons.append(f"{label} {actual!r} differs from the request's {expected!r}")
    if (receipt.checkpoint is not None) != (receipt.completion_mode == "checkpoint"):
        reasons.append(f"checkpoint {'present' if receipt.checkpoint else 'absent'} in {receipt.completion_mode} mode")

    if resolved_config is None:
        reasons.append("the resolved config (entrypoint + hydra_args) is absent")
    else:
        if not isinstance(resolved_config.get("entrypoint"), str) or not isinstance(
            resolved_config.get("hydra_args"), list
        ):
            reasons.append("resolved config lacks entrypoint and hydra_args (training_result.py requires both)")
        recorded = recorded_completion(resolved_config)
        expected_completion = {
            "mode": receipt.completion_mode,
            "run_id": receipt.run_id,
            "attempt_id": receipt.attempt_id,
            "request_fingerprint": receipt.request_fingerprint,
            "receipt_uri": receipt_uri,
        }
        differing = sorted(k for k in expected_completion if recorded.get(k) != expected_completion[k])
        if differing:
            reasons.append("resolved config trainer.completion differs from the receipt in " + ", ".join(differing))
        else:
            out.notes.append("trainer.completion.* in hydra_args equals the receipt")

    checkpoint = receipt.checkpoint
    if receipt.completion_mode == "checkpoint" and checkpoint is not None:
        out.checkpoint_path = checkpoint.checkpoint_path
        if checkpoint.global_step != receipt.global_step:
            reasons.append(
                f"checkpoint.global_step {checkpoint.global_step} != receipt global_step {receipt.global_step}"
            )
        if checkpoint_root is not None:
            expected_path = join(checkpoint_root.rstrip("/"), f"global_step_{receipt.global_step}")
            if checkpoint.checkpoint_path.rstrip("/") != expected_path:
                reasons.append(f"checkpoint_path {checkpoint.checkpoint_path} is not {expected_path}")
        names = {f.path for f in checkpoint.files}
        if not {"trainer_state.pt", "data.pt"} <= names or not any(n.startswith("policy/") for n in names):
            reasons.append("inventory lacks trainer_state.pt, data.pt or policy/* files")
        bad = [f.path for f in checkpoint.files if f.size <= 0 or f.path.startswith("/") or ".." in f.path.split("/")]
        if bad:
            reasons.append(f"inventory has invalid entries: {', '.join(bad[:5])}")
        if check_files:
            check_inventory(storage, checkpoint, reasons, out.notes)
            if marker_step != receipt.global_step:
                reasons.append(f"commit marker reads {marker_step}, receipt global_step {receipt.global_step}")
        else:
            # After the temp TTL the checkpoint (and its marker) is gone by design; the receipt and the resolved
            # config are durable and still prove what training completed (export_job.py checks files at export).
            out.notes.append("checkpoint files and marker not checked: the temp checkpoint root lists nothing")
    out.valid = not reasons
    return out


def check_inventory(storage: Storage, checkpoint: NativeCheckpoint, reasons: list[str], notes: list[str]) -> None:
    """training_result.validate_native_checkpoint: every file exists with its exact size; the trainer-state digest.
    (MarinSkyRL cloud/iris/training_result.py @4505b55 as stored: "Checkpoint file is missing or changed", "Checkpoint
    trainer state differs from its completion receipt".)"""
    root = checkpoint.checkpoint_path.rstrip("/")
    missing: list[str] = []
    changed: list[str] = []
    for entry in checkpoint.files:
        if entry.path.startswith("/") or ".." in entry.path.split("/"):
            continue
        info = storage.stat(join(root, entry.path))
        if info is None:
            missing.append(entry.path)
        elif info.size != entry.size:
            changed.append(f"{entry.path} ({info.size} B, receipt {entry.size} B)")
    if missing:
        reasons.append(f"{len(missing)} checkpoint file(s) missing: {', '.join(missing[:5])}")
    if changed:
        reasons.append(f"checkpoint file(s) changed size: {', '.join(changed[:5])}")
    state_uri = join(root, "trainer_state.pt")
    if "trainer_state.pt" not in missing and storage.stat(state_uri) is not None:
        digest = hashlib.sha256(storage.read_bytes(state_uri, MAX_TRAINER_STATE_BYTES)).hexdigest()
        if digest != checkpoint.trainer_state_sha256:
            reasons.append("sha256(trainer_state.pt) differs from the receipt")
        else:
            notes.append("trainer_state.pt SHA-256 matches")
    if not missing and not changed:
        notes.append(f"all {len(checkpoint.files)} inventory files present with their sizes")


def check_export_receipt(
    storage: Storage,
    *,
    receipt_uri: str,
    request_fingerprint: str | None,
    export_path: str | None,
    global_step: int | None,
) -> ReceiptCheck:
    """§2: valid iff request_fingerprint, export_path and global_step match, and config.json, a tokenizer file, and
    model.safetensors or every indexed shard exist > 0 B (export_completion.verify_export_receipt)."""
    out = ReceiptCheck(uri=receipt_uri, valid=False)
    receipt = _parse_receipt(storage, receipt_uri, ExportReceipt, ("export receipt", "export receipt"), out)
    if receipt is None:
        return out
    out.global_step = receipt.global_step
    if receipt.schema_version != 1:
        out.reasons.append(f"schema_version {receipt.schema_version} (export_completion.py reads 1)")
    for label, expected, actual in (
        ("request_fingerprint", request_fingerprint, receipt.request_fingerprint),
        ("export_path", export_path.rstrip("/") if export_path else None, receipt.export_path.rstrip("/")),
        ("global_step", global_step, receipt.global_step),
    ):
        if expected is not None and expected != actual:
            out.reasons.append(f"{label} {actual!r} differs from {expected!r}")
    if not receipt.attempt_id.strip():
        out.reasons.append("empty attempt_id")
    _check_hf_files(storage, receipt.export_path.rstrip("/"), out.reasons)
    out.valid = not out.reasons
    if out.valid:
        out.notes.append(f"export {receipt.export_path} at step {receipt.global_step} matches and is nonempty")
    return out


def _check_hf_files(storage: Storage, export_path: str, reasons: list[str]) -> None:
    import json

    sizes = {o.uri[len(export_path) + 1 :]: o.size for o in storage.list(export_path)}
    if not sizes:
        reasons.append(f"model export not found: {export_path}")
        return
    if sizes.get("config.json", 0) <= 0:
        reasons.append("empty or absent config.json")
    if not any(s > 0 for n, s in sizes.items() if n.startswith("tokenizer") or n.endswith(".model")):
        reasons.append("no nonempty tokenizer file")
    index_name = "model.safetensors.index.json"
    if index_name not in sizes:
        if sizes.get("model.safetensors", 0) <= 0:
            reasons.append("no nonempty safetensors weights")
        return
    try:
        index = json.loads(storage.read_bytes(join(export_path, index_name), 64 * 1024 * 1024))
    except (ValueError, UnicodeDecodeError):
        reasons.append("unreadable safetensors index")
        return
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        reasons.append("invalid safetensors weight map")
        return
    missing = sorted({s for s in weight_map.values() if not isinstance(s, str) or sizes.get(s, 0) <= 0}, key=str)
    if missing:
        reasons.append(f"missing {len(missing)} nonempty safetensors shard(s): {missing[:5]}")
