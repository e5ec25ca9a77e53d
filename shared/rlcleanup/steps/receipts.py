"""Protocol v2 facts of a run: which training and export receipts exist and whether each is valid
(run-layout-v2.md §2, §3). Read once per terminal-state step; the verdict rules consume the result."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rlcleanup.formats.config import get
from rlcleanup.formats.protocol import (
    ManifestShape,
    NativeCheckpoint,
    ReceiptCheck,
    check_export_receipt,
    check_inventory,
    check_training_receipt,
    manifest_shape,
    training_receipt_uri,
)
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.layout import RunLayout, StepState
from rlcleanup.steps.layout_files import loads_run_json
from rlcleanup.steps.marin import StepRole
from rlcleanup.uris import basename, join

# export_job.py wraps validate_native_checkpoint's "Checkpoint file is missing or changed: ..." (and fsspec's
# FileNotFoundError) in the export attempt's `failure`: the temp checkpoint the export needs is gone (§2 [I]).
_EXPIRED = re.compile(r"(?i)checkpoint file is missing or changed|no such file|not found|FileNotFoundError")


@dataclass
class ProtocolFacts:
    version: int | None = None  # 2 for schema_version 2 manifests / completion_mode configs
    completion_mode: str | None = None  # metrics | checkpoint
    training: ReceiptCheck | None = None
    export: ReceiptCheck | None = None
    export_failure: str | None = None  # the failed export attempt's `failure`
    checkpoints_expired: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def success_receipt_valid(self) -> bool:
        """v2 success = a valid training receipt (and, for a joined export step, a valid export receipt)."""
        return self.training is not None and self.training.valid

    @property
    def receipt_step(self) -> int | None:
        return self.training.global_step if self.training is not None else None


def _load(storage: Storage, uri: str) -> dict[str, Any] | None:
    if storage.stat(uri) is None:
        return None
    value = loads_run_json(storage.read_bytes(uri, 16 * 1024 * 1024), uri)
    return value if isinstance(value, dict) else None


def _training_manifest(step: StepState) -> dict[str, Any] | None:
    """terminal.json when the step succeeded, else the latest attempt record (its request carries the ids)."""
    if step.terminal:
        return step.terminal
    for att in reversed(step.attempts):
        if att.record:
            return att.record
    return None


def _receipt_location(layout: RunLayout, manifest: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(the request, the training receipt's URI): protocol.py `training_receipt_uri` from the request's ids."""
    raw_request = manifest.get("request")
    request: dict[str, Any] = raw_request if isinstance(raw_request, dict) else {}
    attempt_id = get(request, "attempt_id") or get(manifest, "response.attempt_id")
    training = layout.training_step
    fallback = join(training.uri, "terminal.json") if training is not None else None
    terminal_manifest_uri = get(request, "output.terminal_manifest_uri") or fallback
    if not isinstance(attempt_id, str) or not isinstance(terminal_manifest_uri, str):
        return request, None
    return request, training_receipt_uri(terminal_manifest_uri, attempt_id)


def checkpoint_against_receipt(storage: Storage, layout: RunLayout, step: int) -> list[str]:
    """Why the checkpoint at `step` is not the one the run's training receipt (protocol v2, checkpoint mode) vouches
    for: a file missing or of another size, or sha256(trainer_state.pt) differing (MarinSkyRL cloud/iris/
    training_result.py `validate_native_checkpoint` @4505b55, which the export step runs before it converts). Empty
    when no receipt names this step. The files are read where a resume would read them, `global_step_<step>`."""
    training = layout.training_step
    manifest = _training_manifest(training) if training is not None else None
    if manifest is None:
        return []
    _, receipt_uri = _receipt_location(layout, manifest)
    receipt = _load(storage, receipt_uri) if receipt_uri is not None else None
    if receipt is None or not isinstance(receipt.get("checkpoint"), dict):
        return []
    try:
        checkpoint = NativeCheckpoint.model_validate(receipt["checkpoint"])
    except ValidationError as exc:
        return [f"the training receipt {receipt_uri} names a checkpoint that does not parse: {exc.errors()[0]['msg']}"]
    if checkpoint.global_step != step:
        return []
    reasons: list[str] = []
    at_resume_path = checkpoint.model_copy(update={"checkpoint_path": layout.checkpoint_uri(step)})
    check_inventory(storage, at_resume_path, reasons, [])
    return [f"{why} (training receipt {receipt_uri})" for why in reasons]


