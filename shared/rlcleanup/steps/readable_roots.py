"""Where a run's own configuration may make us read, when the deployment names no run buckets (the embedded,
local default; issue 37 item 14).

A run's config names its checkpoint, temp, export and attempt roots (`trainer.ckpt_path`, `artifacts.*`). With
RLCLEANUP_RUN_BUCKETS set, runtime/admission.check_run_roots keeps them inside those buckets. Without it, a local
run's roots must lie (as real paths) in what is derived from where the run lives, never from its config:
- its **storage root**, the directory that plays its bucket: the nearest ancestor of the run directory (the run
  directory included, at most `_MAX_LEVELS` up, never `/`) that holds Marin's temp area `tmp/ttl=<N>d/`
  (run-layout-v2 §3: `T(n) = <bucket>/tmp/ttl=<N>d/skyrl/<key>`) or Iris's `iris/` prefix (v2 §8: a legacy run's
  rendezvous `iris/rl-rdv/<job>` lies at the top of its bucket); with none (expired, never written), the run
  directory itself. `run_storage_root` is the one definition of "the run's storage root" for every reader: a
  cloud run's bucket (`scheme://bucket`), a local run's (a gcsfuse mount, a copy kept for debugging) this
  directory; steps/layout_rendezvous.py accepts a rendezvous by it too;
- Marin's temp area of any such ancestor, `<ancestor>/tmp/ttl=<N>d/` (present or already expired), and the run's
  sibling steps `<prefix>/<name>{,-training,-metrics}/<version>` (a Marin run is several steps side by side);
- RLCLEANUP_READABLE_ROOTS (comma-separated): directories the operator allows on top.
Anything else is refused as `root_outside_allowed` with that fix, before any capture copies a byte. A config can
name another prefix inside these (the bucket is the boundary: whoever writes the run's config can write the whole
bucket), never a place outside them (docs/authority.md §8, P18).
"""

from __future__ import annotations

import os

from rlcleanup.errors import PermanentError
from rlcleanup.ports.storage import Storage, children
from rlcleanup.steps.layout_model import RunLayout
from rlcleanup.uris import basename, is_local, join, parent, strip_file_scheme

_MAX_LEVELS = 8  # Marin's durable root sits 4 levels under its bucket (users/<user>/skyrl/<job>); samples 3


def local_storage_root(storage: Storage, run_uri: str) -> str:
    """The directory that plays the run's bucket (see the module docstring)."""
    run_dir = strip_file_scheme(run_uri).rstrip("/")
    for candidate in _ancestors(run_dir):
        if _holds_bucket_marker(storage, candidate):
            return candidate
    return run_dir


def _holds_bucket_marker(storage: Storage, candidate: str) -> bool:
    """`candidate/tmp/ttl=<N>d/` (Marin's temp area) or `candidate/iris/` (Iris's prefix) exists."""
    prefixes, _objects = children(storage, join(candidate, "tmp"), page_size=1000)
    if any(basename(p.rstrip("/")).startswith("ttl=") for p in prefixes):
        return True
    iris, _objects = children(storage, join(candidate, "iris"), page_size=1)
    return bool(iris)


def run_storage_root(storage: Storage, run_uri: str) -> str:
    """The run's storage root: a cloud run's bucket (`gs://b`, `s3://b`), a local run's local_storage_root."""
    if is_local(run_uri):
        return local_storage_root(storage, run_uri)
    scheme, rest = run_uri.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _real(uri: str) -> str:
    return os.path.realpath(strip_file_scheme(uri)) if is_local(uri) else uri.rstrip("/")


def _inside(path: str, root: str) -> bool:
    """`path` lies under `root`, both as real paths (a link under the root cannot lead out of it)."""
    if ".." in path.split("/"):
        return False
    real, real_root = _real(path), _real(root)
    return real == real_root or real.startswith(real_root.rstrip("/") + "/")


def _ancestors(run_dir: str) -> list[str]:
    out, candidate = [], run_dir
    for _ in range(_MAX_LEVELS + 1):
        up = parent(candidate)
        if not up or up == candidate or candidate in ("", "/"):
            break
        out.append(candidate)
        candidate = up
    return out


def _in_marin_temp_area(path: str, run_dir: str) -> bool:
    """`path` is under `<ancestor>/tmp/ttl=<N>d/` of an ancestor of the run directory."""
    if ".." in path.split("/"):
        return False
    real = _real(path)
    for ancestor in _ancestors(run_dir)[1:]:
        area = _real(ancestor).rstrip("/") + "/tmp/"
        if real.startswith(area) and real[len(area) :].startswith("ttl="):
            return True
    return False


def _sibling_steps(run_dir: str) -> list[str]:
    """Marin's steps of one run: `<prefix>/<name>`, `<name>-training`, `<name>-metrics`, same version."""
    version, step_dir = basename(run_dir), parent(run_dir)
    prefix, name = parent(step_dir), basename(step_dir)
    if not prefix or prefix in ("", "/"):
        return []
    for suffix in ("-training", "-metrics"):
        name = name.removesuffix(suffix)
    return [join(prefix, f"{name}{suffix}", version) for suffix in ("", "-training", "-metrics")]


def check_readable_roots(
    storage: Storage, layout: RunLayout, run_buckets: tuple[str, ...] | None, extra: tuple[str, ...] | None
) -> None:
    """Refuse a local run whose config names a root outside what is derived from where it lives (and
    RLCLEANUP_READABLE_ROOTS). Only without run buckets and for a local run (else admission.check_run_roots)."""
    if run_buckets is not None or not is_local(layout.run_uri):
        return
    run_dir = strip_file_scheme(layout.run_uri).rstrip("/")
    storage_root = local_storage_root(storage, layout.run_uri)
    allowed = (storage_root, *_sibling_steps(run_dir), *(extra or ()))
    roots = {
        "temp_root": layout.temp_root,
        "checkpoints_root": layout.checkpoints_root,
        "exports_root": layout.exports_root,
        "attempts_root": layout.attempts_root,
    }
    outside = {
        name: root
        for name, root in roots.items()
        if root and not any(_inside(root, a) for a in allowed) and not _in_marin_temp_area(root, run_dir)
    }
    if outside:
        shown = {name: root[:200] for name, root in outside.items()}
        raise PermanentError(
            "root_outside_allowed",
            f"{layout.run_uri[:200]}: its config names {shown} outside the run's storage root {storage_root}: "
            "refused, nothing copied. Fix: if that location is the run's, allow it with "
            "RLCLEANUP_READABLE_ROOTS=<dir>[,<dir>] (or set RLCLEANUP_RUN_BUCKETS for a deployment)",
        )
