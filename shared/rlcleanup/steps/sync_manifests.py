"""Is the rendezvous evidence complete? Each node's `sync-manifest.json` against what its directory holds.

`cloud/iris/task_runtime.py`@006eddc `sync_debug_artifacts` copies a node's debug directory to
`<rendezvous>/debug_artifacts/<node_id>/` and writes `sync-manifest.json` there last (parsing/debug_artifacts.py
has the format). A file it lists as copied that the directory does not hold (the sync was cut short, the object
expired or was deleted) and a file it says it skipped (over the per-file or per-node budget, or an upload that
raised) are evidence known to be incomplete: the record lists each, never silently ignores it.
"""

from __future__ import annotations

from rlcleanup.models.record import IncompleteEvidence
from rlcleanup.parsing.debug_artifacts import SYNC_MANIFEST_NAME, SyncedFile, SyncManifest, read_sync_manifest
from rlcleanup.ports.storage import Storage, UnsafePathError
from rlcleanup.steps.evidence_sources import SourceKind, evidence_sources, list_source, read_small
from rlcleanup.steps.layout_model import RunLayout
from rlcleanup.uris import basename, join, parent

MAX_INCOMPLETE = 500  # entries on the record (Firestore's 1 MiB document); the count past it is an error line


def check_sync_manifests(storage: Storage, layout: RunLayout) -> tuple[list[IncompleteEvidence], list[str]]:
    """(incomplete evidence, problems) over every rendezvous of the run."""
    incomplete: list[IncompleteEvidence] = []
    problems: list[str] = []
    for source in evidence_sources(layout):
        if source.kind is not SourceKind.failure_receipt:  # the debug_artifacts/ prefix of a rendezvous
            continue
        listed = list_source(storage, source, problems)
        present = {info.uri for info in listed or []}
        for manifest_uri in sorted(u for u in present if basename(u) == SYNC_MANIFEST_NAME):
            manifest = read_small(storage, manifest_uri, read_sync_manifest, "sync manifest", problems)
            if manifest is not None:
                incomplete.extend(_incomplete(manifest_uri, manifest, present, problems))
    if len(incomplete) > MAX_INCOMPLETE:
        problems.append(f"{len(incomplete) - MAX_INCOMPLETE} more incomplete debug artifacts not listed on the record")
    return incomplete[:MAX_INCOMPLETE], problems


def _inside(node_dir: str, path: str) -> str | None:
    """The object a manifest's path names under its node directory; None when the path would leave it (absolute,
    `..`, NUL): the run's writer chose it, and nothing outside the node's directory is ever named as its evidence."""
    try:
        return join(node_dir, path)
    except UnsafePathError:
        return None


def _incomplete(
    manifest_uri: str, manifest: SyncManifest, present: set[str], problems: list[str]
) -> list[IncompleteEvidence]:
    node_dir = parent(manifest_uri)
    copied_reason = f"listed as copied ({manifest.reason or 'no sync reason'}) but absent"
    outside = sorted({f.path for f in (*manifest.copied, *manifest.skipped) if _inside(node_dir, f.path) is None})
    if outside:
        shown = ", ".join(repr(p[:200]) for p in outside[:5]) + (
            f" (+{len(outside) - 5} more)" if len(outside) > 5 else ""
        )
        problems.append(f"sync manifest {manifest_uri} names paths outside its node directory, refused: {shown}")
    # A membership test on the listing: a path the manifest names is never read.
    entries: list[tuple[SyncedFile, str, str | None]]
    entries = [
        (f, "missing", copied_reason)
        for f in manifest.copied
        if f.path not in outside and _inside(node_dir, f.path) not in present
    ]
    entries += [(f, "skipped", f.reason) for f in manifest.skipped if f.path not in outside]
    node = manifest.node_id or basename(node_dir)
    return [
        IncompleteEvidence(
            node_id=node, manifest_uri=manifest_uri, path=f.path, status=status, reason=why, bytes=f.bytes
        )
        for f, status, why in entries
    ]
