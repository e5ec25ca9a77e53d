"""Discover once: classification stores the run's layout, and every later hop reads it back with one GET.

`discover` reads the whole run's structure (configs, attempts and their logs, the step directories of the
checkpoints and exports: dozens of requests); before this, each hop of a 4-candidate run re-ran it (12
discoveries, 44 listings). The snapshot is the `RunLayout` itself as JSON,
stored write-once beside the evidence under a name that is the hash of its bytes
(`<preserved>/_parts/layout/<sha256[:32]>.json`), so a redelivered classification rewrites nothing and a re-run
that finds a changed run stores a new snapshot instead of conflicting with the old one.

What is *not* read from the snapshot (each says so where it happens): a candidate's own files (validation lists
the export directory it validates, because a grant later pins exactly those bytes), the controller-state files
the terminal state is settled from, the artifact a grant covers (listed and re-digested when it is applied) and
what reclaim deletes (re-discovered: a grant may come days later). Registration does read the snapshot: the
declaration it honours is the configuration the run was classified from.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict

from rlcleanup.errors import InvalidMessage
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.layout import RunLayout
from rlcleanup.uris import join

SNAPSHOT_DIR = ("_parts", "layout")


class LayoutSnapshot(BaseModel):
    # The resolved config's bytes are kept exactly (their SHA-256 is provenance): base64, not UTF-8 text.
    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64", frozen=True)

    layout: RunLayout


def snapshot_prefix(dest_root: str) -> str:
    return join(dest_root, *SNAPSHOT_DIR) + "/"


def save_layout(storage: Storage, dest_root: str, layout: RunLayout) -> str:
    """Store the layout write-once under its content hash; returns its URI (the same bytes give the same URI)."""
    data = LayoutSnapshot(layout=layout).model_dump_json().encode()
    uri = join(dest_root, *SNAPSHOT_DIR, f"{hashlib.sha256(data).hexdigest()[:32]}.json")
    storage.write_if_absent(uri, data, "application/json")
    return uri


def load_layout(storage: Storage, uri: str, *, dest_root: str, run_uri: str) -> RunLayout:
    """The stored layout of `run_uri`. The URI travels in our own messages, but a message never chooses where we
    read: it must name a snapshot under this run's preserved location, and the snapshot must be of this run."""
    if not uri.startswith(snapshot_prefix(dest_root)) or ".." in uri[len(dest_root) :]:
        raise InvalidMessage(f"layout snapshot {uri} is not under {snapshot_prefix(dest_root)}")
    layout = LayoutSnapshot.model_validate_json(storage.read_bytes(uri)).layout
    if layout.run_uri != run_uri:
        raise InvalidMessage(f"layout snapshot {uri} is of {layout.run_uri}, not {run_uri}")
    return layout
