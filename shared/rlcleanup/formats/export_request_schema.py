"""Upstream's `hf_export_request.json` as a strict schema: what an export grant builds its command from.

The reader in formats/export_request.py is lenient on purpose (it reports what a request says, counting anything
unreadable as pending, as upstream's `pending_hf_export_steps` does). A grant that makes a job run needs the
opposite: every field validated exactly as upstream's own reader would take it, and nothing else. Upstream reads a
request with `HFExportRequest(**payload)` (a frozen dataclass), so an unknown key is a `TypeError` there: here it is
a validation error too (`extra="forbid"`), which is how a request that names a `command`, an `entrypoint` or a
`script` is refused. The three versions the lenient reader accepts, as read:

1. MarinSkyRL `skyrl-train/skyrl_train/hf_export.py`@0bc92866df4c7f988f47cec090bc01e8efa2c6aa: `strategy`, no
   `checkpoint_base_path`, `timeout_seconds`;
2. `skyrl-train/skyrl_train/hf_export_schema.py`@332ebdede19b9dc76bcca61b927e7c8ed110aeae: `strategy` dropped,
   `checkpoint_base_path` added, still `timeout_seconds`;
3. the schema `cloud/iris/export_hf_checkpoint.py`@05cb3a6454e3247e2a081fec7fd090773e1f7ff5 writes:
   `timeout` (renamed), `model_source_uri` / `model_source_identity`, `hf_upload_mode` an enum (`latest` | `all`),
   `schema_version` and `status` defaulted.

The converter command upstream's export job runs is `build_command` in that same export_hf_checkpoint.py: the
checkpoint-export entrypoint with the `++checkpoint_export.*` overrides built from the request's fields;
`submit_export` moves the request `in_progress` (attempts + 1) before the job, then `complete` on exit 0, else
back to `pending` with `last_exit_code`. rlcleanup builds the same overrides (`converter_overrides`), as argv
elements, never a shell string.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

DEFAULT_HF_HUB_REVISION = "main"
DEFAULT_HF_UPLOAD_MODE = "latest"
_STEP_DIR = "global_step_"  # skyrl_train.utils.trainer_utils.GLOBAL_STEP_PREFIX


class RequestStatus(StrEnum):
    pending = "pending"
    in_progress = "in_progress"
    complete = "complete"


class UploadMode(StrEnum):  # v3's HFUploadMode
    latest = "latest"
    all = "all"


_Text = Field(min_length=1, max_length=2048, pattern=r"^[^\x00-\x1f]+$")  # no NUL, newline or other control byte


class _Common(BaseModel):
    # Strict scalars (an int is not "10", a bool is not 1), enums by their JSON value, unknown keys refused.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)

    step: StrictInt = Field(ge=0)
    checkpoint_path: StrictStr = _Text
    export_path: StrictStr = _Text
    model_path: StrictStr = _Text
    num_nodes: StrictInt = Field(ge=1, le=100_000)
    gpus_per_node: StrictInt = Field(ge=0, le=1024)
    hf_hub_repo_id: StrictStr | None = Field(default=None, max_length=200)
    hf_hub_private: StrictBool = False
    hf_hub_revision: StrictStr = Field(default=DEFAULT_HF_HUB_REVISION, min_length=1, max_length=200)
    attempts: StrictInt = Field(default=0, ge=0)
    last_exit_code: StrictInt | None = None


class _TimeoutSeconds(_Common):
    """What v1 and v2 share beyond the common fields: `schema_version` and `status` required, the upload mode free
    text, the timeout in `timeout_seconds`."""

    schema_version: Literal[1]
    status: RequestStatus
    hf_upload_mode: StrictStr = Field(default=DEFAULT_HF_UPLOAD_MODE, min_length=1, max_length=32)
    timeout_seconds: StrictInt | None = Field(default=None, gt=0)

    @property
    def timeout(self) -> int | None:
        return self.timeout_seconds


class RequestV1(_TimeoutSeconds):
    """hf_export.py@0bc9286: `strategy`, no `checkpoint_base_path`."""

    strategy: StrictStr = Field(min_length=1, max_length=64)


class RequestV2(_TimeoutSeconds):
    """hf_export_schema.py@332ebde: `checkpoint_base_path`, still `timeout_seconds`."""

    checkpoint_base_path: StrictStr = _Text


class RequestV3(_Common):
    """export_hf_checkpoint.py@05cb3a6's schema: `timeout`, the model source, the upload mode an enum."""

    schema_version: Literal[1] = 1
    status: RequestStatus = RequestStatus.pending
    checkpoint_base_path: StrictStr = _Text
    hf_upload_mode: UploadMode = UploadMode.latest
    timeout_: StrictInt | None = Field(default=None, gt=0, alias="timeout")
    model_source_uri: StrictStr | None = Field(default=None, min_length=1, max_length=2048, pattern=r"^[^\x00-\x1f]+$")
    model_source_identity: StrictStr | None = Field(default=None, min_length=1, max_length=512)

    @property
    def timeout(self) -> int | None:
        return self.timeout_


UpstreamRequest = RequestV1 | RequestV2 | RequestV3
VERSIONS: tuple[type[RequestV1] | type[RequestV2] | type[RequestV3], ...] = (RequestV3, RequestV2, RequestV1)


class RequestSchemaError(ValueError):
    """The request validates against none of upstream's three schemas; the message says why for each."""


def validate_request(payload: object) -> UpstreamRequest:
    """The request as one of upstream's schemas (newest first), or `RequestSchemaError` naming each one's first
    complaint. Strict: a string where upstream has an int, or a key upstream does not know, is refused."""
    if not isinstance(payload, dict):
        raise RequestSchemaError(f"the request is a JSON {type(payload).__name__}, not an object")
    complaints: list[str] = []
    for model in VERSIONS:
        try:
            return model.model_validate(payload)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"])) or "request"
            complaints.append(f"{model.__name__}: {first['msg']} at {where}")
    raise RequestSchemaError("not upstream's hf_export_request.json: " + "; ".join(complaints))


def model_source(request: UpstreamRequest) -> str | None:
    return request.model_source_uri if isinstance(request, RequestV3) else None


def converter_overrides(
    request: UpstreamRequest, *, hub_repo_id: str | None, checkpoint_path: str | None = None
) -> list[str]:
    """upstream `build_command`'s overrides, one argv element each. `hub_repo_id` is what the job may publish to
    itself (rlcleanup passes None: a Hub publish goes through its own grant after the export is validated);
    `checkpoint_path` where the job reads the checkpoint when not the request's own (a preserved copy of it)."""
    return [
        f"++checkpoint_export.step={request.step}",
        f"++checkpoint_export.checkpoint_path={checkpoint_path or request.checkpoint_path}",
        f"++checkpoint_export.export_root={request.export_path}",
        f"++checkpoint_export.hf_hub_repo_id={hub_repo_id or 'null'}",
        f"++checkpoint_export.hf_hub_private={str(request.hf_hub_private).lower()}",
        f"++checkpoint_export.hf_hub_revision={request.hf_hub_revision}",
        f"++checkpoint_export.hf_upload_mode={request.hf_upload_mode}",
    ]


def step_dir_name(step: int) -> str:
    return f"{_STEP_DIR}{step}"
