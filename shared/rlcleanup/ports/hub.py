"""A model hub as a publish / hand-off destination (`hf://<namespace>/<repo>`): the calls the Hub hand-off makes.

authority/hub_publish.py plans, scans, uploads and verifies through this port; adapters/hf_hub.py implements it
with `huggingface_hub`; runtime wiring (runtime/ports.py) hands a factory in, so a Hub client (and its token) is
made only when a grant names `hf://`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rlcleanup.ports.storage import VisibilityReading

SCHEME = "hf://"


def is_hub(uri: str) -> bool:
    return uri.startswith(SCHEME)


def repo_of(uri: str) -> str:
    """`hf://org/name` -> "org/name"; anything else (no namespace, extra segments, a name huggingface_hub's own
    `validate_repo_id` refuses: `m..x`, `a--b`, an encoded slash, over 96 characters) is a ValueError. Checked
    before a grant is signed and again when it is verified, so a malformed id ends the grant as `malformed`."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    parts = uri[len(SCHEME) :].strip("/").split("/")
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") for p in parts):
        raise ValueError(f"a Hub destination is hf://<namespace>/<repo>, not {uri[:300]!r}")
    repo_id = "/".join(parts)
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ValueError(f"{uri[:300]!r} is not a valid Hub repo id: {str(exc)[:300]}") from exc
    return repo_id


def git_blob_sha(data: bytes) -> str:
    """The git blob id of a regular file's bytes (what the Hub reports as a non-LFS file's `oid`)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    blob_id: str  # git blob sha1 (of the LFS pointer for LFS files)
    sha256: str | None  # LFS oid; None for a regular (non-LFS) file


class ModelHub(Protocol):
    """One repo host. Errors: `StorageAccessError` for auth/permission (permanent), `StorageError` transient."""

    requests: int  # calls made so far (reported on the outcome)

    def ensure_private_repo(self, repo_id: str) -> str:
        """Create the repo private when absent (never changes an existing one's visibility)."""

    def visibility(self, repo_id: str) -> VisibilityReading | None:
        """What the host says now, not what we asked for; None when no such repo exists (yet)."""

    def remote_files(self, repo_id: str, paths: Iterable[str]) -> dict[str, RemoteFile]:
        """Size and ids of those of `paths` the repo holds."""

    def commit_files(self, repo_id: str, files: list[tuple[str, Path]], message: str) -> str:
        """One commit adding these files (never deleting any); returns the commit id."""


HubFactory = Callable[[], ModelHub]


class HubReader(Protocol):
    """Read-only view of one repo host, for the audit of what a run published itself (authority/hub_audit.py).
    It has no write call at all. Errors: as `ModelHub`; a malformed repo id is a ValueError before any request."""

    endpoint: str
    requests: int

    def visibility(self, repo_id: str) -> VisibilityReading | None:
        """What the host says now; None when no such repo exists (or the token cannot see it)."""

    def file_names(self, repo_id: str, revision: str) -> list[str]:
        """Every file path the repo holds at `revision`."""

    def remote_files(self, repo_id: str, paths: Iterable[str], revision: str = "main") -> dict[str, RemoteFile]:
        """Size and ids of those of `paths` the repo holds."""

    def read_small(self, repo_id: str, path: str, revision: str, max_bytes: int) -> bytes | None:
        """The file's bytes, or None when it is larger than `max_bytes` (never read past it)."""


HubReaderFactory = Callable[[], HubReader]
