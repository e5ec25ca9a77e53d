"""The evidence manifest: every object in the preserved location, hashed, written once after the last file.

Two manifests, both write-once:
- the capture manifest (`_parts/capture-manifest.json`, written at the capture fan-in) merges the part manifests
  and the derived listings: what capture copied and from where. Validation and authority read it while the record
  is being finished.
- the sealed manifest (`manifest.json`) is written last, after the report exists (the end of `select-candidate`,
  or when a run's pipeline is marked failed): one listing of the preserved location, every object with its size,
  crc32c and md5, the capture's `source` and `kind` kept for the objects it copied. The manifests themselves are
  the only objects not listed (a file cannot hold its own hash). It also carries the capture's totals
  (`captured_object_count`, `captured_bytes`): the record's `preserved_object_count` / `preserved_bytes`, which
  count the evidence (copied objects and derived listings), stable from the capture fan-in on.

A replay seals identical bytes (`identical`). When a different sealed manifest already exists (the location
changed since it was sealed), the new one gets a content-addressed name (`manifest-<sha12>.json`) instead of
overwriting; the record's `manifest_uri` names the newest one either way.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from rlcleanup.models.record import PreservedObject
from rlcleanup.ports.storage import Storage, WriteOutcome
from rlcleanup.uris import join, relative_to

CAPTURE_MANIFEST = "_parts/capture-manifest.json"
SEALED_MANIFEST = "manifest.json"
# Every sealed manifest generation at the root of the preserved location: never listed in another one.
_MANIFEST_NAME = re.compile(r"manifest(-[0-9a-f]{12})?\.json")
_REPORT_NAME = re.compile(r"derived/(report|timeline)(-[0-9a-f]{12})?\.(md|html|png)")


@dataclass(frozen=True)
class SealedManifest:
    uri: str
    object_count: int
    total_bytes: int


def _uncaptured(rel: str) -> tuple[str, str]:
    """(source, kind) of an object the capture did not copy: the report, the pipeline's own bookkeeping, other
    derived files, or `unaccounted` (there, but not written by this run's capture: planted, or left earlier)."""
    if _REPORT_NAME.fullmatch(rel):
        return "derived", "report"
    if rel.startswith("_parts/"):
        return "derived", "pipeline"
    if rel.startswith("derived/"):
        return "derived", "derived"
    return "unknown", "unaccounted"


def _captured(storage: Storage, root: str) -> dict[str, PreservedObject]:
    """The capture manifest's objects by destination (empty when the capture never finished)."""
    uri = join(root, CAPTURE_MANIFEST)
    if storage.stat(uri) is None:
        return {}
    objects = json.loads(storage.read_bytes(uri)).get("objects", [])
    return {o["destination"]: PreservedObject.model_validate(o) for o in objects}


def manifest_body(storage: Storage, root: str, run_id: str) -> bytes:
    """The sealed manifest's bytes for the location as it is now: sorted, no timestamps (replays are identical)."""
    captured = _captured(storage, root)
    objects: list[PreservedObject] = []
    for info in storage.list(root):
        rel = relative_to(info.uri, root)
        if _MANIFEST_NAME.fullmatch(rel):
            continue
        known = captured.get(info.uri)
        source, kind = (known.source, known.kind) if known else _uncaptured(rel)
        objects.append(
            PreservedObject(
                source=source, destination=info.uri, size=info.size, crc32c=info.crc32c, md5=info.md5, kind=kind
            )
        )
    objects.sort(key=lambda o: o.destination)
    manifest = {
        "run_id": run_id,
        "preserved_root": root,
        "object_count": len(objects),
        "total_bytes": sum(o.size for o in objects),
        "objects": [o.model_dump() for o in objects],
        "captured_object_count": len(captured),
        "captured_bytes": sum(o.size for o in captured.values()),
        "not_listed": "the manifests themselves (manifest.json, manifest-<sha12>.json)",
    }
    return json.dumps(manifest, indent=1, sort_keys=True).encode()


def seal_manifest(storage: Storage, root: str, run_id: str) -> SealedManifest:
    """Write `manifest.json` (or `manifest-<sha12>.json` beside a different one) listing the location now."""
    body = manifest_body(storage, root, run_id)
    uri = join(root, SEALED_MANIFEST)
    if storage.write_if_absent(uri, body, "application/json") is WriteOutcome.conflict:
        uri = join(root, f"manifest-{hashlib.sha256(body).hexdigest()[:12]}.json")
        if storage.write_if_absent(uri, body, "application/json") is WriteOutcome.conflict:
            raise RuntimeError(f"{uri} exists with different content despite its content-addressed name")
    parsed = json.loads(body)
    return SealedManifest(uri=uri, object_count=parsed["object_count"], total_bytes=parsed["total_bytes"])
