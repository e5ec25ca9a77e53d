"""Layout C, the legacy Slurm run: one directory holding the config, the checkpoints and `logs/`, where each
`<JobName>_<jobid>.out` is one attempt of the training job (other jobs' `.out` files are evidence only)."""

from __future__ import annotations

import re
from typing import Any

from rlcleanup.formats.config import get
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.steps.layout_files import read_marker, step_dirs
from rlcleanup.steps.layout_model import AttemptFiles, RunLayout
from rlcleanup.uris import basename, join

_SLURM_LOG = re.compile(r"^(?P<job>.+)_(?P<jobid>\d+)\.out$")


def discover_slurm(
    storage: Storage, run_uri: str, config_uri: str, config_bytes: bytes, config: dict[str, Any], skyrl: dict[str, Any]
) -> RunLayout:
    """Layout C: the attempts are the training job's `logs/<JobName>_<jobid>.out` files, in job-id order; the
    checkpoints, the marker and `exports/` sit in the run root itself."""
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
        checkpoint_steps=step_dirs(storage, run_uri),
        export_steps=step_dirs(storage, join(run_uri, "exports")),
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
