"""Discover once: the run's layout is discovered by classification and read back from its snapshot after that.

Classification (on-job-event) stores the `RunLayout` write-once beside the evidence
(`steps/layout_snapshot.py`) and names it in its own claim result, so a later hop finds it in our record store —
never in a message, which could otherwise choose where we read. One GET replaces a whole discovery (dozens of
listings). A run classified before snapshots existed is discovered again, as it was.
"""

from __future__ import annotations

from rlcleanup.models.plans import Classified
from rlcleanup.runtime import attempt_scope
from rlcleanup.runtime.attempt_scope import pass_id, scoped
from rlcleanup.runtime.ports import Ports
from rlcleanup.steps import capture as capture_step
from rlcleanup.steps.layout import RunLayout, discover
from rlcleanup.steps.layout_snapshot import load_layout, save_layout

CLASSIFY_KEY = attempt_scope.CLASSIFY_KEY  # the claim whose result names the snapshot


def snapshot_layout(p: Ports, run_id: str, preserve_root: str, layout: RunLayout, scope: str = "") -> dict[str, str]:
    """Store the layout; returns the fields classification keeps in its claim result."""
    dest_root = capture_step.preserved_root(preserve_root, run_id, pass_id(scope))
    return {"layout_uri": save_layout(p.storage, dest_root, layout), "dest_root": dest_root}


def run_layout(p: Ports, run_id: str, run_uri: str, scope: str = "") -> RunLayout:
    """The layout classification stored for this pass of the run (or a fresh discovery for a run classified
    without one)."""
    stored = p.claims.result_as(run_id, scoped(scope, CLASSIFY_KEY), Classified)
    uri, dest_root = (stored.layout_uri, stored.dest_root) if stored else (None, None)
    if uri is None or dest_root is None:
        return discover(p.storage, run_uri)
    return load_layout(p.storage, uri, dest_root=dest_root, run_uri=run_uri)
