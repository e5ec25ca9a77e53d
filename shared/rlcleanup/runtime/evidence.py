"""The last writes into a run's preserved location: the report, then the sealed manifest that lists it.

Run when a record is finished (`select-candidate`) and when a run's pipeline is marked failed, so every run
that preserved anything ends with a `manifest.json` listing (and hashing) every file there, the report included.
"""

from __future__ import annotations

import logging

from rlcleanup.models.vocab import RecordStatus
from rlcleanup.report.publish import publish_report
from rlcleanup.runtime.ports import Ports
from rlcleanup.steps.manifest import SEALED_MANIFEST, seal_manifest
from rlcleanup.uris import join

log = logging.getLogger(__name__)


def finish_evidence(p: Ports, run_id: str, *, with_report: bool = True) -> str | None:
    """Write the report (naming the manifest that will list it), then seal; returns the manifest's URI."""
    record = p.records.get(run_id)
    if record is None or not record.preserved_locations:
        return None  # nothing was preserved: no location to list
    root = record.preserved_locations[0]
    if with_report:
        publish_report(p.storage, p.records, run_id, manifest_uri=join(root, SEALED_MANIFEST))  # never raises
    sealed = seal_manifest(p.storage, root, run_id)
    p.records.update(run_id, {"manifest_uri": sealed.uri})
    return sealed.uri


def refresh_report(p: Ports, run_id: str) -> None:
    """Every change of a finished record (a grant used, refused or waiting; a deadline) re-renders its report, so
    the report never says what the record no longer does. Evidence is write-once: the new report is written as
    `report-<sha12>.html` beside the earlier ones (identical bytes: nothing new), named by the record's
    `report_uri`, and a new sealed manifest lists it. Never raises: the record is the truth, and a report that
    could not be written is recorded on the run by `publish_report`."""
    record = p.records.get(run_id)
    if record is None or record.status is RecordStatus.in_progress or not record.preserved_locations:
        return  # the pipeline writes the first report when it finishes the record
    if not record.manifest_uri or "/_parts/" in record.manifest_uri:
        return  # the evidence was never sealed (the pipeline has not finished it): nothing to re-render yet
    try:
        root = record.preserved_locations[0]
        publish_report(p.storage, p.records, run_id)  # names the record's manifest: the new one is sealed after it
        sealed = seal_manifest(p.storage, root, run_id)
        p.records.update(run_id, {"manifest_uri": sealed.uri})
    except Exception:
        log.exception("report for %s not refreshed", run_id, extra={"run_id": run_id})
