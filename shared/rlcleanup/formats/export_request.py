"""The deferred Hugging Face export request, `global_step_<N>/hf_export_request.json` (run-layout-v3.md §2).

Training no longer converts weights inline: beside each checkpoint `hf_save_interval` selects it writes this request,
and a separate export job (`<job>-export-<step>`) converts the checkpoint later. Upstream, as read:

- writer and reader: MarinSkyRL `skyrl-train/skyrl_train/hf_export.py`@0bc9286 (`write_hf_export_request` dumps the
  dataclass with `sort_keys=True`; `read_hf_export_request` refuses a `schema_version` other than 1;
  `pending_hf_export_steps` counts a request it cannot read as *pending*: "Protecting checkpoint with unreadable HF
  export request");
- the lifecycle: MarinSkyRL `cloud/iris/export_hf_checkpoint.py`@05cb3a6 (`submit_export`: `in_progress` with
  `attempts + 1` before the job, then `complete` on exit 0, else back to `pending` with `last_exit_code`; a failed
  export therefore reads `pending` with attempts >= 1 and a non-zero exit code);
- three versions of the schema, all accepted here:
  1. `hf_export.py`@0bc9286: `strategy`, no `checkpoint_base_path`, `timeout_seconds`;
  2. `hf_export_schema.py`@332ebde (the reference's ed1e924): `strategy` dropped, `checkpoint_base_path` added,
     still `timeout_seconds`;
  3. `hf_export_schema.py` (newest stored version; `export_hf_checkpoint.py`@05cb3a6 writes it):
     `timeout_seconds` renamed `timeout`, `model_source_uri` / `model_source_identity` added, `hf_upload_mode`
     an enum (`latest` | `all`).

A reader only: where the request says the export goes (`export_path`) is reported, never followed.
"""

from __future__ import annotations

from typing import Any

from rlcleanup.formats.checkpoints.base import read_json
from rlcleanup.models.record import ExportRequestState
from rlcleanup.ports.storage import Storage
from rlcleanup.uris import join

REQUEST_NAME = "hf_export_request.json"
SCHEMA_VERSION = 1
STATUSES = ("pending", "in_progress", "complete")
COMPLETE = "complete"
PENDING = "pending"


def request_uri(checkpoint_dir: str) -> str:
    return join(checkpoint_dir, REQUEST_NAME)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def parse_request(uri: str, payload: dict[str, Any] | None, why: str | None = None) -> ExportRequestState:
    """The request as upstream's reader would take it; anything it would refuse reads `pending`, unreadable."""
    if payload is None:
        return ExportRequestState(uri=uri, status=PENDING, unreadable=why or "unreadable")
    problems: list[str] = []
    version = payload.get("schema_version", SCHEMA_VERSION)  # v3 defaults it; v1/v2 always write it
    if version != SCHEMA_VERSION:
        problems.append(f"schema_version {version!r}, expected {SCHEMA_VERSION}")
    status = payload.get("status", PENDING)  # v3 defaults it to pending
    if status not in STATUSES:
        problems.append(f"status {status!r} is not one of {', '.join(STATUSES)}")
    step = payload.get("step")
    if _int(step) is None:
        problems.append(f"step {step!r} is not an integer")
    timeout = payload["timeout"] if "timeout" in payload else payload.get("timeout_seconds")
    return ExportRequestState(
        uri=uri,
        status=PENDING if problems else str(status),
        attempts=_int(payload.get("attempts")),
        last_exit_code=_int(payload.get("last_exit_code")),
        timeout_seconds=_int(timeout),
        hub_repo_id=_text(payload.get("hf_hub_repo_id")),
        export_path=_text(payload.get("export_path")),
        hub_private=payload["hf_hub_private"] if isinstance(payload.get("hf_hub_private"), bool) else None,
        hub_revision=_text(payload.get("hf_hub_revision")),
        hub_upload_mode=_text(payload.get("hf_upload_mode")),
        unreadable="; ".join(problems) or None,
    )


def read_request(storage: Storage, checkpoint_dir: str) -> ExportRequestState | None:
    """The request beside `checkpoint_dir`, None when it has none."""
    uri = request_uri(checkpoint_dir)
    payload, why = read_json(storage, uri)
    if payload is None and why == "absent":
        return None
    return parse_request(uri, payload, why)


def describe(request: ExportRequestState) -> str:
    """ "request pending (2 attempts, last exit code 1)" and the like, for problems and remaining work."""
    facts: list[str] = []
    if request.attempts is not None:
        facts.append(f"{request.attempts} attempt{'s' * (request.attempts != 1)}")
    if request.last_exit_code is not None:
        facts.append(f"last exit code {request.last_exit_code}")
    if request.unreadable:
        facts.append(f"unreadable: {request.unreadable}; counted as pending, as upstream does")
    return f"request {request.status}" + (f" ({', '.join(facts)})" if facts else "")
