"""Read back who can actually read a destination; never trust the requested flag.

GCS: public access prevention `enforced` caps it at private/internal; otherwise an IAM binding (or a default
object ACL) for allUsers / allAuthenticatedUsers makes it public, a `domain:` member makes it internal. Local:
the destination directory (or its nearest existing ancestor) with world-read bits is public, group-read is internal,
capped by the ancestors' search bits (a 0755 directory inside a 0700 one is private).
When the backend cannot answer (an emulator without IAM) the answer is "unknown" and the caller refuses.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcleanup.authority.grants import Visibility
from rlcleanup.uris import is_gcs, split_gcs, strip_file_scheme

_PUBLIC_MEMBERS = {"allUsers", "allAuthenticatedUsers"}


@dataclass(frozen=True)
class VisibilityReading:
    visibility: Visibility | None  # None: could not be determined
    evidence: str


class VisibilityUnknown(Exception):
    pass


def _level(mode: int, read: bool) -> Visibility:
    other, group = (stat.S_IROTH, stat.S_IRGRP) if read else (stat.S_IXOTH, stat.S_IXGRP)
    return Visibility.public if mode & other else Visibility.internal if mode & group else Visibility.private


def local_visibility(uri: str) -> VisibilityReading:
    """Readable by others only if the directory is and every ancestor lets them through (search bit)."""
    path = Path(strip_file_scheme(uri)).absolute()
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    mode = os.stat(probe).st_mode
    level, limiter = _level(mode, read=True), f"{probe} mode {stat.filemode(mode)}"
    for ancestor in probe.parents:
        amode = os.stat(ancestor).st_mode
        capped = _level(amode, read=False)
        if capped.rank < level.rank:
            level, limiter = capped, f"ancestor {ancestor} mode {stat.filemode(amode)}"
    words = {
        Visibility.public: "world-readable",
        Visibility.internal: "group-readable",
        Visibility.private: "owner-only",
    }
    return VisibilityReading(level, f"{words[level]}: {limiter}")


def gcs_visibility(uri: str, client: Any | None = None) -> VisibilityReading:
    """Bucket-level read-back. Any failure to read IAM is reported, never guessed as private."""
    bucket_name, _ = split_gcs(uri)
    try:
        if client is None:
            from rlcleanup.adapters.gcs_storage import _client

            client = _client()
        bucket = client.get_bucket(bucket_name)
        prevention = getattr(bucket.iam_configuration, "public_access_prevention", None) or "unspecified"
        policy = bucket.get_iam_policy(requested_policy_version=3)
        bindings = list(getattr(policy, "bindings", []) or [])
    except Exception as exc:  # emulators answer 404/501 for IAM: say so instead of passing silently
        return VisibilityReading(None, f"could not read bucket IAM for gs://{bucket_name}: {type(exc).__name__}: {exc}")
    members = {m for b in bindings for m in b.get("members", [])}
    acl_public = _default_acl_public(bucket)
    if acl_public is None:
        return VisibilityReading(None, f"gs://{bucket_name} uses fine-grained ACLs that could not be read")
    if prevention == "enforced":
        broad = any(m.startswith("domain:") for m in members)
        return VisibilityReading(
            Visibility.internal if broad else Visibility.private,
            f"public access prevention enforced on gs://{bucket_name}",
        )
    public = sorted(members & _PUBLIC_MEMBERS)
    if public or acl_public:
        why = f"IAM members {public}" if public else "default object ACL grants allUsers"
        return VisibilityReading(
            Visibility.public, f"gs://{bucket_name}: {why} (public access prevention {prevention})"
        )
    if any(m.startswith("domain:") for m in members):
        return VisibilityReading(Visibility.internal, f"gs://{bucket_name}: a domain-wide IAM member")
    return VisibilityReading(Visibility.private, f"gs://{bucket_name}: no public or domain-wide IAM member")


def _default_acl_public(bucket: Any) -> bool | None:
    """Fine-grained buckets can also expose objects through ACLs (uniform access makes ACLs moot). None: unreadable."""
    if bucket.iam_configuration.uniform_bucket_level_access_enabled:
        return False
    try:
        acl = bucket.default_object_acl
        acl.reload()
        return any(entry.get("entity") in _PUBLIC_MEMBERS for entry in acl)
    except Exception:
        return None


def read_visibility(uri: str, gcs_client: Any | None = None) -> VisibilityReading:
    return gcs_visibility(uri, gcs_client) if is_gcs(uri) else local_visibility(uri)
