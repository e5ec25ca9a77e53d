"""Layout D: MarinSkyRL's storage policy for direct and typed Iris RL launches (run-layout-v3.md §1 [SP]).

Upstream: MarinSkyRL `cloud/iris/storage_policy.py` @596dd2f7f732 (`resolve_storage_paths`):
- durable root `<marin_prefix>/users/<user>/skyrl/<job>`: `resolved-skyrl.json`, `exports/`, `ray_session_logs/`;
- temp root `<scheme>://<bucket>/tmp/ttl=<N>d/skyrl/users/<user>/<job>`: `checkpoints/`, `trace_jobs/`,
  `trajectories/`, `rendezvous/`; N one of ALLOWED_STORAGE_TTL_DAYS, default 14. The temp root hangs off the
  bucket root, not off `marin_prefix`.
- a path with an `iris` segment is refused for new runs (legacy `…/iris/<job>` roots are still read elsewhere).

Either root can name the run (a notification on a checkpoint names the temp root): both map to the pair. Locations
computed here are only candidates: discovery keeps one only when it holds objects, and every root it keeps is
checked against the deployment's run buckets like any other (classification).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlcleanup.ports.storage import Storage

ALLOWED_TTL_DAYS = (1, 2, 3, 4, 5, 6, 7, 14, 30)  # storage_policy.py ALLOWED_STORAGE_TTL_DAYS
DEFAULT_TTL_DAYS = 14  # DEFAULT_STORAGE_TTL_DAYS
# Tried in this order: the default first, then the rest (a run may choose any allowed TTL).
TTL_SEARCH_ORDER = (DEFAULT_TTL_DAYS, *(d for d in ALLOWED_TTL_DAYS if d != DEFAULT_TTL_DAYS))

_SEGMENT = r"[^/]+"
_DURABLE = re.compile(rf"^(?P<prefix>.*?)/users/(?P<user>{_SEGMENT})/skyrl/(?P<job>{_SEGMENT})$")
_TEMP = re.compile(rf"^(?P<bucket>.*?)/tmp/ttl=(?P<ttl>\d+)d/skyrl/users/(?P<user>{_SEGMENT})/(?P<job>{_SEGMENT})$")


@dataclass(frozen=True)
class LayoutDRoots:
    user: str
    job: str
    durable_candidates: tuple[str, ...]  # where the durable root may be, most likely first
    temp_candidates: tuple[str, ...]  # where the temp root may be, most likely first
    ttl_days: int | None = None  # known when the run was named by its temp root


def _bucket_roots(prefix: str) -> list[str]:
    """Where `<bucket>` may end inside a durable prefix: the bucket of a URL; for a local mirror (no bucket
    boundary) the prefix itself and each ancestor, deepest first."""
    if "://" in prefix:
        scheme, _, rest = prefix.partition("://")
        return [f"{scheme}://{rest.split('/', 1)[0]}"]
    parts = prefix.split("/")
    return ["/".join(parts[:cut]) for cut in range(len(parts), 0, -1) if "/".join(parts[:cut])]


def roots(run_uri: str) -> LayoutDRoots | None:
    """The Layout D pair a root belongs to, or None when the root is not shaped like either (an `iris` segment in
    the job's own path is a legacy root, not Layout D)."""
    root = run_uri.rstrip("/")
    temp = _TEMP.match(root)
    if temp is not None:
        bucket, user, job = temp["bucket"], temp["user"], temp["job"]
        return LayoutDRoots(user, job, (f"{bucket}/users/{user}/skyrl/{job}",), (root,), int(temp["ttl"]))
    durable = _DURABLE.match(root)
    if durable is None or "iris" in (durable["user"], durable["job"]):
        return None
    user, job = durable["user"], durable["job"]
    temps = tuple(
        f"{bucket}/tmp/ttl={ttl}d/skyrl/users/{user}/{job}"
        for bucket in _bucket_roots(durable["prefix"])
        for ttl in TTL_SEARCH_ORDER
    )
    return LayoutDRoots(user, job, (root,), temps)


def find_temp_root(storage: Storage, durable_root: str) -> str | None:
    """The temp root of a Layout D durable root that holds anything, or None."""
    pair = roots(durable_root)
    if pair is None or pair.ttl_days is not None:
        return None
    for candidate in pair.temp_candidates:
        if next(iter(storage.list(candidate)), None) is not None:
            return candidate
    return None


def durable_root_of(run_uri: str) -> str | None:
    """For a Layout D temp root, the durable root it pairs with (the bucket root as `marin_prefix`, upstream's
    default); None for any other root."""
    pair = roots(run_uri)
    return pair.durable_candidates[0] if pair is not None and pair.ttl_days is not None else None
