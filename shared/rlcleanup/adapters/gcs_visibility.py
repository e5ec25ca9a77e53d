"""Who can read a GCS destination, read back from the bucket itself (never from the requested flag).

Public access prevention `enforced` caps it at private/internal; otherwise an IAM binding (or a default object ACL)
for allUsers / allAuthenticatedUsers makes it public, a `domain:` member makes it internal. When the backend
cannot answer (an emulator without IAM) the answer is "unknown" and the caller refuses.
"""

from __future__ import annotations

from typing import Any

from rlcleanup.models.vocab import Visibility
from rlcleanup.ports.storage import VisibilityReading
from rlcleanup.uris import split_bucket

_PUBLIC_MEMBERS = {"allUsers", "allAuthenticatedUsers"}
# Convenience members: everyone holding the project's viewer or editor role. At least `internal`.
_PROJECT_MEMBERS = ("projectViewer:", "projectEditor:")  # owners can grant themselves anything anyway


def bucket_visibility(uri: str, client: Any) -> VisibilityReading:
    """Bucket-level read-back. Any failure to read IAM is reported, never guessed as private."""
    bucket_name, _ = split_bucket(uri)
    try:
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
        broad = sorted(m for m in members if m.startswith(("domain:", *_PROJECT_MEMBERS)))
        return VisibilityReading(
            Visibility.internal if broad else Visibility.private,
            f"public access prevention enforced on gs://{bucket_name}"
            + (f"; readable by domain/project-wide members {broad}" if broad else ""),
        )
    public = sorted(members & _PUBLIC_MEMBERS)
    if public or acl_public:
        why = f"IAM members {public}" if public else "default object ACL grants allUsers"
        return VisibilityReading(
            Visibility.public, f"gs://{bucket_name}: {why} (public access prevention {prevention})"
        )
    if any(m.startswith("domain:") for m in members):
        return VisibilityReading(Visibility.internal, f"gs://{bucket_name}: a domain-wide IAM member")
    project_wide = sorted(m for m in members if m.startswith(_PROJECT_MEMBERS))
    if project_wide:  # every viewer/editor of the project reads it: not private to the granted people
        return VisibilityReading(Visibility.internal, f"gs://{bucket_name}: project-wide IAM members {project_wide}")
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
