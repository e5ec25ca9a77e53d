"""Where a run's rendezvous evidence is: found from the run's own files, and accepted only if it is this run's.

MarinSkyRL's task runtime (`cloud/iris/task_runtime.py`@006eddc) keeps, under the job's rendezvous directory,
`term_artifacts/<task>_<ts>.txt` (`capture_termination_artifacts`), `debug_artifacts/<node_id>/` with its
`sync-manifest.json` (`sync_debug_artifacts`) and, in the version before the durable Ray-log root
(`task_runtime.py` as stored before @006eddc), `ray_session_logs/<node_id>/<session>/`; @006eddc syncs Ray logs to
`--ray-log-dir` (`<durable root>/ray_session_logs/<node_id>/<session>/`, run-layout-v3.md §1) instead. The
runtime's log names them: `writing rendezvous -> <rdv>/ray_head.json`, `[term-capture] wrote termination artifact
-> <rdv>/term_artifacts/…`, `[artifact-sync] started (…) -> <ray-log-dir>/<node>, <rdv>/debug_artifacts/<node>`,
`[ray-log-sync] uploaded … -> <ray-log-dir>/<node> [reason]`; the launcher's banner `Rendezvous: <uri>` (v3 §4;
its writer was not found upstream, so it is read as v3 states it). An attempt record may carry
`request.rendezvous_dir` (the v2 launcher's request).

Every location found so is *input*: it is accepted only when it lies under one of the run's own roots (the run,
its temp area, its steps, its attempts) or, for a legacy `iris/` run, in the run's own bucket under `iris/` with
its last segment naming this run's job (v2 §8 `iris/rl-rdv/<job>`). "The run's bucket" is the run's storage root
(steps/readable_roots.run_storage_root): a cloud run's bucket, a local run's directory that plays it (a gcsfuse
mount, a copy kept for debugging), where a cloud URI the log names for `iris/…` is read under the mirror. Nothing
else is read, listed or captured (the roots the run's own config names are checked against the deployment's run
buckets at admission).
"""

from __future__ import annotations

import os
import re
from typing import Any

from rlcleanup.formats.config import get
from rlcleanup.ports.storage import Storage, StorageError
from rlcleanup.steps.layout_model import AttemptFiles, EvidenceRoot, RunLayout
from rlcleanup.steps.readable_roots import run_storage_root
from rlcleanup.uris import basename, is_local, join, parent, strip_file_scheme

HEAD_BYTES = 64 * 1024  # the launcher banner and the runtime's bring-up lines are at the top of the Iris log
DRIVER_LOG = "finelog.log"
RENDEZVOUS_KEYS = ("request.rendezvous_dir", "request.output.rendezvous_dir", "request.rendezvous_uri")

_RENDEZVOUS_LINES = (
    re.compile(r"Rendezvous: (?P<uri>\S+)"),
    re.compile(r"writing rendezvous -> (?P<uri>\S+)/ray_head\.json"),
    re.compile(r"\[term-capture\] wrote termination artifact -> (?P<uri>\S+)/term_artifacts/\S+"),
)
_ARTIFACT_SYNC = re.compile(r"\[artifact-sync\] started \([^)]*\) -> (?P<dests>.+)$")
_RAY_LOG_SYNC = re.compile(r"\[ray-log-sync\] (?:uploaded|started) .*?-> (?P<dest>\S+)")


def _strip_node(dest: str) -> str:
    return parent(dest.rstrip("/"))


def locations_in_line(line: str) -> list[tuple[str, str]]:
    """(kind, uri) of every evidence location a runtime log line names."""
    found: list[tuple[str, str]] = []
    for pattern in _RENDEZVOUS_LINES:
        match = pattern.search(line)
        if match:
            found.append(("rendezvous", match.group("uri").rstrip("/")))
    sync = _ARTIFACT_SYNC.search(line)
    if sync:
        for dest in (d.strip() for d in sync.group("dests").split(",")):
            root = _strip_node(dest)
            if basename(root) == "debug_artifacts":
                found.append(("rendezvous", parent(root)))
            elif dest:
                found.append(("ray_log_root", root))
    ray = _RAY_LOG_SYNC.search(line)
    if ray:
        found.append(("ray_log_root", _strip_node(ray.group("dest"))))
    return [(kind, uri) for kind, uri in found if uri]


def _record_locations(record: dict[str, Any]) -> list[str]:
    return [v.rstrip("/") for key in RENDEZVOUS_KEYS if isinstance(v := get(record, key), str) and v.strip()]


def _log_head(storage: Storage, attempt: AttemptFiles) -> str:
    if attempt.log_prefix is None:
        return ""
    try:
        return storage.read_range(join(attempt.log_prefix, DRIVER_LOG), 0, HEAD_BYTES).decode("utf-8", "replace")
    except (StorageError, OSError, ValueError):
        return ""  # no driver log (yet): nothing named


