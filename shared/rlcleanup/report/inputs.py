"""What a report reads besides the record: the preserved stitched metrics, the checkpoint listing, and the run's
resolved configuration (the GPUs it states, for the banner's GPU-hours: report/compute.py).

Both live in the preserved location's `derived/`; either may be missing (an early failure, a record read far
from its storage), and the report then says so instead of failing.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from rlcleanup.formats.config import parse_config, sha256_hex
from rlcleanup.models.record import CompletionRecord
from rlcleanup.parsing.metrics import StitchedMetrics
from rlcleanup.ports.storage import Storage
from rlcleanup.report.compute import Accelerators, accelerators
from rlcleanup.settings import load_settings
from rlcleanup.steps.candidate_metrics import REFERENCE_POLICY
from rlcleanup.steps.evidence_check import EVIDENCE_TAMPERED, TamperedEvidence, manifest_objects, verified_bytes
from rlcleanup.uris import basename, join

log = logging.getLogger(__name__)
DEFAULT_METRIC = REFERENCE_POLICY.metric  # the reference selection policy's, as the which-checkpoint table
CHECKPOINT_LISTING = "checkpoints-listing.jsonl"
_STEP_DIR = re.compile(r"global_step_(\d+)(?:/|$)")


@dataclass
class ReportInputs:
    record: CompletionRecord
    metrics: StitchedMetrics | None = None
    checkpoint_steps: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be loaded, shown in the report
    # The record's page in the Firestore console when the record store is Firestore (the banner links it), else None.
    record_console: str | None = None
    # The GPUs the run's resolved configuration states, and the declared prices (the banner's GPU-hours and cost).
    gpus: Accelerators = field(default_factory=lambda: accelerators(None))
    gpu_prices: dict[str, float] = field(default_factory=dict)

    @property
    def metric_name(self) -> str:
        return selection_metric(self.record)


def selection_metric(record: CompletionRecord) -> str:
    """The declared policy's metric, else the reward every SkyRL run logs."""
    policy = record.selection.policy if record.selection else None
    metric = policy.get("metric") if isinstance(policy, dict) else None
    return metric if isinstance(metric, str) and metric else DEFAULT_METRIC


def checkpoint_steps_from_listing(lines: list[str]) -> list[int]:
    steps: set[int] = set()
    for line in lines:
        if not line.strip():
            continue
        match = _STEP_DIR.search(str(json.loads(line).get("uri", "")))
        if match:
            steps.add(int(match.group(1)))
    return sorted(steps)


_INPUT_MAX_BYTES = 256 * 1024 * 1024


def _why(exc: Exception) -> str:
    if isinstance(exc, TamperedEvidence):
        return f"{EVIDENCE_TAMPERED}: {exc}"
    return f"{type(exc).__name__}: {exc}"


_CONFIG_MAX_BYTES = 16 * 1024 * 1024


def _resolved_config(storage: Storage, record: CompletionRecord, notes: list[str]) -> dict[str, Any] | None:
    """The run's resolved configuration as the record hashed it at classification (None, with a note, when it cannot
    be read or no longer has that hash: its GPUs are then unknown, never taken from a changed file)."""
    ref = record.resolved_config
    if ref is None:
        return None
    try:
        data = storage.read_bytes(ref.uri, max_bytes=_CONFIG_MAX_BYTES)
        if sha256_hex(data) != ref.sha256:
            notes.append(f"resolved config {ref.uri} changed since classification: its GPUs are not read")
            return None
        return parse_config(data, basename(ref.uri))
    except Exception as exc:
        notes.append(f"resolved config not read from {ref.uri}: {type(exc).__name__}: {exc}")
        return None


def load_inputs(storage: Storage, record: CompletionRecord) -> ReportInputs:
    inputs = ReportInputs(record=record, gpu_prices=dict(load_settings().gpu_prices_usd_per_hour))
    inputs.gpus = accelerators(_resolved_config(storage, record, inputs.notes))
    # Whatever fails here (a missing object, no credentials for gs://, bad JSON), the report still renders from the
    # record alone and says what it could not load.
    # Both inputs are preserved evidence: once sealed, read back only as the manifest hashed them (a file
    # rewritten since is named as tampered evidence and left out, never drawn as if it were the run's).
    try:
        sealed = manifest_objects(storage, record)
    except Exception as exc:
        inputs.notes.append(f"manifest {record.manifest_uri} not read: {type(exc).__name__}: {exc}")
        return inputs
    if record.metrics_uri:
        try:
            data = verified_bytes(storage, record.metrics_uri, sealed, max_bytes=_INPUT_MAX_BYTES, require_listed=False)
            inputs.metrics = StitchedMetrics.from_jsonl(data.decode("utf-8", errors="replace").splitlines())
        except Exception as exc:
            inputs.notes.append(f"metrics not loaded from {record.metrics_uri}: {_why(exc)}")
    if record.preserved_locations:
        uri = join(record.preserved_locations[0], "derived", CHECKPOINT_LISTING)
        try:
            if storage.stat(uri) is not None:
                listing = verified_bytes(storage, uri, sealed, max_bytes=_INPUT_MAX_BYTES, require_listed=False)
                inputs.checkpoint_steps = checkpoint_steps_from_listing(listing.decode("utf-8", "replace").splitlines())
        except Exception as exc:
            inputs.notes.append(f"checkpoint listing not loaded from {uri}: {_why(exc)}")
    for note in inputs.notes:
        log.info("report for %s: %s", record.run_id, note, extra={"run_id": record.run_id})
    return inputs
