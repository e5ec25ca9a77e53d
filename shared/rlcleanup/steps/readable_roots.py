"""Where a run's own configuration may make us read, when the deployment names no run buckets (the embedded,
local default; issue 37 item 14).

A run's config names its checkpoint, temp, export and attempt roots (`trainer.ckpt_path`, `artifacts.*`). With
RLCLEANUP_RUN_BUCKETS set, runtime/admission.check_run_roots keeps them inside those buckets. Without it, a local
run is read only inside its **storage root**, the directory that plays its bucket: the nearest ancestor of the
run directory (the run directory included, at most `_MAX_LEVELS` up, never `/`) that holds Marin's temp area
`tmp/ttl=<N>d/` (run-layout-v2 §3: `T(n) = <bucket>/tmp/ttl=<N>d/skyrl/<key>`); with none, the run directory
itself. It is found from the storage's own directories, never from the config, so a config can only narrow it.
RLCLEANUP_READABLE_ROOTS (comma-separated) adds directories a config may name on top; anything else is refused
as `root_outside_allowed` with that fix, before any capture copies a byte.

Inside one storage root (or one run bucket) every prefix is accepted: Marin's steps of one run are sibling
prefixes (`<name>-training`, `<name>` for its export, the temp area), and whoever can write the run's config can
write every prefix of that bucket anyway; the bucket is the boundary (docs/authority.md §8, P10).
"""

from __future__ import annotations

import os

from rlcleanup.errors import PermanentError
from rlcleanup.ports.storage import Storage, children
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import basename, is_local, join, parent, strip_file_scheme

_MAX_LEVELS = 8  # Marin's durable root sits 4 levels under its bucket (users/<user>/skyrl/<job>); samples 3


def local_storage_root(storage: Storage, run_uri: str) -> str:
    """The directory that plays the run's bucket (see the module docstring)."""
    run_dir = strip_file_scheme(run_uri).rstrip("/")
    candidate = run_dir
    for _ in range(_MAX_LEVELS + 1):
        up = parent(candidate)
        if not up or up == candidate or candidate in ("", "/"):
            break
        prefixes, _objects = children(storage, join(candidate, "tmp"), page_size=1000)
        if any(basename(p.rstrip("/")).startswith("ttl=") for p in prefixes):
            return candidate
        candidate = up
    return run_dir


def _inside(path: str, root: str) -> bool:
    """`path` lies under `root`, both as real paths (a link under the root cannot lead out of it)."""
    if ".." in path.split("/"):
        return False
    real, real_root = (os.path.realpath(strip_file_scheme(p)) if is_local(p) else p.rstrip("/") for p in (path, root))
    return real == real_root or real.startswith(real_root.rstrip("/") + "/")


def check_readable_roots(
    storage: Storage, layout: RunLayout, run_buckets: tuple[str, ...] | None, extra: tuple[str, ...] | None
) -> None:
    """Refuse a local run whose config names a root outside its storage root (and RLCLEANUP_READABLE_ROOTS).
    Applies only without run buckets and to a local run (with buckets, admission.check_run_roots decides)."""
    if run_buckets is not None or not is_local(layout.run_uri):
        return
    storage_root = local_storage_root(storage, layout.run_uri)
    allowed = (storage_root, *(extra or ()))
    roots = {
        "temp_root": layout.temp_root,
        "checkpoints_root": layout.checkpoints_root,
        "exports_root": layout.exports_root,
        "attempts_root": layout.attempts_root,
    }
    outside = {name: root for name, root in roots.items() if root and not any(_inside(root, a) for a in allowed)}
    if outside:
        shown = {name: root[:200] for name, root in outside.items()}
        raise PermanentError(
            "root_outside_allowed",
            f"{layout.run_uri[:200]}: its config names {shown} outside the run's storage root {storage_root}: "
            "refused, nothing copied. Fix: if that location is the run's, allow it with "
            "RLCLEANUP_READABLE_ROOTS=<dir>[,<dir>] (or set RLCLEANUP_RUN_BUCKETS for a deployment)",
        )
