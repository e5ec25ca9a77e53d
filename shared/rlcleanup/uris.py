"""URI helpers shared by every adapter: `gs://bucket/key` or a local path."""

from __future__ import annotations

import posixpath

from rlcleanup.ports.storage import UnsafePathError


def is_gcs(uri: str) -> bool:
    return uri.startswith("gs://")


def strip_file_scheme(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def split_gcs(uri: str) -> tuple[str, str]:
    """`gs://b/k/x` -> ("b", "k/x")."""
    rest = uri[len("gs://") :]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"not a gs:// URI with a bucket: {uri!r}")
    return bucket, key


def join(base: str, *parts: str) -> str:
    """Join relative parts onto base, refusing anything that would climb out of it."""
    out = base.rstrip("/")
    for part in parts:
        check_relative(part)
        out = f"{out}/{part.strip('/')}" if part else out
    return out


def check_relative(name: str) -> None:
    """Reject absolute names, `..` segments and NUL: object names come from untrusted runs."""
    if "\x00" in name or name.startswith("/") or name.startswith("\\"):
        raise UnsafePathError(f"unsafe object name {name!r}")
    norm = posixpath.normpath(name.replace("\\", "/"))
    if norm == ".." or norm.startswith("../") or any(seg == ".." for seg in name.replace("\\", "/").split("/")):
        raise UnsafePathError(f"object name escapes its root: {name!r}")


def relative_to(uri: str, root: str) -> str:
    root = root.rstrip("/") + "/"
    if not uri.startswith(root):
        raise UnsafePathError(f"{uri!r} is not under {root!r}")
    rel = uri[len(root) :]
    check_relative(rel)
    return rel


def basename(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1]


def parent(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[0]
