"""What a MarinSkyRL run leaves in its rendezvous directory besides logs: failure receipts and sync manifests.

Failure receipts (run-layout-v3.md §4 [PD]): `marinskyrl/process_diagnostics.py`@24442f9 `write_exception_receipt`
writes `<debug dir>/outcomes/<role>.<host>.<pid>.<ns>.exception.json` = {schema_version 1, role, hostname, pid,
observed_at_ns, kind "exception", exception_type "<module>.<qualname>", message, traceback, metadata} "before
native runtime teardown can mask it"; `write_process_outcome` writes `<same stem>.json` = {…, kind exit|signal,
raw_returncode, public_exit_code, signal, signal_name, metadata}. Each node's debug directory is copied to
`<rendezvous>/debug_artifacts/<node_id>/` by `cloud/iris/task_runtime.py`@006eddc `sync_debug_artifacts`, which
writes `sync-manifest.json` = {schema_version 1, node_id, reason, source_root, copied [{path, bytes}], skipped
[{path, bytes?, reason}], copied_bytes} (≤ 512 MiB a file, ≤ 2 GiB a node: a file over budget is skipped with
reason "budget"; an upload that raised is skipped with the exception text and no bytes).

Readers only: which receipt decides and what a missing file means are steps/evidence_sources.py's.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlcleanup.formats.safetensors_header import check_json_depth

EXCEPTION_RECEIPT = re.compile(r"(?:^|/)outcomes/(?P<stem>[^/]+)\.exception\.json$")
SYNC_MANIFEST_NAME = "sync-manifest.json"
# The writers nest 3 levels ({copied: [{path, bytes}]}); a run's writer controls these bytes, and json.loads of a
# 200,000-deep `[[[...` would exhaust the stack (RecursionError: no record). Deeper is refused as a ValueError,
# which the readers record as a problem on the run (steps/evidence_sources.read_small).
MAX_ARTIFACT_DEPTH = 16


class NestedTooDeep(ValueError):
    """A run's artifact nested past MAX_ARTIFACT_DEPTH: refused before it is parsed."""


def _loads(data: bytes) -> Any:
    """json.loads of a run's small artifact, its nesting bounded first: NestedTooDeep past MAX_ARTIFACT_DEPTH,
    None when it is not JSON at all."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        check_json_depth(text, MAX_ARTIFACT_DEPTH)
    except ValueError as exc:
        raise NestedTooDeep(str(exc)) from None
    try:
        return json.loads(text)
    except ValueError:
        return None


MAX_RECEIPT_BYTES = 4 * 1024 * 1024
MAX_TRACEBACK_CHARS = 64 * 1024


class ExceptionReceipt(BaseModel):
    """One `*.exception.json`: the failing process's own record of its first causal error."""

    model_config = ConfigDict(extra="ignore")

    uri: str = ""
    role: str | None = None
    hostname: str | None = None
    pid: int | None = None
    observed_at_ns: int | None = None
    exception_type: str
    message: str = ""
    traceback: str = ""

    @property
    def short_type(self) -> str:
        """`builtins.RuntimeError` as Python prints it (`RuntimeError`); other modules keep their path."""
        return self.exception_type.removeprefix("builtins.")


def is_exception_receipt(uri: str) -> bool:
    return EXCEPTION_RECEIPT.search(uri) is not None


def read_exception_receipt(uri: str, data: bytes) -> ExceptionReceipt | None:
    """A receipt, or None when the bytes are not one (not JSON, not `kind: exception`, no exception type)."""
    try:
        value = _loads(data)
    except NestedTooDeep:
        return None  # recorded as "not a failure receipt" by its reader
    if not isinstance(value, dict) or value.get("kind", "exception") != "exception":
        return None
    try:
        receipt = ExceptionReceipt.model_validate({**value, "uri": uri})
    except ValidationError:
        return None
    receipt.traceback = receipt.traceback[:MAX_TRACEBACK_CHARS]
    return receipt


class SyncedFile(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str
    bytes: int | None = None
    reason: str | None = None  # skipped entries only


class SyncManifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schema_version: int | None = None
    node_id: str | None = None
    reason: str | None = None  # why this sync ran: "periodic", "signal 15 (head)", the stall reason
    source_root: str | None = None
    copied: list[SyncedFile] = Field(default_factory=list)
    skipped: list[SyncedFile] = Field(default_factory=list)
    copied_bytes: int | None = None


def read_sync_manifest(data: bytes) -> SyncManifest | None:
    """None when it is not a sync manifest; raises ValueError when it nests past MAX_ARTIFACT_DEPTH (refused, and
    said so on the run)."""
    value: Any = _loads(data)  # NestedTooDeep propagates: the reader records the refusal
    try:
        return SyncManifest.model_validate(value) if isinstance(value, dict) else None
    except ValidationError:
        return None
