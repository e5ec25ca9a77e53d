"""Reaching S3-compatible object stores: endpoints, credentials, addressing, one obstore client per bucket, and
the mapping of the client's errors (adapters/s3_storage.py does the object operations).

Client: obstore (Rust `object_store` + reqwest), chosen by measurement against boto3 on SeaweedFS (bench/RESULTS.md,
"S3 client"): per small ranged GET ~7x less client time sequentially and ~2x on validation's 32-thread pool (the
GIL is released while the Rust client waits), listing 1,000 objects ~6x faster, and a client costs ~10 ms to build
instead of ~70 ms (a function cold start pays that). boto3 is still used, only to resolve `AWS_PROFILE` / config
file credentials (obstore has no profile reader).

Endpoints and credentials (see docs/s3.md):
- the standard AWS variables: `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, `AWS_REGION` / `AWS_DEFAULT_REGION`,
  `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`), else `AWS_PROFILE` and the config files;
- per endpoint, `RLCLEANUP_S3_ENDPOINT_<NAME>`: a JSON object `{"endpoint_url", "buckets": [...], "region",
  "addressing_style", "access_key_id", "secret_access_key"}` — on GCP each one is a Secret Manager secret exposed
  to only the functions that read S3 (Terraform `s3_endpoints`); its buckets use it, other buckets the default.
- addressing: `RLCLEANUP_S3_ADDRESSING_STYLE` (`virtual`, as CoreWeave wants, or `path`); default virtual, except
  path for an IP or localhost endpoint (no per-bucket host names there).

Errors: not found -> FileNotFoundError; wrong/missing credentials, access denied, a bucket in another region, an
unusable endpoint -> StorageAccessError (permanent: recorded on the run); throttling (503 SlowDown), 5xx and
connection resets are retried with backoff inside the client, then surface as StorageError (transient: the
delivery is retried).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from rlcleanup.ports.lifecycle import (
    AWS_S3_EXPIRATION,
    COREWEAVE_EXPIRATION,
    S3_COMPATIBLE_EXPIRATION,
    LifecycleRule,
)
from rlcleanup.ports.storage import StorageAccessError, StorageError, UnsafePathError
from rlcleanup.settings import S3Settings, SettingsError, s3_endpoint_specs

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config, S3Store

SCHEME = "s3://"
_POOL = "64"  # idle connections kept per host: >= validation's header pool (32)


def split_s3(uri: str) -> tuple[str, str]:
    """`s3://b/k/x` -> ("b", "k/x")."""
    bucket, _, key = uri[len(SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"not an s3:// URI with a bucket: {uri!r}")
    return bucket, key


def object_key(uri: str) -> tuple[str, str]:
    bucket, key = split_s3(uri)
    # object_store refuses empty and `.`/`..` segments; a run key like that is refused, not silently rewritten.
    if any(seg in ("", ".", "..") for seg in key.split("/")) and key:
        raise UnsafePathError(f"S3 key with an empty, '.' or '..' segment: {uri!r}")
    return bucket, key


@dataclass(frozen=True)
class S3Endpoint:
    """Where one set of buckets lives and how to reach it. Secrets never appear in repr()."""

    name: str
    endpoint_url: str | None = None  # None: AWS itself
    region: str = "us-east-1"
    addressing_style: str | None = None  # "path" | "virtual"; None: decided from the endpoint
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    buckets: tuple[str, ...] = ()

    @property
    def path_style(self) -> bool:
        if self.addressing_style in ("path", "virtual"):
            return self.addressing_style == "path"
        host = urllib.parse.urlsplit(self.endpoint_url or "").hostname or ""
        if host == "localhost":
            return True
        try:
            ipaddress.ip_address(host)
            return True
        except ValueError:
            return False


def _env_style(environ: Mapping[str, str]) -> str | None:
    """settings.S3Settings' RLCLEANUP_S3_ADDRESSING_STYLE, else botocore's own AWS_S3_ADDRESSING_STYLE."""
    raw = environ.get("RLCLEANUP_S3_ADDRESSING_STYLE") or environ.get("AWS_S3_ADDRESSING_STYLE")
    try:
        style = S3Settings.model_validate({"addressing_style": raw}).addressing_style
    except ValidationError:
        raise ValueError(f"RLCLEANUP_S3_ADDRESSING_STYLE must be path or virtual, not {raw!r}") from None
    return None if style in (None, "auto") else style


def default_endpoint(environ: Mapping[str, str] | None = None) -> S3Endpoint:
    """The endpoint for buckets no named endpoint claims, from the AWS_* variables botocore itself reads (we read
    the same names so the cross-endpoint router can compare endpoints; settings.py does not duplicate them)."""
    env = os.environ if environ is None else environ
    return S3Endpoint(
        name="default",
        endpoint_url=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        addressing_style=_env_style(env),
        access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
        secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
        session_token=env.get("AWS_SESSION_TOKEN") or None,
        profile=env.get("AWS_PROFILE") or None,
    )


def named_endpoints(environ: Mapping[str, str] | None = None) -> list[S3Endpoint]:
    """Every `RLCLEANUP_S3_ENDPOINT_<NAME>` (JSON, one per Secret Manager secret), in name order, parsed and
    checked by settings.s3_endpoint_specs."""
    try:
        specs = s3_endpoint_specs(environ)
    except SettingsError as exc:  # the message names the variable, never its (secret) value
        raise StorageAccessError(str(exc)) from None
    out = []
    for name, spec in specs.items():
        buckets = spec.get("buckets") or []
        out.append(
            S3Endpoint(
                name=name,
                endpoint_url=spec.get("endpoint_url") or None,
                region=spec.get("region") or "us-east-1",
                addressing_style=spec.get("addressing_style") or None,
                access_key_id=spec.get("access_key_id") or None,
                secret_access_key=spec.get("secret_access_key") or None,
                session_token=spec.get("session_token") or None,
                profile=spec.get("profile") or None,
                buckets=tuple(buckets),
            )
        )
    return out


# CoreWeave AI Object Storage's endpoints (run-layout-v2.md §8): the public one and the in-cluster LOTA one.
COREWEAVE_HOSTS = ("cwobject.com", "cwlota.com")


def lifecycle_rule(endpoint: S3Endpoint) -> LifecycleRule:
    """Which store an endpoint reaches, for how its lifecycle dates a deletion (ports/lifecycle.py): no endpoint or
    an `amazonaws.com` host is AWS itself; CoreWeave's hosts are CoreWeave; anything else (R2, SeaweedFS, MinIO) is
    an S3-compatible store whose rounding is unknown."""
    host = (urllib.parse.urlsplit(endpoint.endpoint_url or "").hostname or "").lower()
    if endpoint.endpoint_url is None or host == "amazonaws.com" or host.endswith(".amazonaws.com"):
        return AWS_S3_EXPIRATION
    if any(host == h or host.endswith("." + h) for h in COREWEAVE_HOSTS):
        return COREWEAVE_EXPIRATION
    return S3_COMPATIBLE_EXPIRATION


def map_error(exc: BaseException, what: str, endpoint: S3Endpoint) -> BaseException:
    """Map an obstore error to our vocabulary; the message names the endpoint and the operation."""
    import obstore.exceptions as oe

    where = f"{what} (endpoint {endpoint.endpoint_url or 'AWS'}, region {endpoint.region})"
    text = str(exc).split("\n\nDebug source", 1)[0]
    short = " ".join(text.split())[:400]
    if isinstance(exc, FileNotFoundError | oe.NotFoundError):
        return FileNotFoundError(what)
    if isinstance(exc, oe.PermissionDeniedError | oe.UnauthenticatedError) or "AccessDenied" in text:
        return StorageAccessError(f"access denied or bad credentials for {where}: {short}")
    if any(s in text for s in ("PermanentRedirect", "AuthorizationHeaderMalformed", "incorrectly configured region")):
        return StorageAccessError(f"bucket is in another region or behind another endpoint: {where}: {short}")
    if "builder error" in text or "relative URL without a base" in text:
        return StorageAccessError(f"unusable S3 endpoint for {where}: {short}")
    return StorageError(f"{where}: {short}")


def bucket_endpoint(endpoint_url: str, bucket: str) -> str:
    """The endpoint a virtual-hosted request goes to: the bucket in front of the endpoint's host
    (`https://cwobject.com` -> `https://<bucket>.cwobject.com`). object_store sends a virtual-hosted request to an
    explicit endpoint unchanged ("if virtual_hosted_style_request is true then endpoint should have the bucket name
    included": arrow-rs object_store/src/aws/builder.rs, `with_virtual_hosted_style_request`), so without this the
    bucket is in neither the host nor the path."""
    parts = urllib.parse.urlsplit(endpoint_url)
    host = parts.hostname or ""
    if host.startswith(f"{bucket}."):  # already a bucket endpoint
        return endpoint_url
    netloc = f"{bucket}.{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def build_store(bucket: str, ep: S3Endpoint, retry: RetryConfig | None = None) -> S3Store:
    """An obstore S3Store bound to `bucket` at endpoint `ep` (credentials from `ep`, else its AWS profile)."""
    from obstore.store import S3Store

    config: S3Config = {"region": ep.region, "virtual_hosted_style_request": not ep.path_style}
    if ep.endpoint_url:
        config["endpoint"] = bucket_endpoint(ep.endpoint_url, bucket) if not ep.path_style else ep.endpoint_url
    # Write-once copies: S3 has no copy-if-absent of its own; the If-None-Match header makes CopyObject
    # conditional on servers that honour it, and copy_if_absent also checks the destination first.
    config["copy_if_not_exists"] = "header:If-None-Match:*"
    provider = None
    if ep.access_key_id and ep.secret_access_key:
        config["access_key_id"] = ep.access_key_id
        config["secret_access_key"] = ep.secret_access_key
        if ep.session_token:
            config["session_token"] = ep.session_token
    else:
        provider = _profile_provider(ep)
    client: ClientConfig = {
        "allow_http": True,
        "pool_max_idle_per_host": _POOL,
        "connect_timeout": "10s",
        "timeout": "120s",
    }
    retry = retry or {
        "max_retries": 5,
        "backoff": {"init_backoff": dt.timedelta(milliseconds=200), "max_backoff": dt.timedelta(seconds=8)},
        "retry_timeout": dt.timedelta(seconds=60),
    }
    try:
        return S3Store(
            bucket,
            config=config,
            client_options=client,
            retry_config=retry,
            credential_provider=provider,
        )
    except Exception as exc:
        raise StorageAccessError(f"cannot configure S3 for s3://{bucket} ({ep.name}): {exc}") from None


def _profile_provider(ep: S3Endpoint) -> Any:
    """AWS_PROFILE / ~/.aws config files through boto3's resolver (refreshing); None when there is nothing, so
    a request then fails with a clear 'no credentials' instead of signing anonymously by accident."""
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        return None
    session = boto3.Session(profile_name=ep.profile) if ep.profile else boto3.Session()
    if session.get_credentials() is None:
        raise StorageAccessError(
            f"no S3 credentials for endpoint {ep.name} ({ep.endpoint_url or 'AWS'}): set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or its RLCLEANUP_S3_ENDPOINT_* secret"
        )
    return Boto3CredentialProvider(session)
