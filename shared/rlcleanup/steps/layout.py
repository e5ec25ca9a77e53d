"""Discover a run's layout (A: Marin executor step; C: legacy Slurm) from its durable root.

Everything later steps read is located here once, so they never guess paths themselves.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rlcleanup.errors import PermanentError
from rlcleanup.formats.config import ConfigError, get, parse_config, parse_int, sha256_hex
from rlcleanup.formats.launch import RunConfig, read_run_config
from rlcleanup.ports.storage import ObjectInfo, Storage, child_names, children
from rlcleanup.steps import marin
from rlcleanup.steps.marin import ExecutorLock, StepRole
from rlcleanup.uris import basename, join, parent

# resolved-launch.yaml is what a launch.yaml run leaves in R (run-layout-v2.md §3, 1-step); launch.yaml the source.
CONFIG_NAMES_A = ("resolved-skyrl.json", "resolved-launch.yaml", "launch.yaml", "launch.yml")
CONFIG_NAMES_C = ("resolved_config.yaml", "resolved_config.yml", "resolved_config.json")
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_SLURM_LOG = re.compile(r"^(?P<job>.+)_(?P<jobid>\d+)\.out$")


class LayoutError(PermanentError, ValueError):
    """The run cannot be read at all (no config, unreadable root): recorded on the run."""

    def __init__(self, message: str) -> None:
        super().__init__("unreadable_run", message)


@dataclass
class AttemptFiles:
    attempt_id: str
    record_uri: str | None = None
    record: dict[str, Any] = field(default_factory=dict)  # {request, execution, response}
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # Where the attempt's logs are. Discovery lists no log file of a Marin attempt: it names the attempt's `logs/`
    # prefix, and whoever reads the logs lists it (the log-scan plan, paged; a pre-cancel capture, fresh). A Slurm
    # attempt *is* one `.out` file, so discovery knows its one log (log_objects) and it has no prefix.
    log_prefix: str | None = None
    log_objects: list[ObjectInfo] = field(default_factory=list)
    created_at: datetime | None = None  # the record object's own time (upstream records carry no timestamp)
    order_key: datetime | None = None
    order_source: str | None = None  # which field ordered this attempt in the chain

    @property
    def response(self) -> dict[str, Any]:
        """`response` (protocol v1/v2), or `result` of a launch.yaml run's manifest (run-layout-v2.md §0)."""
        value = self.record.get("response")
        if not isinstance(value, dict):
            value = self.record.get("result")
        return value if isinstance(value, dict) else {}


@dataclass
class StepState:
    """One Marin executor step of the run and what its controller files say (run-layout-v2.md §3, §4)."""

    role: StepRole
    uri: str
    executor_status: str | None = None
    lock: ExecutorLock | None = None
    terminal: dict[str, Any] | None = None
    has_artifact_json: bool = False
    attempts: list[AttemptFiles] = field(default_factory=list)

    @property
    def name(self) -> str:
        return basename(parent(self.uri))


@dataclass
class RunLayout:
    run_uri: str
    kind: str  # "A" | "C"
    config_uri: str
    config_bytes: bytes
    config: dict[str, Any]  # the whole resolved config as written
    skyrl: dict[str, Any]  # the SkyRL part (== config for resolved-skyrl.json)
    temp_root: str | None
    checkpoints_root: str
    exports_root: str
    attempts: list[AttemptFiles]  # in chain order (started_at, then id)
    executor_status: str | None = None
    terminal: dict[str, Any] | None = None
    terminal_uri: str | None = None
    has_artifact_json: bool = False
    marker_step: int | None = None
    marker_uri: str | None = None
    checkpoint_steps: list[int] = field(default_factory=list)
    export_steps: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # non-fatal oddities found while discovering
    run_config: RunConfig | None = None
    config_root: str | None = None  # the step whose resolved config this is (a -training step for a 3-step run)
    attempts_root: str | None = None
    steps: list[StepState] = field(default_factory=list)  # Marin steps of the run, training first
    extra_roots: list[tuple[str, str]] = field(default_factory=list)  # (label, root) also captured
    lock: ExecutorLock | None = None

    @property
    def export_step(self) -> StepState | None:
        return next((s for s in self.steps if s.role is StepRole.export), None)

    @property
    def training_step(self) -> StepState | None:
        return next((s for s in self.steps if s.role is not StepRole.export), None)

    @property
    def config_sha256(self) -> str:
        return sha256_hex(self.config_bytes)

    def export_uri(self, step: int) -> str:
        return join(self.exports_root, f"global_step_{step}", "policy")

    def checkpoint_uri(self, step: int) -> str:
        return join(self.checkpoints_root, f"global_step_{step}")


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _read_json(storage: Storage, uri: str, max_bytes: int = 16 * 1024 * 1024) -> dict[str, Any] | None:
    if storage.stat(uri) is None:
        return None
    try:
        value = json.loads(storage.read_bytes(uri, max_bytes))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def read_executor_status(storage: Storage, uri: str) -> str | None:
    """One token, or legacy JSON lines `{"status": ...}` where the last line wins."""
    if storage.stat(uri) is None:
        return None
    return parse_executor_status(storage.read_bytes(uri, 1024 * 1024).decode("utf-8", errors="replace"))


