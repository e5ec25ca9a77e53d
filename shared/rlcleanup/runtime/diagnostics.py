"""What `rlcleanup doctor` and `--version` learn from the adapters: the faces never import one themselves.

Every answer here is a fact safe to print: a credential is reported as present or not, never by value; an endpoint
URL loses any user:password and query string before it is returned. Every call that could wait on the network or
a process is bounded (the caller bounds the rest, cli/doctor.py).
"""

from __future__ import annotations

import subprocess
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from rlcleanup.errors import PermanentError
from rlcleanup.runtime.backends import _emulator_reachable
from rlcleanup.settings import NotifySettings, SettingsError, read, s3_endpoint_specs

GIT_TIMEOUT_SECONDS = 2.0
PROBE_TIMEOUT_SECONDS = 1.5
_PLACEHOLDER_URL = "https://secret-manager.invalid/"  # stands for a webhook URL kept in Secret Manager: never read


def source_commit() -> str | None:
    """The short commit this rlcleanup was imported from, when it runs from a git checkout (`git rev-parse --short
    HEAD` in the package's own directory); None elsewhere. The package file must be tracked by that repository, so
    an install inside some other repository's tree (a venv in a project) never reports that project's commit."""
    package = Path(__file__).resolve().parent.parent
    try:
        tracked = subprocess.run(
            ["git", "-C", str(package), "ls-files", "--error-unmatch", "__init__.py"],
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
        if tracked.returncode != 0:
            return None
        head = subprocess.run(
            ["git", "-C", str(package), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):  # no git on PATH, or a git that does not answer
        return None
    commit = head.stdout.strip()
    return commit if head.returncode == 0 and commit else None


def reachable(host: str) -> bool:
    """A TCP connect to an emulator's `host:port` (or http://host:port) within PROBE_TIMEOUT_SECONDS."""
    return _emulator_reachable(host, timeout=PROBE_TIMEOUT_SECONDS)


def shown_url(url: str | None) -> str | None:
    """A URL fit to print: no user:password, no query or fragment (where tokens travel)."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class GoogleCredentials:
    found: bool
    kind: str | None = None  # the credentials' class (service account, user, compute engine), never their content
    project: str | None = None
    problem: str | None = None


def google_credentials() -> GoogleCredentials:
    """Application Default Credentials as the Google client libraries find them (a key file, gcloud's ADC, the
    metadata server). The caller bounds the wait: the metadata server check can take seconds off GCP."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, project = google.auth.default()
    except DefaultCredentialsError as exc:
        return GoogleCredentials(False, problem=" ".join(str(exc).split())[:200])
    return GoogleCredentials(True, type(credentials).__name__, project)


@dataclass(frozen=True)
class S3EndpointFacts:
    name: str
    endpoint: str | None  # None: AWS itself
    region: str
    credentials: str  # "access keys", "profile NAME", or "none"
    buckets: tuple[str, ...] = ()


@dataclass
class S3Facts:
    endpoints: list[S3EndpointFacts] = field(default_factory=list)
    problem: str | None = None  # a bad RLCLEANUP_S3_* value (named, never shown)


def s3_facts() -> S3Facts:
    """The S3 endpoints the adapter would use: the default one (AWS_* variables) and each RLCLEANUP_S3_ENDPOINT_*;
    whether each has keys, never the keys."""
    from rlcleanup.adapters.s3_client import default_endpoint

    facts = S3Facts()
    try:
        default = default_endpoint()
    except ValueError as exc:  # a bad addressing style: its message names the variable
        return S3Facts(problem=str(exc))
    facts.endpoints.append(
        S3EndpointFacts(
            "default",
            shown_url(default.endpoint_url),
            default.region,
            "access keys"
            if default.access_key_id and default.secret_access_key
            else f"profile {default.profile}"
            if default.profile
            else "none",
        )
    )
    try:
        specs = s3_endpoint_specs()
    except SettingsError as exc:
        facts.problem = str(exc)
        return facts
    for name, spec in specs.items():
        keys = bool(spec.get("access_key_id") and spec.get("secret_access_key"))
        url = spec.get("endpoint_url")
        facts.endpoints.append(
            S3EndpointFacts(
                name,
                shown_url(url if isinstance(url, str) else None),
                str(spec.get("region") or "us-east-1"),
                "access keys" if keys else "none",
                tuple(spec.get("buckets") or ()),
            )
        )
    return facts


@dataclass(frozen=True)
class ChannelFacts:
    configured: tuple[str, ...]  # registry names of the channels a notice would be posted on
    known: tuple[str, ...]
    problem: str | None = None


def notify_channels() -> ChannelFacts:
    """The notification channels these settings configure, by name (the registry decides, as the notify function
    does); a webhook URL kept in Secret Manager is not read."""
    from rlcleanup.adapters.notify_registry import BUILTIN

    placeholder = lambda _resource: _PLACEHOLDER_URL  # noqa: E731
    try:
        conf = read(NotifySettings, secret=True)
        wanted = conf.channels or BUILTIN.names
        names = tuple(name for name in wanted if BUILTIN.build(name, conf, placeholder) is not None)
    except (SettingsError, PermanentError) as exc:  # a bad variable (named, not shown) or an unknown channel
        return ChannelFacts((), BUILTIN.names, str(exc))
    return ChannelFacts(names, BUILTIN.names)


def storage_schemes() -> tuple[str, ...]:
    """The storage schemes registered (local files included)."""
    from rlcleanup.adapters.storage_registry import BUILTIN

    return BUILTIN.schemes
