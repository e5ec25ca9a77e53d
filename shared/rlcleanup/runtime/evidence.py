"""The last writes into a run's preserved location: the report, then the sealed manifest that lists it.

Run when a record is finished (`select-candidate`) and when a run's pipeline is marked failed, so every run
that preserved anything ends with a `manifest.json` listing (and hashing) every file there, the report included.
"""

from __future__ import annotations

import logging

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