def _own_roots(layout: RunLayout) -> list[str]:
    roots = [layout.run_uri, layout.temp_root, layout.config_root, layout.attempts_root]
    roots += [root for _, root in layout.extra_roots]
    if layout.attempts_root is not None:
        roots.append(parent(layout.attempts_root))
    return [r.rstrip("/") for r in roots if r]


_VERSION_LIKE = re.compile(r"^[\d.]+$")  # a Marin step's version directory names no job


def _job_names(layout: RunLayout) -> set[str]:
    """What this run's job is called: its root's name (Layout D `users/<user>/skyrl/<job>`; a bare version is not a
    name), the run id its attempt records carry, and the Iris job id's last segment (with the attempt id too)."""
    names = {basename(r.rstrip("/")) for r in (layout.run_uri, layout.config_root) if r}
    names = {n for n in names if not _VERSION_LIKE.match(n)}
    for attempt in layout.attempts:
        for key in ("request.run_id", "response.run_id", "request.job_name"):
            value = get(attempt.record, key)
            if isinstance(value, str) and value:
                names.add(value)
        job = get(attempt.record, "response.iris_job_id")
        if isinstance(job, str) and job.strip("/"):
            last = job.rstrip("/").rsplit("/", 1)[-1]
            names.update({last, last.removesuffix(f"-{attempt.attempt_id}")})
    return {n for n in names if n}


def _bucket(uri: str) -> str | None:
    if "://" not in uri or uri.startswith("file://"):
        return None
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _in_local_root(uri: str, storage_root: str) -> str | None:
    """A local location under the local storage root as a path relative to it (checked as real paths: a link
    under the root cannot lead out of it), else None."""
    if not is_local(uri) or not is_local(storage_root):
        return None
    real, root = os.path.realpath(strip_file_scheme(uri)), os.path.realpath(strip_file_scheme(storage_root))
    return real[len(root) :].strip("/") if real == root or real.startswith(root.rstrip("/") + "/") else None


def resolve(uri: str, layout: RunLayout, storage_root: str | None = None) -> tuple[str | None, str | None]:
    """(where to read a location found in the run's files, None) when it is this run's evidence, else (None, why).

    The run's storage root (steps/readable_roots.run_storage_root: a cloud run's bucket, a local run's directory
    that plays it) bounds what is accepted. A legacy `iris/…/<job>` rendezvous a local mirror's log names by its
    cloud URI (`gs://<bucket>/iris/rl-rdv/<job>`) is read where the mirror keeps it, `<storage root>/iris/…`: the
    path under the bucket is kept, the bucket replaced by the mirror the operator pointed us at."""
    if ".." in uri.split("/") or "\\" in uri or not uri.strip():
        return None, "it is not a plain location"
    if any(uri == root or uri.startswith(root + "/") for root in _own_roots(layout)):
        return uri, None
    root = storage_root or _bucket(layout.run_uri)
    bucket = _bucket(uri)
    mirrored = root is not None and is_local(root) and bucket is not None
    if bucket is not None and (bucket == root or mirrored):
        under = uri[len(bucket) :].strip("/")
    elif root is not None and (local := _in_local_root(uri, root)) is not None:
        under = local
    else:
        return None, "it is outside the run's own roots and its storage root"
    path = under.split("/")
    if path[0] != "iris" or len(path) < 2:
        return None, "it is in the run's storage root but not under the run's roots or a legacy iris/ rendezvous"
    if path[-1] not in _job_names(layout):
        return None, f"its job segment {path[-1]!r} does not name this run's job"
    assert root is not None
    return (join(root, under) if mirrored or bucket is None else uri), None


def refusal(uri: str, layout: RunLayout, storage_root: str | None = None) -> str | None:
    """Why a location found in the run's files is not this run's evidence, or None when it is."""
    return resolve(uri, layout, storage_root)[1]


def find_evidence_roots(storage: Storage, layout: RunLayout) -> tuple[list[EvidenceRoot], list[str]]:
    """The run's accepted rendezvous and Ray-log roots (each once, with the attempt that named it first), and a
    problem line per location refused."""
    roots: dict[str, EvidenceRoot] = {}
    problems: list[str] = []
    storage_root = run_storage_root(storage, layout.run_uri)
    for attempt in layout.attempts:
        named = [
            ("rendezvous", uri, f"attempt record {attempt.record_uri}") for uri in _record_locations(attempt.record)
        ]
        head = _log_head(storage, attempt)
        driver = join(attempt.log_prefix, DRIVER_LOG) if attempt.log_prefix else ""
        for line in head.splitlines():
            named += [(kind, uri, f"{driver} ({line.strip()[:120]})") for kind, uri in locations_in_line(line)]
        for kind, uri, where in named:
            read_at, why = resolve(uri, layout, storage_root)
            if read_at is None:
                problems.append(f"evidence location {uri[:300]} named in {where[:300]} refused: {why}")
                continue
            if read_at in roots:
                continue
            roots[read_at] = EvidenceRoot(uri=read_at, kind=kind, attempt_id=attempt.attempt_id, found_in=where)
    return list(roots.values()), sorted(set(problems))
