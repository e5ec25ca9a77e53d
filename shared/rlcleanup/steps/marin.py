"""Marin executor steps around a MarinSkyRL run: the temp area of a step, the `.executor_status` word and its lock,
and the join of a `-training` / `-metrics` step with its export step (run-layout-v2.md §3, §4).

Upstream: marin `lib/marin/src/marin/rl/skyrl.py` (`_training_step` names the step `<name>-training` or
`<name>-metrics`; `skyrl_export_step` names the export `<name>` (`removesuffix("-training")`), depends on the
training step, and passes `training_manifest_uri` = the training step's `terminal.json`); marin
`lib/marin/src/marin/execution/step_status.py` (status tokens, the lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from rlcleanup.errors import PermanentError
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.layout_files import loads_run_json
from rlcleanup.uris import basename, join, parent

TRAINING_SUFFIXES = ("-training", "-metrics")
DEFAULT_TTL_DAYS = 14  # SkyRLRetentionPolicy.temporary_storage_ttl_days (marin skyrl.py)
TEMP_CATEGORY = "skyrl"  # _TEMPORARY_OUTPUT_PREFIX (marin skyrl.py)
LOCK_STALE_SECONDS = 90  # §4: refreshed every 30 s, stale after 90 s (older code; current UNVERIFIED)
STATUS_TOKENS = ("RUNNING", "SUCCESS", "FAILED", "DEP_FAILED", "WAITING", "UNKNOWN", "CANCELLED")


class StepRole(StrEnum):
    training = "training"  # <name>-training: checkpoint mode, exports nothing itself
    metrics = "metrics"  # <name>-metrics: no checkpoints, no exports
    export = "export"  # <name> after a -training step: the HF export
    single = "single"  # one-step run (v1 protocol or launch.yaml)


def temp_root_for(durable_root: str, ttl_days: int = DEFAULT_TTL_DAYS) -> list[str]:
    """Where Marin put a step's temp area: `<bucket>/tmp/ttl=<N>d/skyrl/<key of R>` (§3, rigging
    `marin_temp_bucket`), for every split of R into bucket and key (a local mirror has no bucket boundary)."""
    root = durable_root.rstrip("/")
    out: list[str] = []
    if "://" in root:
        scheme, _, rest = root.partition("://")
        bucket, _, key = rest.partition("/")
        if key:
            out.append(f"{scheme}://{bucket}/tmp/ttl={ttl_days}d/{TEMP_CATEGORY}/{key}")
        return out
    parts = root.split("/")
    # Try the deepest bucket first: a sample written as <dest>/<bucket>/<name>/<version> keeps <name>/<version>.
    for cut in range(len(parts) - 2, 0, -1):
        bucket, key = "/".join(parts[:cut]), "/".join(parts[cut:])
        if bucket:
            out.append(f"{bucket}/tmp/ttl={ttl_days}d/{TEMP_CATEGORY}/{key}")
    return out


def find_temp_root(storage: Storage, durable_root: str, ttl_days: int = DEFAULT_TTL_DAYS) -> str | None:
    for candidate in temp_root_for(durable_root, ttl_days):
        if next(iter(storage.list(candidate)), None) is not None:
            return candidate
    return None


@dataclass(frozen=True)
class ExecutorLock:
    uri: str
    worker_id: str | None
    timestamp: datetime | None

    def stale(self, now: datetime) -> bool | None:
        if self.timestamp is None:
            return None
        return (now - self.timestamp).total_seconds() > LOCK_STALE_SECONDS


def _parse_lock_time(value: Any) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return datetime.fromtimestamp(float(value), tz=UTC)
    if isinstance(value, str) and value:
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
    return None


def read_lock(storage: Storage, step_root: str) -> ExecutorLock | None:
    """`.executor_status.lock` = JSON {worker_id, timestamp} (§4); present only while a worker holds the step."""
    uri = join(step_root, ".executor_status.lock")
    info = storage.stat(uri)
    if info is None:
        return None
    try:
        value = loads_run_json(storage.read_bytes(uri, 64 * 1024), uri)
    except PermanentError:
        value = {}  # a lock nested past the bound says nothing of its worker: its time is the object's
    if not isinstance(value, dict):
        value = {}
    worker = value.get("worker_id")
    stamp = _parse_lock_time(value.get("timestamp")) or info.updated
    return ExecutorLock(uri, worker if isinstance(worker, str) else None, stamp)


def step_name_and_version(step_root: str) -> tuple[str, str]:
    """`R(n) = <prefix>/<n>/<version>` (§3)."""
    return basename(parent(step_root)), basename(step_root)


def training_role(step_root: str) -> StepRole | None:
    name, _ = step_name_and_version(step_root)
    if name.endswith("-training"):
        return StepRole.training
    if name.endswith("-metrics"):
        return StepRole.metrics
    return None


def export_step_for(training_root: str) -> str:
    """The export step Marin builds after `<name>-training`: `<prefix>/<name>/<version>` (skyrl_export_step)."""
    name, version = step_name_and_version(training_root)
    base = name.removesuffix("-training")
    return join(parent(parent(training_root)), base, version)


def training_steps_for(export_root: str) -> list[str]:
    """Candidate training steps of an export step `<prefix>/<name>/<version>`, checkpoint mode first."""
    name, version = step_name_and_version(export_root)
    prefix = parent(parent(export_root))
    return [join(prefix, f"{name}{suffix}", version) for suffix in TRAINING_SUFFIXES]


def step_exists(storage: Storage, step_root: str) -> bool:
    """A Marin step root has at least `.executor_info` or `.executor_status` (written at schedule time)."""
    return any(storage.stat(join(step_root, n)) is not None for n in (".executor_status", ".executor_info")) or (
        storage.stat(join(step_root, "terminal.json")) is not None
    )


def manifest_uri_dir(uri: Any) -> str | None:
    """`training_manifest_uri` names the training step's terminal.json; its directory is that step's root."""
    if isinstance(uri, str) and uri.strip().endswith(".json"):
        return parent(uri.strip())
    return None
