"""URI helpers shared by every adapter: `<scheme>://bucket/key` or a local path.

Which schemes mean something is the storage registry's call (adapters/storage_registry.py): these helpers only
parse. A bare path has scheme `file`; anything else spelled `<scheme>://` keeps its scheme, known or not, so an
unknown one reaches the registry (and fails there) instead of being read as a local path.
"""

from __future__ import annotations

import posixpath
import re

from rlcleanup.ports.storage import UnsafePathError

LOCAL_SCHEME = "file"
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")


def scheme(uri: str) -> str:
    """`gs://b/k` -> "gs"; `s3://b/k` -> "s3"; `/data/run` and `file:///data/run` -> "file" (lower case)."""
    m = _SCHEME.match(uri)
    return m["scheme"].lower() if m else LOCAL_SCHEME


def is_local(uri: str) -> bool:
    return scheme(uri) == LOCAL_SCHEME


def strip_file_scheme(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def split_bucket(uri: str) -> tuple[str, str]:
    """`gs://b/k/x` -> ("b", "k/x"); any `<scheme>://bucket/key` object-store URI."""
    m = _SCHEME.match(uri)
    if m is None:
        raise ValueError(f"not a <scheme>://bucket URI: {uri!r}")
    bucket, _, key = uri[m.end() :].partition("/")
    if not bucket:
        raise ValueError(f"not a {m['scheme']}:// URI with a bucket: {uri!r}")
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
