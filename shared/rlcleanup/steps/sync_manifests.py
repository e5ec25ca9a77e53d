"""Is the rendezvous evidence complete? Each node's `sync-manifest.json` against what its directory holds.

`cloud/iris/task_runtime.py`@006eddc `sync_debug_artifacts` copies a node's debug directory to
`<rendezvous>/debug_artifacts/<node_id>/` and writes `sync-manifest.json` there last (parsing/debug_artifacts.py
has the format). A file it lists as copied that the directory does not hold (the sync was cut short, the object
expired or was deleted) and a file it says it skipped (over the per-file or per-node budget, or an upload that
raised) are evidence known to be incomplete: the record lists each, never silently ignores it.
"""

from __future__ import annotations

from rlcleanup.models.record import IncompleteEvidence
from rlcleanup.parsing.debug_artifacts import SYNC_MANIFEST_NAME, read_sync_manifest
from rlcleanup.ports.storage import Storage, StorageError
from rlcleanup.steps.evidence_sources import SourceKind, evidence_sources
from rlcleanup.steps.layout_model import RunLayout
from rlcleanup.uris import basename, join, parent

MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_INCOMPLETE = 500  # entries on the record (Firestore's 1 MiB document); the count past it is an error line


def check_sync_manifests(storage: Storage, layout: RunLayout) -> tuple[list[IncompleteEvidence], list[str]]:
    """(incomplete evidence, problems) over every rendezvous of the run."""
    incomplete: list[IncompleteEvidence] = []
    problems: list[str] = []
    for source in evidence_sources(layout):
        if source.kind is not SourceKind.failure_receipt:  # the debug_artifacts/ prefix of a rendezvous
            continue
        try:
            present = {info.uri for info in storage.list(source.prefix)}
        except (StorageError, OSError) as exc:
            problems.append(f"debug artifacts under {source.prefix} could not be listed: {exc}")
            continue
        for manifest_uri in sorted(u for u in present if basename(u) == SYNC_MANIFEST_NAME):
            node_dir = parent(manifest_uri)
            try:
                manifest = read_sync_manifest(storage.read_bytes(manifest_uri, MAX_MANIFEST_BYTES))
            except (StorageError, OSError, ValueError) as exc:
                problems.append(f"sync manifest {manifest_uri} could not be read: {exc}")
                continue
            if manifest is None:
                problems.append(f"sync manifest {manifest_uri} is not a sync manifest")
                continue
            node = manifest.node_id or basename(node_dir)
            for copied in manifest.copied:
                if join(node_dir, copied.path) not in present:  # a membership test: the path is never read
                    incomplete.append(
                        IncompleteEvidence(
                            node_id=node,
                            manifest_uri=manifest_uri,
                            path=copied.path,
                            status="missing",
                            reason=f"listed as copied ({manifest.reason or 'no sync reason'}) but absent",
                            bytes=copied.bytes,
                        )
                    )
            for skipped in manifest.skipped:
                incomplete.append(
                    IncompleteEvidence(
                        node_id=node,
                        manifest_uri=manifest_uri,
                        path=skipped.path,
                        status="skipped",
                        reason=skipped.reason,
                        bytes=skipped.bytes,
                    )
                )
    if len(incomplete) > MAX_INCOMPLETE:
        problems.append(f"{len(incomplete) - MAX_INCOMPLETE} more incomplete debug artifacts not listed on the record")
    return incomplete[:MAX_INCOMPLETE], problems
