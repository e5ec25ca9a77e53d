"""The deployment configuration: every environment variable rlcleanup's functions read, typed and validated here.

Read once per process, `load_settings()`: at cold start of a Cloud Run function (importing runtime/functions.py,
so a bad value stops the revision before it takes traffic) and when an embedded stack is created. A bad value is a
`SettingsError` that names the variable and the value, never a `float()` traceback at the first delivery.

Terraform sets each of these on every function (infra/modules/rlcleanup/functions.tf) and a test checks both sides
name the same set. Beside them, smaller groups read the same way (`read(...)`, errors naming the variable):
`IrisSettings` and `RaySettings` (one group per job-state controller, each a field of the deployment settings:
adapters/controllers/), `HubSettings` (the Hub client and the upload job's overrides), `GrantLimits`, `CopySettings`, `S3Settings` and
`s3_endpoint_specs()` (credentials as secret environment variables), `LocalPaths` (the CLI's and embedded stack's
places) and `Platform` (what the cloud, the shell and the emulators set). The AWS_* variables are read by botocore
itself (adapters/s3_client.py builds its default endpoint from the same names, commented there); the
`*_EMULATOR_HOST` variables are read by the Google client libraries, and by us only to pick anonymous credentials.
Low in the layering: runtime and adapters may import this module; it imports nothing of rlcleanup.

Every cold start imports this module (entrypoints.py validates the deployment settings before the first delivery),
so the groups a cold start never reads (`CopyJobSettings`, `HubSettings`, `S3Settings`, `CopySettings`,
`LocalPaths`, `Platform`) build their validators on first use (pydantic's `defer_build`), not at import: a third of
the module's schema building (tests/unit/test_import_weight.py keeps them unbuilt after the entry import).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "RLCLEANUP_"
DEFAULT_IRIS_STATUS_CMD = "iris job status {job_id} --json"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_JOB = re.compile(r"^projects/[^/\s]+/locations/[^/\s]+/jobs/[^/\s]+$")
_PREFIX = re.compile(r"^[a-z][a-z0-9+.-]*://[^/\s]+/\S*$")

CsvList = Annotated[tuple[str, ...] | None, NoDecode]  # "a,b" in the environment (Terraform's join(",", ...))


def _unset_if_empty(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


class SettingsError(Exception):
    """The environment holds a value rlcleanup cannot use; the message names the variable."""


class IrisSettings(BaseSettings):
    """The Iris controller: the sweep polls its Connect RPCs at `url` (bearer `token`, from Secret Manager, a
    secret environment variable); the pre-cancel capture runs its CLI (`status_cmd`, `{job_id}` one argv element)."""

    model_config = SettingsConfigDict(env_prefix="RLCLEANUP_IRIS_", extra="ignore", frozen=True)

    url: str | None = None  # unset or empty: the sweep does not poll Iris
    token: str | None = None
    cluster: str | None = None  # a name for dedupe keys and job ids; default the URL
    run_uri_template: str | None = None  # over {job_name}, {run_id}, {attempt_id}
    status_cmd: str = Field(default=DEFAULT_IRIS_STATUS_CMD, min_length=1)

    @field_validator("url", "token", "cluster", "run_uri_template", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return _unset_if_empty(value)


class RaySettings(BaseSettings):
    """The Ray job server (the dashboard's Jobs REST API): the sweep polls it, the pre-cancel capture reads a job."""

    model_config = SettingsConfigDict(env_prefix="RLCLEANUP_RAY_", extra="ignore", frozen=True)

    dashboard: str | None = None  # e.g. http://head:8265; unset or empty = no Ray controller

    @field_validator("dashboard", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return _unset_if_empty(value)


class ExportSettings(BaseSettings):
    """Export grants (authority/export.py, docs/authority.md §9), failing closed: no `converter` (the command's argv
    as a JSON list; the request's fields follow as upstream's `++checkpoint_export.*` overrides) or no `controller`
    (the one the deployment's runs train on: `ray`) refuses every export. `allowed_prefixes`: where a request's model
    source may lie. `throughput_bytes_per_second`: the stated default an export's time is estimated from when no
    earlier export was measured; `margin_seconds`: what the job needs beyond that before the checkpoint expires."""

    model_config = SettingsConfigDict(env_prefix="RLCLEANUP_EXPORT_", extra="ignore", frozen=True)

    converter: tuple[str, ...] | None = None
    controller: str | None = None
    allowed_prefixes: CsvList = None
    throughput_bytes_per_second: float = Field(default=50e6, gt=0)
    margin_seconds: float = Field(default=1800.0, ge=0)

    @field_validator("converter", "controller", "allowed_prefixes", mode="before")
    @classmethod
    def _parse(cls, value: Any, info: Any) -> Any:
        value = _unset_if_empty(value)
        if info.field_name == "allowed_prefixes" and isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if info.field_name != "converter" or value is None:
            return value
        argv = json.loads(value) if isinstance(value, str) else value
        if not isinstance(argv, list | tuple) or not argv or not all(isinstance(v, str) and v for v in argv):
            raise ValueError("a JSON list of non-empty strings: the converter's argv")
        return tuple(argv)


class QuarantineSettings(BaseSettings):
    """Where a reclaim puts what it removes, and for how long (authority/quarantine.py). The prefix is the
    deployment's, never a run's: every object goes to `<its bucket>/<prefix>/<run>/<grant>/<its key>` (for local
    files the run root's parent directory stands for the bucket). Terraform's `quarantine_days` sets the bucket
    lifecycle rule on the prefix and this variable together; the local expiry (`rlcleanup quarantine-expire`) uses
    the same number."""

    model_config = SettingsConfigDict(env_prefix="RLCLEANUP_QUARANTINE_", extra="ignore", frozen=True)

    prefix: str = Field(default="_rlcleanup-quarantine", pattern=r"^[A-Za-z0-9_][A-Za-z0-9._=-]{0,100}$")
    days: int = Field(default=7, ge=1, le=3650)


class NotifySettings(BaseSettings):
    """Who is told when a run needs a person (runtime/notify_handler.py): a chat webhook and/or e-mail. The webhook
    URL holds a token: on GCP it lives in Secret Manager and `webhook_secret` names its version resource (the notify
    function reads it at run time); locally `webhook_url` holds it. Nothing here comes from a run."""

    model_config = SettingsConfigDict(env_prefix="RLCLEANUP_NOTIFY_", extra="ignore", frozen=True)

    webhook_url: str | None = Field(default=None, pattern=r"^https?://[^/\s]+")  # local: the URL itself (a secret)
    webhook_secret: str | None = Field(default=None, pattern=r"^projects/[^/\s]+/secrets/[^/\s]+/versions/[^/\s]+$")
    webhook_kind: Literal["slack", "google_chat"] = "slack"  # both take {"text": ...}; the kind names the format
    smtp_host: str | None = None  # a relay; unset: no e-mail
    smtp_port: int = Field(default=25, ge=1, le=65535)
    smtp_starttls: bool = False
    smtp_from: str | None = None
    smtp_to: CsvList = None
    on_complete: bool = False  # also post one plain line when a run completes with nothing for a person
    deadline_warning_hours: float = Field(default=24.0, gt=0)  # the sweep re-posts a deadline this close
    max_attempts: int = Field(default=3, ge=1, le=10)  # deliveries of one message before it is recorded as failed
    timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    # The channels to post on, by registry name (adapters/notify_registry.py); unset: every one configured here.
    channels: CsvList = None

    @field_validator("smtp_to", "channels", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("webhook_url", "webhook_secret", "smtp_host", "smtp_from", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return _unset_if_empty(value)

    @property
    def configured(self) -> bool:
        return bool(self.channels or self.webhook_url or self.webhook_secret or (self.smtp_host and self.smtp_to))


class GrantLimits(BaseSettings):
    """How long one grant may be valid at most, and how far an approver's clock may run ahead of ours."""

    model_config = SettingsConfigDict(env_prefix="RLCLEANUP_GRANT_", extra="ignore", frozen=True)

    max_lifetime_seconds: float = Field(default=7 * 24 * 3600, ge=0)
    clock_skew_seconds: float = Field(default=120, ge=0)


class DeploymentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    project: str | None = Field(default=None, validation_alias="GOOGLE_CLOUD_PROJECT")
    function: str | None = None  # the topology function this process serves (one per Cloud Run service)
    preserve_root: str | None = None  # where evidence goes unless the event names a place
    # None (unset) = not restricted, for the embedded stack on a laptop. Set (even to ""), only these are accepted:
    # a deployment can only read/write there anyway (IAM), so anything else is refused up front, with a reason.
    run_buckets: CsvList = None
    allowed_destination_prefixes: CsvList = None
    # Local directories (or URIs) a run's config may also name as its checkpoint/temp/export/attempt roots when no
    # run buckets are set; by default only the run's own storage root (steps/readable_roots.py) is read.
    readable_roots: CsvList = None
    max_event_age_seconds: float = Field(default=7 * 24 * 3600, gt=0)
    lease_seconds: float = Field(default=600.0, gt=0)  # a claim's lease: the function's timeout in a deployment
    limit_warn_fraction: float = Field(default=0.8, gt=0, le=1)
    record_store_timeout_seconds: float = Field(default=30.0, gt=0)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # The job-state controllers (adapters/controllers/registry.py builds each from its group): read with their own
    # prefixes, so the variable names stay RLCLEANUP_IRIS_* and RLCLEANUP_RAY_DASHBOARD.
    iris: IrisSettings = Field(default_factory=lambda: IrisSettings())
    ray: RaySettings = Field(default_factory=lambda: RaySettings())
    # Where a reclaim quarantines what it removes, and for how long (RLCLEANUP_QUARANTINE_PREFIX / _DAYS).
    quarantine: QuarantineSettings = Field(default_factory=lambda: QuarantineSettings())
    export: ExportSettings = Field(default_factory=lambda: ExportSettings())  # RLCLEANUP_EXPORT_* (export grants)
    grant_limits: GrantLimits = Field(default_factory=lambda: GrantLimits())  # RLCLEANUP_GRANT_*
    notify: NotifySettings = Field(default_factory=lambda: NotifySettings())  # RLCLEANUP_NOTIFY_*
    # Event sources (sources/, docs/events.md). The sweep's run roots: a JSON list of {"uri", "depth"} or
    # comma-separated URIs; its tunables (0 = the sweep's default); the k8s adapter.
    sweep_roots: str = ""
    # The report's compute cost (report/compute.py): USD per GPU-hour by accelerator type, a JSON object such as
    # {"H100": 2.99}; a type without a price gives "unknown", never an estimate.
    gpu_prices_usd_per_hour: dict[str, float] = Field(default_factory=dict)
    stall_seconds: float = Field(default=0, ge=0)
    sweep_page_size: int = Field(default=0, ge=0, le=1000)
    sweep_lock_stale_seconds: float = Field(default=0, ge=0)
    sweep_quiescent_seconds: float = Field(default=0, ge=0)
    k8s_run_uri_template: str | None = None
    # Hub hand-offs (docs/hub.md): an export larger than the threshold is uploaded by the upload job, which
    # apply-grant starts: a Cloud Run job's full name (Terraform sets the hub-upload job's), or `local` (the job's
    # entry point as a child process on this machine: embedded and emulator stacks). Unset: always inline.
    hub_upload_job: str | None = None
    hub_job_threshold_bytes: int = Field(default=1 << 30, ge=0)
    # Server-side copies too large for one function invocation (docs/runtime.md "Inline or job"): a capture part
    # planned to copy more than the threshold is handed to the large-copy job (a Cloud Run job's full name, or
    # `local`), split across up to copy_job_max_tasks tasks of about copy_job_threshold_bytes each. Unset: inline.
    large_copy_job: str | None = None
    copy_job_threshold_bytes: int = Field(default=50 << 30, ge=0)
    copy_job_max_tasks: int = Field(default=16, ge=1, le=10000)
    # Read back the Hub repos a run's own export job published to (authority/hub_audit.py, docs/hub.md), on
    # HF_ENDPOINT. Off: the record says the repo was not checked.
    hub_audit: bool = False
    # Pre-cancel capture waits this long for every node's final sync-manifest.json (authority/precancel.py).
    precancel_sync_wait_seconds: float = Field(default=60.0, ge=0, le=600)
    # Objects one plan-capture invocation lists; a larger run is planned in pages, each a continuation message.
    capture_page_objects: int = Field(default=5000, ge=1)
    # The most objects a run may hold (its logs counted by the log-scan plan, everything by the capture plan): a
    # run past it is refused (`run_too_large`) when the plan reaches it, before any whole-run step (the listing
    # join, the sealed manifest) would hold that many in one invocation.
    max_run_objects: int = Field(default=200_000, ge=1)

    @field_validator("run_buckets", "allowed_destination_prefixes", "readable_roots", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("run_buckets")
    @classmethod
    def _bucket_names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for bucket in value or ():
            scheme, sep, name = bucket.rpartition("://")
            if not _BUCKET.match(name) or (sep and not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme)):
                raise ValueError(f"{bucket!r} is not a bucket name (GCS) or <scheme>://<bucket>")
        return value

    @field_validator("allowed_destination_prefixes")
    @classmethod
    def _prefixes(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for prefix in value or ():
            if not _PREFIX.match(prefix):
                raise ValueError(f"{prefix!r} is not a destination prefix such as gs://bucket/path/")
        return value

    @field_validator("hub_upload_job", "large_copy_job")
    @classmethod
    def _job_name(cls, value: str | None) -> str | None:
        if value is not None and value != "local" and not _JOB.match(value):
            raise ValueError(f"{value!r} is neither `local` nor projects/<p>/locations/<region>/jobs/<name>")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator(
        "function",
        "preserve_root",
        "project",
        "k8s_run_uri_template",
        "hub_upload_job",
        "large_copy_job",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value


def env_name(field: str) -> str:
    """The environment variable a deployment settings field is read from (`iris.url`: a group's field)."""
    group, _, inner = field.partition(".")
    kind = _groups().get(group)
    return _env_name(kind, inner) if kind is not None and inner else _env_name(DeploymentSettings, field)


def env_names() -> set[str]:
    """Every variable `load_settings` reads (a group's own variables, not the group's name)."""
    names = {env_name(field) for field in DeploymentSettings.model_fields if field not in _groups()}
    return names | {_env_name(kind, field) for kind in _groups().values() for field in kind.model_fields}


def _groups() -> dict[str, type[BaseSettings]]:
    """The deployment settings' fields that are settings groups of their own (the controllers')."""
    return {
        name: info.annotation
        for name, info in DeploymentSettings.model_fields.items()
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseSettings)
    }


def load_settings() -> DeploymentSettings:
    """Read and validate the environment once; a `SettingsError` names every bad variable and its value."""
    return read(DeploymentSettings)


_S = TypeVar("_S", bound=BaseSettings)
# Variables whose value is a credential even inside a deployment group: an error names them, never their value.
SECRET_VARIABLES = frozenset({"RLCLEANUP_NOTIFY_WEBHOOK_URL"})
_LABELS = {"DeploymentSettings": "deployment"}


def read(kind: type[_S], *, secret: bool = False) -> _S:
    """One settings group from the environment; a `SettingsError` names each bad variable (and its value, unless
    the group holds secrets)."""
    try:
        return kind()
    except ValidationError as exc:
        # A group's own error (raised while the deployment settings build it) names the group's variables.
        named: type[BaseSettings] = next((g for g in _groups().values() if g.__name__ == exc.title), kind)
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            name = _env_name(named, field) if field in named.model_fields else field
            shown = "" if secret or name in SECRET_VARIABLES else f"={os.environ.get(name, '')!r}"
            problems.append(f"{name}{shown}: {error['msg']}")
        raise SettingsError(
            f"bad {_LABELS.get(kind.__name__, kind.__name__)} configuration: " + "; ".join(problems)
        ) from None


def _env_name(kind: type[BaseSettings], field: str) -> str:
    alias = kind.model_fields[field].validation_alias
    prefix = str(kind.model_config.get("env_prefix") or "")
    return alias if isinstance(alias, str) else (prefix + field).upper()


class CopyJobSettings(BaseSettings):
    """The large-copy job's overrides (runtime/copy_job.py): the run and the claim key of the part's ticket."""

    model_config = SettingsConfigDict(defer_build=True, extra="ignore", frozen=True)

    run_id: str | None = Field(default=None, validation_alias="RLCLEANUP_COPY_RUN_ID")
    ticket: str | None = Field(default=None, validation_alias="RLCLEANUP_COPY_TICKET")


class HubSettings(BaseSettings):
    """The Hugging Face Hub client (adapters/hf_hub.py) and the upload job's overrides (runtime/hub_job.py)."""

    model_config = SettingsConfigDict(defer_build=True, extra="ignore", frozen=True)

    token: str | None = Field(default=None, validation_alias="HF_TOKEN")  # a secret environment variable on GCP
    endpoint: str = Field(default="https://huggingface.co", validation_alias="HF_ENDPOINT", pattern=r"^https?://")
    run_id: str | None = Field(default=None, validation_alias="RLCLEANUP_HUB_RUN_ID")
    grant_id: str | None = Field(default=None, validation_alias="RLCLEANUP_HUB_GRANT_ID")
    # A read-only token for the audit of what a run's export job published (authority/hub_audit.py): never
    # HF_TOKEN, which may write. Unset: the audit reads anonymously (a private repo then reads as not found).
    audit_token: str | None = Field(default=None, validation_alias="RLCLEANUP_HUB_AUDIT_TOKEN")

    @field_validator("token", "run_id", "grant_id", "audit_token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return _unset_if_empty(value)

    @field_validator("endpoint", mode="before")
    @classmethod
    def _default_when_empty(cls, value: Any) -> Any:
        return "https://huggingface.co" if isinstance(value, str) and not value.strip() else value


class S3Settings(BaseSettings):
    model_config = SettingsConfigDict(defer_build=True, env_prefix="RLCLEANUP_S3_", extra="ignore", frozen=True)

    # `virtual` (CoreWeave) or `path`; unset/auto = the adapter's choice. AWS_S3_ADDRESSING_STYLE is botocore's.
    addressing_style: Literal["path", "virtual", "auto"] | None = None

    @field_validator("addressing_style", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return _unset_if_empty(value)


GIB = 1024**3
MIB = 1024**2


class CopySettings(BaseSettings):
    """Server-side copies of any size (adapters/s3_copy.py, adapters/gcs_storage.py; docs/s3.md, "Large copies").

    S3's CopyObject stops at 5 GiB: a larger object is copied as a multipart upload of ranged UploadPartCopy parts.
    The threshold is a setting so tests can drive the multipart path with small objects; it can be lowered, never
    raised past S3's limit. GCS rewrites send `maxBytesRewrittenPerCall`, so every call is bounded and its token
    is recorded before the next. A copy that needs more than one request keeps a small state object (S3: the
    upload id; GCS: the rewrite token) under `state_prefix` in the destination's bucket, named by a hash of the
    destination: never a place an input chooses, and deleted when the copy completes."""

    model_config = SettingsConfigDict(defer_build=True, env_prefix="RLCLEANUP_COPY_", extra="ignore", frozen=True)

    s3_multipart_threshold: int = Field(default=5 * GIB, ge=1, le=5 * GIB)
    s3_part_bytes: int = Field(default=512 * MIB, ge=5 * MIB, le=5 * GIB)  # S3: 5 MiB..5 GiB per part
    s3_workers: int = Field(default=8, ge=1, le=64)  # parts copied at once
    gcs_rewrite_bytes_per_call: int = Field(default=GIB, ge=MIB, multiple_of=MIB)  # the API wants whole MiB
    state_prefix: str = Field(default="_rlcleanup/copies", pattern=r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*$")


S3_ENDPOINT_PREFIX = "RLCLEANUP_S3_ENDPOINT_"


def s3_endpoint_specs(environ: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Every `RLCLEANUP_S3_ENDPOINT_<NAME>` (a JSON object, one Secret Manager secret each) by lower-case name, in
    name order. The names are the deployment's, so they are found by prefix, not declared as fields; the local
    stack's S3 server is one of them (`RLCLEANUP_S3_ENDPOINT_STACK`, claiming only the stack's buckets), so `stack
    up` never sets the standard AWS_* variables a user's own S3 commands read. A bad one is a `SettingsError`
    naming the variable, never its (secret) value."""
    env = os.environ if environ is None else environ
    out: dict[str, dict[str, Any]] = {}
    for var in sorted(k for k in env if k.startswith(S3_ENDPOINT_PREFIX)):
        try:
            spec = json.loads(env[var])
            if not isinstance(spec, dict):
                raise ValueError("not a JSON object")
            buckets = spec.get("buckets") or []
            if not isinstance(buckets, list) or not all(isinstance(b, str) for b in buckets):
                raise ValueError('"buckets" must be a list of bucket names')
        except ValueError as exc:
            raise SettingsError(f"{var} is not a valid S3 endpoint JSON object: {exc}") from None
        out[var[len(S3_ENDPOINT_PREFIX) :].lower()] = spec
    return out


class LocalPaths(BaseSettings):
    """Where the CLI and the embedded/local stack keep things (rlcleanup/paths.py resolves the defaults)."""

    model_config = SettingsConfigDict(defer_build=True, extra="ignore", frozen=True)

    db: Path | None = Field(default=None, validation_alias="RLCLEANUP_DB")
    stack_dir: Path | None = Field(default=None, validation_alias="RLCLEANUP_STACK_DIR")
    functions_source: Path | None = Field(default=None, validation_alias="RLCLEANUP_FUNCTIONS_SOURCE")
    layout_verdicts_dir: Path | None = Field(default=None, validation_alias="RLCLEANUP_LAYOUT_VERDICTS_DIR")
    # XDG base directories: the spec says a relative value is invalid and must be ignored (paths.py does).
    xdg_state_home: Path | None = Field(default=None, validation_alias="XDG_STATE_HOME")
    xdg_config_home: Path | None = Field(default=None, validation_alias="XDG_CONFIG_HOME")
    xdg_cache_home: Path | None = Field(default=None, validation_alias="XDG_CACHE_HOME")
    cloudsdk_root_dir: Path | None = Field(default=None, validation_alias="CLOUDSDK_ROOT_DIR")

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return _unset_if_empty(value)


class Platform(BaseSettings):
    """What the platform, the shell or a test sets around us. The Google client libraries read the emulator hosts
    and the project themselves; we read them to choose a backend and anonymous credentials, and for log labels."""

    model_config = SettingsConfigDict(defer_build=True, extra="ignore", frozen=True)

    project: str | None = Field(default=None, validation_alias="GOOGLE_CLOUD_PROJECT")
    service: str | None = Field(default=None, validation_alias="K_SERVICE")  # Cloud Run's own
    revision: str | None = Field(default=None, validation_alias="K_REVISION")
    execution: str | None = Field(default=None, validation_alias="CLOUD_RUN_EXECUTION")  # a Cloud Run job's
    task_attempt: int | None = Field(default=None, ge=0, validation_alias="CLOUD_RUN_TASK_ATTEMPT")
    task_index: int = Field(default=0, ge=0, validation_alias="CLOUD_RUN_TASK_INDEX")  # which task of the execution
    task_count: int = Field(default=1, ge=1, validation_alias="CLOUD_RUN_TASK_COUNT")
    pubsub_emulator_host: str | None = Field(default=None, validation_alias="PUBSUB_EMULATOR_HOST")
    firestore_emulator_host: str | None = Field(default=None, validation_alias="FIRESTORE_EMULATOR_HOST")
    storage_emulator_host: str | None = Field(default=None, validation_alias="STORAGE_EMULATOR_HOST")
    user: str | None = Field(default=None, validation_alias="USER")

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return _unset_if_empty(value)


def unconfigured() -> DeploymentSettings:
    """The defaults without reading the environment (tests, stacks built by hand)."""
    # Each group explicitly: left out, its default factory would read (and validate) the environment.
    return DeploymentSettings.model_construct(
        iris=IrisSettings.model_construct(),
        ray=RaySettings.model_construct(),
        notify=NotifySettings.model_construct(),
        grant_limits=GrantLimits.model_construct(),
        export=ExportSettings.model_construct(),
    )


def platform() -> Platform:
    """The platform's variables as they are now (read per call: a test or a shell may set them)."""
    return read(Platform)