def parse_executor_status(text: str) -> str | None:
    """The token of a `.executor_status` body (also what a storage notification's generation held)."""
    text = text.strip()
    status: str | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                value = json.loads(line).get("status")
            except (ValueError, AttributeError):
                continue
            if isinstance(value, str):
                status = value.strip().upper()
        else:
            status = line.split()[0].upper()
    return status


def read_marker(storage: Storage, uri: str) -> int | None:
    if storage.stat(uri) is None:
        return None
    text = storage.read_bytes(uri, 4096).decode("utf-8", errors="replace").strip()
    return parse_int(text)


def _step_dirs(storage: Storage, root: str) -> list[int]:
    """The N of every `global_step_<N>` child of root, from its children alone (ports.storage.child_names): the
    files inside a step (1,500 of a 500-rank checkpoint) are never listed by discovery."""
    steps: set[int] = set()
    for uri in child_names(storage, root):
        match = _STEP_DIR.match(basename(uri))
        if match:
            steps.add(int(match.group(1)))
    return sorted(steps)


def _find_config(storage: Storage, run_uri: str, names: tuple[str, ...]) -> str | None:
    for name in names:
        uri = join(run_uri, name)
        if storage.stat(uri) is not None:
            return uri
    return None


def _request_training_manifest(storage: Storage, step_root: str) -> str | None:
    """An export step's `request.training_manifest_uri` (terminal.json, else any durable attempt record)."""
    records = [_read_json(storage, join(step_root, "terminal.json")) or {}]
    for info in children(storage, join(step_root, "attempts"))[1]:  # objects only, as records are
        if info.uri.endswith(".json"):
            records.append(_read_json(storage, info.uri) or {})
    for record in records:
        uri = get(record, "request.training_manifest_uri")
        if isinstance(uri, str) and uri:
            return uri
    return None


def _join_steps(storage: Storage, run_uri: str) -> tuple[str, str | None, StepRole]:
    """(the step holding the resolved config, the export step or None, the config step's role).

    run-layout-v2.md §3: a 3-step run's `<name>-training`/`<name>-metrics` step and its export step `<name>` are one
    run; join (oc) by the export's `request.training_manifest_uri`, else by Marin's step naming.
    """
    role = marin.training_role(run_uri)
    if role is not None:
        export = marin.export_step_for(run_uri) if role is StepRole.training else None
        return run_uri, export if export and marin.step_exists(storage, export) else None, role
    manifest_dir = marin.manifest_uri_dir(_request_training_manifest(storage, run_uri))
    if manifest_dir is not None and _find_config(storage, manifest_dir, CONFIG_NAMES_A) is not None:
        return manifest_dir, run_uri, marin.training_role(manifest_dir) or StepRole.training
    if _find_config(storage, run_uri, CONFIG_NAMES_A + CONFIG_NAMES_C) is not None:
        return run_uri, None, StepRole.single
    for candidate in marin.training_steps_for(run_uri):
        if _find_config(storage, candidate, CONFIG_NAMES_A) is not None:
            return candidate, run_uri, marin.training_role(candidate) or StepRole.training
    return run_uri, None, StepRole.single


