"""What an export grant's job took, measured when a pass of the run finds the export it wrote (docs/authority.md §9).

The job is done when its step's candidate is a valid export again (the owed item closed). Its duration runs from
the grant's submission to the export's newest object (one listing of the export); the checkpoint's bytes the
preflight listed at submission over that duration is the throughput the next export grant of the run estimates
with (authority/export.py `_preflight`), instead of the deployment's stated default.
"""

from __future__ import annotations

from collections.abc import Iterable

from rlcleanup.models.export_jobs import ExportMeasurement
from rlcleanup.models.record import AuthorityAction, Candidate
from rlcleanup.ports.storage import Storage


def export_measurements(
    storage: Storage,
    candidates: Iterable[Candidate],
    actions: Iterable[AuthorityAction],
    known: Iterable[ExportMeasurement] = (),
) -> list[ExportMeasurement]:
    """The record's measurements: those found before (kept when the export is later reclaimed or the grant
    superseded), then each submitted job whose step now has a valid export, measured once."""
    measured = list(known)
    seen = {m.job_id for m in measured}
    valid = {c.step: c for c in candidates if c.valid}
    for action in actions:
        job, step = action.export_job, action.step
        if job is None or step is None or action.refusal is not None or job.job_id in seen or step not in valid:
            continue
        if job.submitted_at is None or job.checkpoint_bytes is None:
            continue  # submitted before jobs recorded when and how much: nothing to measure against
        export = valid[step].uri
        objects = list(storage.list(export))
        times = [t for o in objects for t in (o.updated or o.created,) if t is not None]
        if not times or max(times) <= job.submitted_at:
            continue  # the export is older than the job: it did not write it
        seconds = (max(times) - job.submitted_at).total_seconds()
        measured.append(
            ExportMeasurement(
                step=step,
                job_id=job.job_id,
                export_uri=export,
                export_bytes=sum(o.size for o in objects),
                checkpoint_bytes=job.checkpoint_bytes,
                seconds=seconds,
            )
        )
        seen.add(job.job_id)
    return measured


def measured_throughput(measurements: Iterable[ExportMeasurement]) -> float | None:
    """Bytes per second over every measured export of the run (total bytes over total time), or None."""
    found = [m for m in measurements if m.checkpoint_bytes > 0]
    if not found:
        return None
    return sum(m.checkpoint_bytes for m in found) / sum(m.seconds for m in found)
