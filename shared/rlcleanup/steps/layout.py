"""Discover a run's layout (A: Marin executor step, also Layout D's `users/<user>/skyrl/<job>` roots, named by either
root (steps/layout_d.py); C: legacy Slurm) from its durable root.

Everything later steps read is located here once, so they never guess paths themselves. What it finds is
steps/layout_model.py's (RunLayout, AttemptFiles: importable from here too, as most callers do); the small files it
reads, steps/layout_files.py's; Layout C (Slurm), steps/layout_slurm.py's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rlcleanup.formats.config import ConfigError, get, parse_config
from rlcleanup.formats.launch import RunConfig, read_run_config
from rlcleanup.ports.storage import Storage, children
from rlcleanup.steps import layout_d, marin
from rlcleanup.steps.evidence_sources import attach_scan_prefixes
from rlcleanup.steps.layout_files import (
    committed_steps,
    export_request_steps,
    parse_executor_status,
    parse_time,
    read_executor_status,
    read_json,
    read_marker,
    step_dirs,
)
from rlcleanup.steps.layout_model import AttemptFiles, LayoutError, RunLayout, StepState
from rlcleanup.steps.layout_rendezvous import find_evidence_roots
from rlcleanup.steps.layout_slurm import discover_slurm
from rlcleanup.steps.marin import StepRole
from rlcleanup.uris import basename, join, parent

# The names most callers import from here (the Slurm and file-reading halves live in their own modules).
__all__ = [
    "CONFIG_NAMES_A",
    "CONFIG_NAMES_C",
    "AttemptFiles",
    "LayoutError",
    "RunLayout",
    "StepState",
    "discover",
    "parse_executor_status",
]

# resolved-launch.yaml is what a launch.yaml run leaves in R (run-layout-v2.md §3, 1-step); launch.yaml the source.
CONFIG_NAMES_A = ("resolved-skyrl.json", "resolved-launch.yaml", "launch.yaml", "launch.yml")
CONFIG_NAMES_C = ("resolved_config.yaml", "resolved_config.yml", "resolved_config.json")


def _find_config(storage: Storage, run_uri: str, names: tuple[str, ...]) -> str | None:
    for name in names:
        uri = join(run_uri, name)
        if storage.stat(uri) is not None:
            return uri
    return None


def _request_training_manifest(storage: Storage, step_root: str) -> str | None:
    """An export step's `request.training_manifest_uri` (terminal.json, else any durable attempt record)."""
    records = [read_json(storage, join(step_root, "terminal.json")) or {}]
    for info in children(storage, join(step_root, "attempts"))[1]:  # objects only, as records are
        if info.uri.endswith(".json"):
            records.append(read_json(storage, info.uri) or {})
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
    layout = _discover_run(storage, run_uri)
    layout.export_request_steps = export_request_steps(storage, layout.checkpoints_root, layout.checkpoint_steps)
    return layout


def _discover_run(storage: Storage, run_uri: str) -> RunLayout:
    run_uri = run_uri.rstrip("/")
    durable = layout_d.durable_root_of(run_uri)
    if durable is not None and _find_config(storage, durable, CONFIG_NAMES_A) is not None:
        run_uri = durable  # Layout D named by its temp root: the run is read from its durable root, as always
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
        layout = discover_slurm(storage, run_uri, config_uri, config_bytes, config, skyrl)
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
            att.record = read_json(storage, info.uri) or {}
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
        terminal=read_json(storage, join(root, "terminal.json")),
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
    temp_guess = layout_d.find_temp_root(storage, config_root)
    temp_rule = "the storage policy's temp root (Layout D in docs/run-layouts.md)"
    if temp_guess is None:
        days = ttl if isinstance(ttl, int) and ttl > 0 else 14
        temp_guess = marin.find_temp_root(storage, config_root, days)
        temp_rule = 'Marin\'s temp area (docs/run-layouts.md, "Marin steps")'
    if checkpoints_root is None:
        if temp_guess is not None:
            checkpoints_root = join(temp_guess, "checkpoints")
            problems.append(f"checkpoint root not named by the config or a manifest; found {temp_rule}: {temp_guess}")
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
    marker_step, checkpoint_steps = read_marker(storage, marker_uri), step_dirs(storage, checkpoints_root)
    unfinished, committed = committed_steps(
        storage, checkpoints_root, marker_step, checkpoint_steps, get(skyrl, "trainer.strategy")
    )
    main = export if export is not None and run_uri == export.uri else training
    layout = RunLayout(
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
        marker_step=marker_step,
        marker_uri=marker_uri,
        unfinished_save=unfinished,
        committed_before=committed if unfinished is not None else None,
        checkpoint_steps=checkpoint_steps,
        export_steps=step_dirs(storage, exports_root),
        problems=problems,
        run_config=run_config,
        config_root=config_root,
        attempts_root=attempts_root,
        steps=steps,
        extra_roots=extra_roots,
        lock=main.lock,
    )
    # run-layout-v3.md §4: the rendezvous evidence the run's files name, accepted only if it is this run's.
    layout.evidence_roots, refused = find_evidence_roots(storage, layout)
    layout.problems.extend(refused)
    attach_scan_prefixes(layout)
    return layout