def discover(storage: Storage, run_uri: str) -> RunLayout:
    run_uri = run_uri.rstrip("/")
    config_root, export_root, role = _join_steps(storage, run_uri)
    config_uri = _find_config(storage, config_root, CONFIG_NAMES_A)
    kind = "A"
    if config_uri is None:
        config_uri = _find_config(storage, config_root, CONFIG_NAMES_C)
        kind = "C"
    if config_uri is None:
        looked = ", ".join(CONFIG_NAMES_A + CONFIG_NAMES_C)
        siblings = " or its -training/-metrics step" if export_root is None and role is StepRole.single else ""
        raise LayoutError(f"no resolved configuration under {run_uri}{siblings} (looked for {looked})")
    config_bytes = storage.read_bytes(config_uri, 16 * 1024 * 1024)
    try:
        config = parse_config(config_bytes, config_uri)
    except (ConfigError, UnicodeDecodeError) as exc:
        raise LayoutError(f"resolved configuration {config_uri} is unreadable: {exc}") from exc
    run_config = read_run_config(config)
    skyrl = run_config.skyrl
    if kind == "A" and storage.stat(join(config_root, "latest_ckpt_global_step.txt")) is not None:
        kind = "C"  # a Slurm run that happened to save a JSON config beside itself
    if kind == "C":
        layout = _discover_c(storage, run_uri, config_uri, config_bytes, config, skyrl)
        layout.run_config = run_config
        layout.problems.extend(run_config.problems)
        return layout
    return _discover_a(storage, run_uri, config_root, export_root, role, config_uri, config_bytes, config, run_config)


def _manifest_value(records: list[dict[str, Any]], *keys: str) -> str | None:
    for record in records:
        for key in keys:
            value = get(record, key)
            if isinstance(value, str) and value.strip():
                return value.strip().rstrip("/")
    return None


_NOT_ATTEMPTS = ("trajectories", "trace_jobs", "ray-logs")  # siblings of the attempt directories, not attempts


def _read_attempts(storage: Storage, attempts_root: str) -> list[AttemptFiles]:
    """The attempts under `attempts/`: `<id>.json` records and `<id>/logs/` prefixes, from children listings alone
    (one for the root, one per attempt directory). An attempt's log files are never listed here: a 500-rank run
    leaves thousands of them, and only the log scan (paged) and a pre-cancel capture read them."""
    by_id: dict[str, AttemptFiles] = {}
    directories, objects = children(storage, attempts_root)
    for info in objects:
        name = basename(info.uri)
        if name.endswith(".json"):
            attempt_id = name[: -len(".json")]
            att = by_id.setdefault(attempt_id, AttemptFiles(attempt_id=attempt_id))
            att.record_uri = info.uri
            att.record = _read_json(storage, info.uri) or {}
            att.started_at = parse_time(get(att.record, "execution.started_at"))
            att.ended_at = parse_time(get(att.record, "execution.ended_at") or get(att.record, "execution.finished_at"))
            att.created_at = info.updated
    for uri in directories:
        name = basename(uri)
        if name not in _NOT_ATTEMPTS:
            logs = join(uri, "logs")
            if logs in children(storage, uri)[0]:  # an attempt directory is a link only once it holds logs
                by_id.setdefault(name, AttemptFiles(attempt_id=name)).log_prefix = logs
    return order_attempts(list(by_id.values()))


def order_attempts(attempts: list[AttemptFiles]) -> list[AttemptFiles]:
    """run-layout-v2.md §2 (oc): `execution.started_at` when present, else Iris `submitted_at_ms`, else the record's
    creation time; each attempt remembers which one ordered it."""
    for att in attempts:
        submitted = get(att.record, "execution.submitted_at_ms") or get(att.record, "response.submitted_at_ms")
        if att.started_at is not None:
            att.order_key, att.order_source = att.started_at, "execution.started_at"
        elif isinstance(submitted, int | float) and not isinstance(submitted, bool) and submitted > 0:
            att.order_key = datetime.fromtimestamp(submitted / 1000, tz=UTC)
            att.order_source = "submitted_at_ms"
        elif att.created_at is not None:
            att.order_key, att.order_source = att.created_at, "record creation time"
    return sorted(attempts, key=lambda a: (a.order_key is None, _utc(a.order_key), a.attempt_id))


def _utc(value: datetime | None) -> datetime:
    if value is None:
        return datetime.min.replace(tzinfo=UTC)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _step_state(storage: Storage, role: StepRole, root: str) -> StepState:
    return StepState(
        role=role,
        uri=root,
        executor_status=read_executor_status(storage, join(root, ".executor_status")),
        lock=marin.read_lock(storage, root),
        terminal=_read_json(storage, join(root, "terminal.json")),
        has_artifact_json=storage.stat(join(root, ".artifact.json")) is not None,
    )


