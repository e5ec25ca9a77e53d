"""The deployment configuration: every environment variable rlcleanup's functions read, typed and validated here.

Read once per process, `load_settings()`: at cold start of a Cloud Run function (importing runtime/functions.py,
so a bad value stops the revision before it takes traffic) and when an embedded stack is created. A bad value is a
`SettingsError` that names the variable and the value, never a `float()` traceback at the first delivery.

Terraform sets each of these on every function (infra/modules/rlcleanup/functions.tf) and a test checks both sides
name the same set. Client-library variables (`*_EMULATOR_HOST`, credentials) and Cloud Run's own (`K_SERVICE`) are
read by those libraries and the platform, not here. Low in the layering: runtime and adapters may import this
module; it imports nothing of rlcleanup.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "RLCLEANUP_"
DEFAULT_IRIS_STATUS_CMD = "iris job status {job_id} --json"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_PREFIX = re.compile(r"^[a-z][a-z0-9+.-]*://[^/\s]+/\S*$")

CsvList = Annotated[tuple[str, ...] | None, NoDecode]  # "a,b" in the environment (Terraform's join(",", ...))


class SettingsError(Exception):
    """The environment holds a value rlcleanup cannot use; the message names the variable."""


class DeploymentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    project: str | None = Field(default=None, validation_alias="GOOGLE_CLOUD_PROJECT")
    function: str | None = None  # the topology function this process serves (one per Cloud Run service)
    preserve_root: str | None = None  # where evidence goes unless the event names a place
    # None (unset) = not restricted, for the embedded stack on a laptop. Set (even to ""), only these are accepted:
    # a deployment can only read/write there anyway (IAM), so anything else is refused up front, with a reason.
    run_buckets: CsvList = None
    allowed_destination_prefixes: CsvList = None
    max_event_age_seconds: float = Field(default=7 * 24 * 3600, gt=0)
    lease_seconds: float = Field(default=600.0, gt=0)  # a claim's lease: the function's timeout in a deployment
    limit_warn_fraction: float = Field(default=0.8, gt=0, le=1)
    record_store_timeout_seconds: float = Field(default=30.0, gt=0)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    iris_status_cmd: str = Field(default=DEFAULT_IRIS_STATUS_CMD, min_length=1)
    ray_dashboard: str | None = None  # e.g. http://head:8265; unset or empty = no Ray controller (the sweep polls it)
    # Event sources (sources/, docs/events.md). The sweep's run roots: a JSON list of {"uri", "depth"} or
    # comma-separated URIs; its tunables (0 = the sweep's default); the Iris controller it polls; the k8s adapter.
    sweep_roots: str = ""
    stall_seconds: float = Field(default=0, ge=0)
    sweep_page_size: int = Field(default=0, ge=0, le=1000)
    sweep_lock_stale_seconds: float = Field(default=0, ge=0)
    sweep_quiescent_seconds: float = Field(default=0, ge=0)
    iris_url: str | None = None
    iris_token: str | None = None  # from Secret Manager (a secret environment variable)
    iris_cluster: str | None = None
    iris_run_uri_template: str | None = None
    k8s_run_uri_template: str | None = None

    @field_validator("run_buckets", "allowed_destination_prefixes", mode="before")
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

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator(
        "ray_dashboard",
        "function",
        "preserve_root",
        "project",
        "iris_url",
        "iris_token",
        "iris_cluster",
        "iris_run_uri_template",
        "k8s_run_uri_template",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value


def env_name(field: str) -> str:
    """The environment variable a settings field is read from."""
    alias = DeploymentSettings.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else ENV_PREFIX + field.upper()


def env_names() -> set[str]:
    """Every variable `load_settings` reads."""
    return {env_name(field) for field in DeploymentSettings.model_fields}


def load_settings() -> DeploymentSettings:
    """Read and validate the environment once; a `SettingsError` names every bad variable and its value."""
    try:
        return DeploymentSettings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            name = env_name(field) if field in DeploymentSettings.model_fields else field
            problems.append(f"{name}={os.environ.get(name, '')!r}: {error['msg']}")
        raise SettingsError("bad deployment configuration: " + "; ".join(problems)) from None


def unconfigured() -> DeploymentSettings:
    """The defaults without reading the environment (tests, stacks built by hand)."""
    return DeploymentSettings.model_construct()


def within(uri: str, prefixes: tuple[str, ...] | None) -> bool:
    """`uri` is under one of `prefixes` (at a '/' boundary); None = not restricted."""
    if prefixes is None:
        return True
    return any(uri == p.rstrip("/") or uri.startswith(p.rstrip("/") + "/") for p in prefixes)


def in_run_buckets(uri: str, buckets: tuple[str, ...] | None) -> bool:
    """`uri` is in one of `buckets` (a plain name is a GCS bucket; `s3://name` another scheme's); None = not
    restricted (local paths allowed)."""
    if buckets is None:
        return True
    return within(uri, tuple(b if "://" in b else f"gs://{b}" for b in buckets))
