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
import io
import json
import re
from dataclasses import dataclass

from rlcleanup.ports.storage import Storage, WriteOutcome
from rlcleanup.uris import join, relative_to

CAPTURE_MANIFEST = "_parts/capture-manifest.json"
SEALED_MANIFEST = "manifest.json"
# Every sealed manifest generation at the root of the preserved location: never listed in another one.
_MANIFEST_NAME = re.compile(r"manifest(-[0-9a-f]{12})?\.json")
# What report/publish.py writes: report.md, report.html and timeline.png, or their content-addressed re-renders.
_REPORT_NAME = re.compile(r"derived/(report(-[0-9a-f]{12})?\.(md|html)|timeline(-[0-9a-f]{12})?\.png)")


@dataclass(frozen=True)
class SealedManifest:
    uri: str
    object_count: int
    total_bytes: int


def written_by_rlcleanup(rel: str) -> bool:
    """A sealed manifest or the rendered report, by its path relative to the preserved location: rlcleanup's own
    outputs there, re-written as the record changes (the storage ledger leaves them out)."""
    return bool(_MANIFEST_NAME.fullmatch(rel) or _REPORT_NAME.fullmatch(rel))


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


@dataclass(frozen=True)
class _Capture:
    """What the capture manifest says, reduced to what sealing needs: (source, kind) by destination, and totals."""

    origin: dict[str, tuple[str, str]]
    count: int
    total_bytes: int


def _captured(storage: Storage, root: str) -> _Capture:
    """The capture manifest's objects (empty when the capture never finished). Plain tuples, not models: a run of
    100,000 objects held two pydantic models per object here and select-candidate peaked 544 MiB above its base
    (bench/bench_many_files.py), past its 512 MiB cap."""
    uri = join(root, CAPTURE_MANIFEST)
    if storage.stat(uri) is None:
        return _Capture({}, 0, 0)
    objects = json.loads(storage.read_bytes(uri)).get("objects", [])
    origin = {o["destination"]: (str(o["source"]), str(o.get("kind", "object"))) for o in objects}
    return _Capture(origin, len(objects), sum(int(o["size"]) for o in objects))


def _manifest(storage: Storage, root: str, run_id: str) -> tuple[bytes, int, int]:
    """(sealed manifest bytes, object count, total bytes) for the location as it is now: sorted, no timestamps
    (replays are identical). Each entry is a PreservedObject's fields as plain values (same bytes, a fraction of
    the memory)."""
    captured = _captured(storage, root)
    objects: list[dict[str, object]] = []
    total = 0
    for info in storage.list(root):
        rel = relative_to(info.uri, root)
        if _MANIFEST_NAME.fullmatch(rel):
            continue
        known = captured.origin.get(info.uri)
        source, kind = known if known else _uncaptured(rel)
        objects.append(
            {"source": source, "destination": info.uri, "size": info.size, "crc32c": info.crc32c, "md5": info.md5,
             "kind": kind}
        )  # fmt: skip
        total += info.size
    objects.sort(key=lambda o: str(o["destination"]))
    count = len(objects)
    manifest = {
        "run_id": run_id,
        "preserved_root": root,
        "object_count": count,
        "total_bytes": total,
        "objects": objects,
        "captured_object_count": captured.count,
        "captured_bytes": captured.total_bytes,
        "not_listed": "the manifests themselves (manifest.json, manifest-<sha12>.json)",
    }
    return dumps_indented(manifest, "objects"), count, total


_SCALARS = (str, int, float, bool, type(None))


def _entry_lines(entry: object) -> list[str]:
    """The lines of `json.dumps(entry, indent=1, sort_keys=True)`; a flat dict of scalars (every manifest entry)
    without the pure-Python indenting encoder: each key and value goes through the C encoder on its own."""
    if isinstance(entry, dict) and entry and all(isinstance(v, _SCALARS) for v in entry.values()):
        pairs = [f" {json.dumps(key)}: {json.dumps(entry[key])}" for key in sorted(entry)]
        return ["{", *[p + "," for p in pairs[:-1]], pairs[-1], "}"]
    return json.dumps(entry, indent=1, sort_keys=True).split("\n")


_SLOT = "\x00rlcleanup-list-slot\x00"  # a string no manifest holds (NUL is refused in every URI we list)


def dumps_indented(document: dict[str, object], list_key: str) -> bytes:
    """`json.dumps(document, indent=1, sort_keys=True).encode()`, byte for byte, with the long list under
    `list_key` written one entry at a time. json.dumps with an indent runs the pure-Python encoder and joins
    millions of small chunks at once: at 100,000 objects that held hundreds of MiB and most of select-candidate's
    time. The equality is tested (tests/unit/test_manifest_bytes.py)."""
    entries = document[list_key]
    assert isinstance(entries, list)
    head = json.dumps({**document, list_key: _SLOT}, indent=1, sort_keys=True)
    slot = json.dumps(_SLOT)
    before, _, after = head.partition(slot)
    out = io.BytesIO()
    out.write(before.encode())
    if not entries:
        out.write(b"[]")
    else:
        out.write(b"[\n")
        for i, entry in enumerate(entries):
            if i:
                out.write(b",\n")
            # The list is at depth 1, so each entry's lines are indented by 2 more spaces than on their own.
            out.write("\n".join("  " + line for line in _entry_lines(entry)).encode())
        out.write(b"\n ]")
    out.write(after.encode())
    return out.getvalue()


def seal_manifest(storage: Storage, root: str, run_id: str) -> SealedManifest:
    """Write `manifest.json` (or `manifest-<sha12>.json` beside a different one) listing the location now."""
    body, count, total = _manifest(storage, root, run_id)
    uri = join(root, SEALED_MANIFEST)
    if storage.write_if_absent(uri, body, "application/json") is WriteOutcome.conflict:
        uri = join(root, f"manifest-{hashlib.sha256(body).hexdigest()[:12]}.json")
        if storage.write_if_absent(uri, body, "application/json") is WriteOutcome.conflict:
            raise RuntimeError(f"{uri} exists with different content despite its content-addressed name")
    return SealedManifest(uri=uri, object_count=count, total_bytes=total)