def _discover_a(
    storage: Storage,
    run_uri: str,
    config_root: str,
    export_root: str | None,
    role: StepRole,
    config_uri: str,
    config_bytes: bytes,
    config: dict[str, Any],
    run_config: RunConfig,
) -> RunLayout:
    skyrl = run_config.skyrl
    training = _step_state(storage, role, config_root)
    export = _step_state(storage, StepRole.export, export_root) if export_root else None
    terminal = training.terminal
    terminal_uri = join(config_root, "terminal.json")
    records = [r for r in (terminal, export.terminal if export else None) if r]
    problems: list[str] = list(run_config.problems)

    # Roots (run-layout-v2.md §1: from artifacts.* when present), then the resolved keys, then the manifests' paths,
    # then Marin's temp-area rule (§3) for a run whose config names no root at all.
    ckpt_path = get(skyrl, "trainer.ckpt_path")
    checkpoints_root = run_config.artifact_root("checkpoint_root")
    if checkpoints_root is None and isinstance(ckpt_path, str) and ckpt_path and not ckpt_path.startswith("$"):
        checkpoints_root = ckpt_path.rstrip("/")
    if checkpoints_root is None:
        checkpoints_root = _manifest_value(records, "request.output.checkpoint_root", "response.model.checkpoint_root")
        if checkpoints_root is None:
            checkpoint_path = _manifest_value(records, "response.training.checkpoint.checkpoint_path")
            checkpoints_root = parent(checkpoint_path) if checkpoint_path else None
    attempts_root = run_config.artifact_root("attempts_root") or _manifest_value(
        [r for r in (terminal,) if r], "request.output.attempts_root"
    )
    ttl = get(terminal or {}, "request.checkpoint_retention_days")
    temp_guess = marin.find_temp_root(storage, config_root, ttl if isinstance(ttl, int) and ttl > 0 else 14)
    if checkpoints_root is None:
        if temp_guess is not None:
            checkpoints_root = join(temp_guess, "checkpoints")
            problems.append(
                f"checkpoint root not named by the config or a manifest; found Marin's temp area {temp_guess} "
                "(run-layout-v2.md §3 T(n))"
            )
        else:
            checkpoints_root = join(config_root, "checkpoints")
            problems.append(
                "checkpoint root unknown (no artifacts.checkpoint_root, trainer.ckpt_path, manifest checkpoint_root "
                "or Marin temp area); tried R/checkpoints"
            )
    temp_root = parent(checkpoints_root) if basename(checkpoints_root) == "checkpoints" else temp_guess
    if attempts_root is None and temp_root is not None:
        attempts_root = join(temp_root, "attempts")

    if export is not None:
        exports_root = join(export.uri, "exports")  # §3: checkpoint mode exports only from the export step
    else:
        exports_root = run_config.artifact_root("export_root") or join(config_root, "exports")
    attempts = _read_attempts(storage, attempts_root) if attempts_root is not None else []
    training.attempts = attempts
    steps = [training]
    extra_roots: list[tuple[str, str]] = []
    if export is not None:
        export.attempts = _read_attempts(storage, join(export.uri, "attempts"))
        steps.append(export)
    for label, root in (("training-run", config_root), ("export-run", export_root)):
        if root is not None and root != run_uri:
            extra_roots.append((label, root))

    marker_uri = join(checkpoints_root, "latest_ckpt_global_step.txt")
    main = export if export is not None and run_uri == export.uri else training
    return RunLayout(
        run_uri=run_uri,
        kind="A",
        config_uri=config_uri,
        config_bytes=config_bytes,
        config=config,
        skyrl=skyrl,
        temp_root=temp_root,
        checkpoints_root=checkpoints_root,
        exports_root=exports_root,
        attempts=attempts,
        executor_status=training.executor_status,
        terminal=terminal,
        terminal_uri=terminal_uri if terminal is not None else None,
        has_artifact_json=training.has_artifact_json,
        marker_step=read_marker(storage, marker_uri),
        marker_uri=marker_uri,
        checkpoint_steps=_step_dirs(storage, checkpoints_root),
        export_steps=_step_dirs(storage, exports_root),
        problems=problems,
        run_config=run_config,
        config_root=config_root,
        attempts_root=attempts_root,
        steps=steps,
        extra_roots=extra_roots,
        lock=main.lock,
    )


