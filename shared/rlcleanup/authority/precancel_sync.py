"""Pre-cancel waits for the run's last sync (issue 35 item 4; run-layout-v3.md §4).

Each node copies its debug directory to `<rendezvous>/debug_artifacts/<node_id>/` and writes `sync-manifest.json`
there last (`cloud/iris/task_runtime.py`@006eddc `sync_debug_artifacts`; parsing/debug_artifacts.py): `reason`
says why that sync ran: "periodic" for the timer, a signal ("signal 15 (head)") or the stall reason for the final
one. A cancel destroys whatever a node had not synced, so before the capture copies anything it waits, bounded by
RLCLEANUP_PRECANCEL_SYNC_WAIT_SECONDS, until every node's manifest is a final one; when the wait runs out the
capture says what was not synced (the nodes without a final manifest, and every file a manifest lists as copied but
absent or says it skipped), never that the evidence is complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rlcleanup.parsing.debug_artifacts import SYNC_MANIFEST_NAME, SyncManifest, read_sync_manifest
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.evidence_sources import SourceKind, evidence_sources, list_source, read_small
from rlcleanup.steps.layout_model import RunLayout
from rlcleanup.steps.sync_manifests import check_sync_manifests
from rlcleanup.uris import basename, relative_to

POLL_SECONDS = 5.0
PERIODIC = "periodic"


@dataclass
class SyncWait:
    final: bool | None  # None: the run has no rendezvous debug artifacts to wait for
    waited_seconds: float = 0.0
    not_synced: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def is_final(manifest: SyncManifest | None) -> bool:
    return manifest is not None and bool(manifest.reason) and not str(manifest.reason).startswith(PERIODIC)


def node_manifests(storage: Storage, layout: RunLayout, problems: list[str]) -> dict[str, SyncManifest | None]:
    """Per node directory under each rendezvous's `debug_artifacts/`: its sync manifest, None when it has none."""
    nodes: dict[str, SyncManifest | None] = {}
    for source in evidence_sources(layout):
        if source.kind is not SourceKind.failure_receipt:
            continue
        for info in list_source(storage, source, problems) or []:
            rel = relative_to(info.uri, source.prefix)
            if "/" not in rel:
                continue
            node = f"{source.prefix.rstrip('/')}/{rel.split('/', 1)[0]}"
            nodes.setdefault(node, None)
            if basename(info.uri) == SYNC_MANIFEST_NAME and rel.count("/") == 1:
                nodes[node] = read_small(storage, info.uri, read_sync_manifest, "sync manifest", problems)
    return nodes


def wait_for_final_sync(
    storage: Storage,
    layout: RunLayout,
    wait_seconds: float,
    *,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> SyncWait:
    """Poll until every node's manifest is final or `wait_seconds` pass; then what is still not synced."""
    start = monotonic()
    while True:
        problems: list[str] = []
        nodes = node_manifests(storage, layout, problems)
        if not nodes:
            return SyncWait(final=None, problems=problems)
        pending = sorted(n for n, m in nodes.items() if not is_final(m))
        elapsed = monotonic() - start
        if not pending or elapsed >= wait_seconds:
            break
        sleep(min(POLL_SECONDS, wait_seconds - elapsed))
    incomplete, more = check_sync_manifests(storage, layout)
    not_synced = [f"{n}: no final sync-manifest.json after {elapsed:.0f}s (last: {_last(nodes[n])})" for n in pending]
    not_synced += [f"{i.node_id}/{i.path}: {i.status} ({i.reason or 'no reason given'})" for i in incomplete]
    return SyncWait(
        final=not pending, waited_seconds=round(elapsed, 1), not_synced=not_synced, problems=problems + more
    )


def _last(manifest: SyncManifest | None) -> str:
    return "none" if manifest is None else f"reason {manifest.reason!r}"