def protocol_facts(storage: Storage, layout: RunLayout) -> ProtocolFacts:
    facts = ProtocolFacts()
    training = layout.training_step
    manifest = _training_manifest(training) if training is not None else None
    mode = layout.run_config.completion_mode if layout.run_config is not None else None
    request_mode = get(manifest or {}, "request.completion_mode")
    if manifest is not None and manifest_shape(manifest) is ManifestShape.v2:
        facts.version = 2
    if mode is not None or isinstance(request_mode, str):
        facts.version = 2
    facts.completion_mode = request_mode if isinstance(request_mode, str) else mode
    if facts.version != 2 or training is None or manifest is None:
        return facts

    request, receipt_uri = _receipt_location(layout, manifest)
    run_id = get(request, "run_id")
    attempt_id = get(request, "attempt_id") or get(manifest, "response.attempt_id")
    resolved_uri = get(request, "output.resolved_config_uri") or layout.config_uri
    if (
        isinstance(attempt_id, str)
        and receipt_uri is not None
        and (storage.stat(receipt_uri) is not None or training.terminal is not None)
    ):
        facts.training = check_training_receipt(
            storage,
            receipt_uri=receipt_uri,
            run_id=run_id if isinstance(run_id, str) else None,
            attempt_id=attempt_id,
            completion_mode=facts.completion_mode,
            resolved_config=_load(storage, resolved_uri) if isinstance(resolved_uri, str) else None,
            checkpoint_root=get(request, "output.checkpoint_root") or layout.checkpoints_root,
            marker_step=layout.marker_step,
            # The export step re-checks the inventory at export time; after the temp TTL the files are gone
            # by design, so file checks run only while the checkpoint root still lists something.
            check_files=bool(layout.checkpoint_steps) or layout.marker_step is not None,
        )
        _check_fingerprint(manifest, request, receipt_uri, facts.training)

    export = layout.export_step
    if export is not None:
        _export_facts(storage, layout, export, facts)  # may find the receipt's checkpoint gone
    if facts.training is not None:
        facts.notes.insert(0, f"Training {facts.training.summary()}.")
    return facts


def _check_fingerprint(
    manifest: dict[str, Any], request: dict[str, Any], receipt_uri: str, check: ReceiptCheck
) -> None:
    """protocol.py `training_request_fingerprint`: sha256 of {schema_version: 2, request, receipt_uri} as canonical
    JSON. Only a v2 manifest's request is the exact dataclass payload, so only there is it recomputed."""
    if manifest.get("schema_version") != 2 or check.fingerprint is None:
        return
    payload = {"schema_version": 2, "request": request, "receipt_uri": receipt_uri}
    expected = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    if expected != check.fingerprint:
        check.reasons.append("request_fingerprint is not the sha256 of this manifest's request")
        check.valid = False
    else:
        check.notes.append("request_fingerprint recomputed from the manifest's request")


def _export_facts(storage: Storage, layout: RunLayout, export: StepState, facts: ProtocolFacts) -> None:
    records = [r for r in [export.terminal, *(a.record for a in reversed(export.attempts))] if r]
    for record in records:
        state = get(record, "response.state")
        if state == "failed" and facts.export_failure is None:
            failure = get(record, "response.failure")
            facts.export_failure = failure if isinstance(failure, str) else "export attempt failed (no reason given)"
    receipt_uri = next(
        (r.get("export_receipt_uri") for r in records if isinstance(r.get("export_receipt_uri"), str)), None
    )
    if export.terminal is not None and isinstance(receipt_uri, str):
        model = get(export.terminal, "response.model") or {}
        step = model.get("global_step") if isinstance(model, dict) else None
        path = model.get("policy_export_uri") if isinstance(model, dict) else None
        facts.export = check_export_receipt(
            storage,
            receipt_uri=receipt_uri,
            request_fingerprint=basename(receipt_uri).removesuffix(".json"),
            export_path=path if isinstance(path, str) else None,
            global_step=step if isinstance(step, int) else None,
        )
        facts.notes.append(f"Export {facts.export.summary()}.")
    if facts.export_failure is not None:
        gone = not layout.checkpoint_steps and layout.marker_step is None
        facts.checkpoints_expired = gone and bool(_EXPIRED.search(facts.export_failure))
        if facts.checkpoints_expired and facts.training is not None and facts.training.valid:
            # The receipt is durable, but in checkpoint mode it vouches for a checkpoint, and the export step's own
            # validate_native_checkpoint (MarinSkyRL cloud/iris/export_job.py @4505b55) found it gone: no artifact
            # of the run holds the trained budget any more, so the receipt no longer shows it reached in one.
            facts.training.valid = False
            facts.training.reasons.append(
                "the checkpoint it vouches for expired with the temp root, and the export step failed on it"
            )
        if facts.checkpoints_expired:
            facts.notes.append(
                f"The export step failed because the training step's temp checkpoints expired: "
                f"{layout.checkpoints_root} lists nothing and the export attempt says '{facts.export_failure}'."
            )
        else:
            facts.notes.append(f"The export step failed: {facts.export_failure}.")
    if layout.training_step is not None and layout.training_step.role is StepRole.metrics:
        facts.notes.append(
            'Metrics mode: no checkpoints, exports or candidates are expected (docs/run-layouts.md, "Marin steps").'
        )