def _discover_c(
    storage: Storage, run_uri: str, config_uri: str, config_bytes: bytes, config: dict[str, Any], skyrl: dict[str, Any]
) -> RunLayout:
    logs_root = join(run_uri, "logs")
    slurm_logs: list[tuple[str, str, ObjectInfo]] = []
    for obj in storage.list(logs_root):
        name = basename(obj.uri)
        match = _SLURM_LOG.match(name)
        if not match or "_rayw" in name or "_rayhead" in name:
            continue
        slurm_logs.append((match.group("job"), match.group("jobid"), obj))
    job_name, how, warning = _training_job_name(skyrl, config, [(job, jobid) for job, jobid, _ in slurm_logs])
    attempts: list[AttemptFiles] = []
    evidence_only: list[str] = []
    for job, jobid, obj in slurm_logs:
        if job_name is not None and job != job_name:
            evidence_only.append(basename(obj.uri))  # eval/export jobs: captured with logs/, never a chain link
            continue
        attempts.append(AttemptFiles(attempt_id=jobid, log_objects=[obj]))
    problems = [warning] if warning else []
    if evidence_only:
        problems.append(
            f"{len(evidence_only)} .out file(s) of other jobs ({', '.join(sorted(evidence_only)[:5])}) kept as "
            f"evidence, not chain links: the training job is {job_name!r} ({how})"
        )
    # Slurm job ids grow monotonically: chain order = id order.
    attempts.sort(key=lambda a: int(a.attempt_id))
    marker_uri = join(run_uri, "latest_ckpt_global_step.txt")
    return RunLayout(
        run_uri=run_uri,
        kind="C",
        config_uri=config_uri,
        config_bytes=config_bytes,
        config=config,
        skyrl=skyrl,
        temp_root=None,
        checkpoints_root=run_uri,
        exports_root=join(run_uri, "exports"),
        attempts=attempts,
        marker_step=read_marker(storage, marker_uri),
        marker_uri=marker_uri,
        checkpoint_steps=_step_dirs(storage, run_uri),
        export_steps=_step_dirs(storage, join(run_uri, "exports")),
        problems=problems,
    )


_JOB_NAME_KEYS = ("slurm.job_name", "job_name", "run.job_name", "launch.job_name")


def _training_job_name(
    skyrl: dict[str, Any], config: dict[str, Any], logs: list[tuple[str, str]]
) -> tuple[str | None, str, str | None]:
    """(the Slurm `<JobName>` of the training job, how it was decided, a warning for the record or None) from the
    (job name, job id) of each `.out` file (issue 14 item 7).

    1. The config's job name wins when some `.out` file carries it.
    2. Else the most frequent name: a chain of N links leaves N files of one name; an eval or export job adds its own.
    3. A tie (a 1-link run beside one eval job, two links beside two evals): the tied name whose first `.out` has the
       lowest Slurm job id. The training job is submitted first; eval and export jobs are submitted against the
       checkpoints it saves, so they come later. Ids are unique, so this always decides; the record warns.
    """
    jobs = [job for job, _ in logs]
    configured = [(key, v) for src in (config, skyrl) for key in _JOB_NAME_KEYS if isinstance(v := get(src, key), str)]
    for key, value in configured:
        if value in jobs:
            return value, f"config {key}", None
    note = f"config {configured[0][0]}={configured[0][1]!r} names no .out file in logs/; " if configured else ""
    if not jobs:
        return None, "no .out files", None
    counts: dict[str, int] = {}
    first_id: dict[str, int] = {}
    for job, jobid in logs:
        counts[job] = counts.get(job, 0) + 1
        first_id[job] = min(first_id.get(job, int(jobid)), int(jobid))
    best = max(counts.values())
    tied = sorted((j for j, n in counts.items() if n == best), key=lambda j: first_id[j])
    how = f"the most frequent <JobName> ({best} of {len(jobs)} .out files)"
    if len(tied) == 1:
        return tied[0], how, (note + f"the training job was taken as {tied[0]!r}, {how}") if note else None
    listed = ", ".join(f"{j!r} (first job id {first_id[j]})" for j in tied)
    how = f"a tie of {best} .out file(s) each between {listed}: the lowest first job id wins"
    return tied[0], how, f"{note}slurm job-name tie: {how} (the training job is submitted before its eval/export jobs)"
