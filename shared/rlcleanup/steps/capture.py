"""Step 3: capture the whole chain into `<preserve_root>/<run_id>/`, write-once, with a capture manifest.

Split into plan / copy-part / finalize so the runtime can fan out one message per part while the embedded
pipeline runs the same three calls in a row. Weights and optimizer shards are listed (size + checksums),
never copied: evidence is the small stuff that lifecycle rules would delete.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from rlcleanup.formats.weight_files import is_bulk_weight
from rlcleanup.models.parts import CaptureItem, CapturePart
from rlcleanup.models.record import PreservedObject
from rlcleanup.ports.storage import ObjectInfo, Storage, UnsafePathError, WriteOutcome, list_in_name_order
from rlcleanup.steps.evidence_sources import capture_roots as evidence_capture_roots
from rlcleanup.steps.expiry import earliest, expires_at, merge_by_class, ttl_days
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.manifest import CAPTURE_MANIFEST, dumps_indented
from rlcleanup.uris import join, relative_to

MAX_PART_ITEMS = 200
# Copies in flight per part. A new object's copy is 2 requests in a row (stat the destination, rewrite), so with a
# round trip of R a worker does ~1/(2R) copies/s: at 25 ms one way (bench/bench_capture.py, latency_proxy) 8
# workers reached 7-8x a sequential loop, 16 reached 10-11x, 32 and 64 no more (fake-gcs-server serializes
# rewrites and the 2 shared cores saturate). Up to 4 concurrent deliveries x 16 fit the 64-connection pool.
COPY_WORKERS = 16

# Derived files written before the capture manifest (plan: listings; terminal state: metrics, launch command). Files
# put in derived/ later (the report) are listed by the sealed manifest (steps/manifest.py), never by this one, so a
# replay of the capture fan-in writes identical bytes.
MANIFEST_DERIVED = ("checkpoints-listing.jsonl", "exports-listing.jsonl", "metrics.jsonl", "launch_command.txt")

# Evidence classes a standard run does not have; their absence is recorded, never reported as missing.
NOT_APPLICABLE_FOR_STANDARD = [
    "trials (per-trial outputs under trace_jobs/)",
    "per-trial rewards",
    "verifier outcomes",
    "sandbox records",
    "agent trajectories / trace evidence",
]


class CapturePlan(BaseModel):
    run_id: str
    dest_root: str
    parts: list[CapturePart]
    listed_weights: int = 0
    errors: list[str] = []
    # Per evidence class (CaptureItem.kind), the earliest expiry of what this plan copies from temp storage.
    expiry_by_class: dict[str, datetime] = {}


@dataclass
class PartResult:
    part_id: str
    objects: list[PreservedObject] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def preserved_root(preserve_root: str, run_id: str, pass_id: str = "") -> str:
    """Where a run's evidence goes; a later end of the run (a resubmitted step) gets its own `passes/<id>/`, so
    each pass's copies, scans and manifest stay consistent (write-once objects are never overwritten)."""
    return join(preserve_root, run_id, "passes", pass_id) if pass_id else join(preserve_root, run_id)


def _kind(rel: str) -> str:
    if "/logs/" in f"/{rel}" or rel.endswith((".log", ".out", ".err")):
        return "log"
    if rel.startswith(("checkpoints/", "global_step_")):
        return "checkpoint_metadata"
    if rel.startswith("exports/"):
        return "export_metadata"
    if rel.startswith("attempts/"):
        return "attempt_record"
    return "run_record"


def _object_kind(uri: str, rel: str, layout: RunLayout) -> str:
    """An object under a rendezvous or Ray-log root (wherever that lies: Layout D keeps it in the temp root) is
    `rendezvous_evidence`: receipts, stacks, flight recorder, sync manifests, Ray logs, termination artifacts."""
    if any(uri.startswith(root.uri.rstrip("/") + "/") for root in layout.evidence_roots):
        return "rendezvous_evidence"
    return _kind(rel)


def _chunks(part_id: str, items: list[CaptureItem]) -> list[CapturePart]:
    return [
        CapturePart(part_id=f"{part_id}-{i // MAX_PART_ITEMS}", items=items[i : i + MAX_PART_ITEMS])
        for i in range(0, len(items), MAX_PART_ITEMS)
    ]


def _known_areas(layout: RunLayout, label: str, root: str) -> list[str]:
    """The files and prefixes under `root` that the layout names: the fallback when a whole listing is refused."""
    if label == "temp":
        return [join(root, "attempts"), join(root, "checkpoints")]
    names = [".executor_status", ".executor_info", ".artifact.json", "terminal.json", "exports", "logs"]
    names += ["latest_ckpt_global_step.txt"] + [f"global_step_{s}" for s in layout.checkpoint_steps]
    return [layout.config_uri] + [join(root, name) for name in names]


def _list_root_from(
    storage: Storage, layout: RunLayout, label: str, root: str, after: str | None, errors: list[str]
) -> Iterator[ObjectInfo]:
    """The objects under root in name order after `after`. One refused object (a symlink) costs only its own
    area, never the whole root: the layout's known areas are listed instead (from the refusal on)."""
    last = after
    try:
        for listed in list_in_name_order(storage, root, after):
            last = listed.uri
            yield listed
        return
    except UnsafePathError as exc:
        errors.append(f"unsafe_path: {exc}")
    objects: list[ObjectInfo] = []
    for area in _known_areas(layout, label, root):
        try:
            info = storage.stat(area)
            objects.extend([info] if info is not None else storage.list(area))
        except UnsafePathError as exc:
            if f"unsafe_path: {exc}" not in errors:
                errors.append(f"unsafe_path: {exc}")
    unique = {o.uri: o for o in objects if last is None or o.uri > last}
    yield from (unique[uri] for uri in sorted(unique))


class PageCursor(BaseModel):
    """Where a paged capture plan resumes: the index of a capture root and the last object listed in it."""

    root: int
    after: str


class CapturePage(CapturePlan):
    """One page of a capture plan: at most a page's worth of listed objects, and where the next page resumes."""

    page: int = 0
    listed: int = 0
    next: PageCursor | None = None


LISTING_NAMES = ("checkpoints", "exports")


def capture_roots(layout: RunLayout) -> list[tuple[str, str]]:
    """(label, root) of everything a capture lists, in a fixed order (a paged plan's cursor indexes it): roots on
    temp storage first, the shortest TTL first (their objects die first; pages are listed in this order)."""
    roots = [("run", layout.run_uri)]
    if layout.temp_root is not None:
        roots.append(("temp", layout.temp_root))
    elif not layout.checkpoints_root.startswith(layout.run_uri):
        roots.append(("checkpoints", layout.checkpoints_root))
    roots.extend(layout.extra_roots)  # run-layout-v2.md §3: both steps of a multi-step Marin run are evidence
    roots.extend(evidence_capture_roots(layout))  # v3 §4: rendezvous and Ray-log roots (a cursor indexes)
    return _soonest_dying_first(roots)


def _soonest_dying_first(roots: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Roots under `tmp/ttl=<N>d/` first, shortest N first, the rest in their order. Only when no root moves past
    one it nests with: which root an object is planned from (its `dest_rel` label) must not change."""
    ordered = sorted(roots, key=lambda lr: (ttl_days(lr[1]) is None, ttl_days(lr[1]) or 0))
    position = {root: i for i, root in enumerate(ordered)}
    for i, a in enumerate(roots):
        for b in roots[i + 1 :]:
            nested = _nests(a[1], b[1])
            if nested and position[a] > position[b]:
                return roots
    return ordered


def _nests(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def plan_capture(
    storage: Storage, layout: RunLayout, run_id: str, preserve_root: str, pass_id: str = ""
) -> CapturePlan:
    """List every evidence object; weights go to listings only. Also writes the listings themselves (one page
    without a limit: the bench and direct callers; the pipeline pages with plan_capture_page)."""
    return plan_capture_page(storage, layout, run_id, preserve_root, pass_id, page=0, cursor=None, limit=None)


def plan_capture_page(
    storage: Storage,
    layout: RunLayout,
    run_id: str,
    preserve_root: str,
    pass_id: str = "",
    *,
    page: int,
    cursor: PageCursor | None,
    limit: int | None,
) -> CapturePage:
    """One page of the capture plan: objects in name order from `cursor`, at most `limit` of them (None: all).

    Work per invocation stays bounded however large the run: a page lists `limit` objects (resumed on the
    server after the cursor's name, ports.storage.ListsAfter) and plans their parts. Page 0 of a one-page plan
    writes the listings and names its parts as an unpaged plan always did; a longer plan's pages write listing
    pages (derived/pages/) that merge_listings joins once the last page is planned, and prefix their part ids
    with the page (`p3-attempt-a1-0`), so no two pages name the same part."""
    dest_root = preserved_root(preserve_root, run_id, pass_id)
    groups: dict[str, list[CaptureItem]] = {}
    listings: dict[str, list[ObjectInfo]] = {name: [] for name in LISTING_NAMES}
    errors: list[str] = []
    roots = capture_roots(layout)
    seen: set[str] = set()
    listed = 0
    next_cursor: PageCursor | None = None
    for index, obj in _objects_from(storage, layout, roots, cursor, errors):
        if limit is not None and listed >= limit:
            break  # the page is full: the next page resumes after next_cursor
        listed += 1
        next_cursor = PageCursor(root=index, after=obj.uri)
        if obj.uri in seen or _under_earlier_root(obj.uri, roots[:index]):
            continue  # roots can nest (a temp area inside the run): each object is planned once
        seen.add(obj.uri)
        label, root = roots[index]
        _plan_object(obj, label, root, layout, groups, listings, errors)
    else:
        next_cursor = None  # every root listed to its end
    prefix = f"p{page}-" if page else ""
    parts = [part for group, items in _soonest_groups(groups) for part in _chunks(f"{prefix}{group}", items)]
    expiry_by_class = merge_by_class(
        *({item.kind: item.expires_at} for part in parts for item in part.items if item.expires_at is not None)
    )
    one_page = page == 0 and next_cursor is None
    for name, objs in listings.items():
        lines = "".join(_listing_line(o) for o in objs)
        rel = f"{name}-listing.jsonl" if one_page else f"pages/{name}-listing.{page:05d}.jsonl"
        outcome = storage.write_if_absent(join(dest_root, "derived", rel), lines.encode())
        if outcome is WriteOutcome.conflict:
            errors.append(f"write_once_conflict: derived/{rel} differs from an earlier capture")
    listed_weights = sum(1 for objs in listings.values() for o in objs if is_bulk_weight(o.uri))
    return CapturePage(
        run_id=run_id,
        dest_root=dest_root,
        parts=parts,
        listed_weights=listed_weights,
        errors=errors,
        expiry_by_class=expiry_by_class,
        page=page,
        listed=listed,
        next=next_cursor,
    )


def _soonest_groups(groups: dict[str, list[CaptureItem]]) -> list[tuple[str, list[CaptureItem]]]:
    """The page's groups, the one holding the soonest-dying object first (durable ones last, by name), each with
    its soonest-dying items first, so the parts that carry them are published, and copied, first. Part ids keep
    naming their group and chunk: which objects a part holds is fixed by the listing, whatever the order."""
    never = datetime.max.replace(tzinfo=UTC)

    def dies(item: CaptureItem) -> tuple[datetime, str]:
        return (item.expires_at or never, item.source)

    ordered = {group: sorted(items, key=dies) for group, items in groups.items()}
    return sorted(ordered.items(), key=lambda gi: (earliest(i.expires_at for i in gi[1]) or never, gi[0]))


def _objects_from(
    storage: Storage, layout: RunLayout, roots: list[tuple[str, str]], cursor: PageCursor | None, errors: list[str]
) -> Iterator[tuple[int, ObjectInfo]]:
    """(root index, object) of every root in turn, in name order, from the cursor on."""
    for index in range(cursor.root if cursor is not None else 0, len(roots)):
        label, root = roots[index]
        after = cursor.after if cursor is not None and index == cursor.root else None
        for obj in _list_root_from(storage, layout, label, root, after, errors):
            yield index, obj


def merge_listings(storage: Storage, dest_root: str, pages: int) -> list[str]:
    """Join a paged plan's listing pages into the listings an unpaged plan writes (write-once). Listing lines are
    small (one per object, ~150 bytes), so this reads ~1.5 MB for a 10,000-object run; errors, never raised."""
    errors: list[str] = []
    for name in LISTING_NAMES:
        data = b"".join(
            storage.read_bytes(join(dest_root, "derived", f"pages/{name}-listing.{page:05d}.jsonl"))
            for page in range(pages)
        )
        outcome = storage.write_if_absent(join(dest_root, "derived", f"{name}-listing.jsonl"), data)
        if outcome is WriteOutcome.conflict:
            errors.append(f"write_once_conflict: derived/{name}-listing.jsonl differs from an earlier capture")
    return errors


def _listing_line(o: ObjectInfo) -> str:
    return json.dumps({"uri": o.uri, "size": o.size, "crc32c": o.crc32c, "md5": o.md5}, sort_keys=True) + "\n"


def _under_earlier_root(uri: str, earlier: list[tuple[str, str]]) -> bool:
    return any(uri.startswith(root.rstrip("/") + "/") for _, root in earlier)


def _plan_object(
    obj: ObjectInfo,
    label: str,
    root: str,
    layout: RunLayout,
    groups: dict[str, list[CaptureItem]],
    listings: dict[str, list[ObjectInfo]],
    errors: list[str],
) -> None:
    try:
        rel = relative_to(obj.uri, root)
    except UnsafePathError as exc:
        errors.append(f"unsafe_path: {exc}")
        return
    if rel.startswith("attempts/trajectories/") or rel.startswith("attempts/trace_jobs/"):
        return  # agentic-only outputs; a standard run has none worth copying
    if rel.startswith("exports/"):
        listings["exports"].append(obj)
    elif obj.uri.startswith(layout.checkpoints_root.rstrip("/") + "/"):
        listings["checkpoints"].append(obj)
    if is_bulk_weight(obj.uri):
        return
    item = CaptureItem(
        source=obj.uri,
        dest_rel=f"{label}/{rel}",
        size=obj.size,
        crc32c=obj.crc32c,
        md5=obj.md5,
        kind=_object_kind(obj.uri, rel, layout),
        expires_at=expires_at(obj),
    )
    group = f"attempt-{rel.split('/')[1]}" if rel.startswith("attempts/") and rel.count("/") >= 2 else label
    groups.setdefault(group, []).append(item)


def _copy_one(storage: Storage, dest_root: str, item: CaptureItem) -> tuple[CaptureItem, WriteOutcome | None]:
    try:
        return item, storage.copy_if_absent(item.source, join(dest_root, item.dest_rel))
    except FileNotFoundError:
        return item, None


def copy_part(storage: Storage, dest_root: str, part: CapturePart, *, workers: int = COPY_WORKERS) -> PartResult:
    """Copy one slice (server-side on GCS) with a bounded pool; never overwrite different content."""
    result = copy_items(storage, dest_root, part.part_id, part.items, workers=workers)
    write_part_manifest(storage, dest_root, result)
    return result


def copy_items(
    storage: Storage, dest_root: str, part_id: str, items: list[CaptureItem], *, workers: int = COPY_WORKERS
) -> PartResult:
    """Copy these items of a part (all of them inline; one task's slice in the large-copy job)."""
    result = PartResult(part_id=part_id)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for item, outcome in pool.map(lambda it: _copy_one(storage, dest_root, it), items):
            dest = join(dest_root, item.dest_rel)
            if outcome is None:
                result.missing.append(item.source)
            elif outcome is WriteOutcome.conflict:
                result.conflicts.append(dest)
            else:
                result.objects.append(
                    PreservedObject(
                        source=item.source,
                        destination=dest,
                        size=item.size,
                        crc32c=item.crc32c,
                        md5=item.md5,
                        kind=item.kind,
                    )
                )
    return result


def write_part_manifest(storage: Storage, dest_root: str, result: PartResult) -> None:
    """The part's own manifest lands beside the evidence, so fan-in never needs big documents."""
    part_doc = json.dumps([o.model_dump() for o in result.objects], sort_keys=True).encode()
    storage.write_if_absent(join(dest_root, "_parts", f"{result.part_id}.json"), part_doc, "application/json")


def write_derived(storage: Storage, dest_root: str, name: str, data: bytes) -> tuple[str, WriteOutcome]:
    uri = join(dest_root, "derived", name)
    return uri, storage.write_if_absent(uri, data)


def _read_part(storage: Storage, dest_root: str, part_id: str) -> list[dict[str, Any]]:
    """A part manifest's objects, each validated as a PreservedObject and kept as its plain dump (a run of 100,000
    objects held a model and a dump of each at once: capture-part's fan-in grew 322 MiB, bench_many_files.py)."""
    raw = storage.read_bytes(join(dest_root, "_parts", f"{part_id}.json"))
    return [PreservedObject.model_validate(o).model_dump() for o in json.loads(raw)]


@dataclass
class CaptureSummary:
    manifest_uri: str
    object_count: int
    total_bytes: int
    errors: list[str]


def finalize_capture(storage: Storage, dest_root: str, run_id: str, part_ids: Iterable[str]) -> CaptureSummary:
    """Merge part manifests and derived files into the capture manifest (sorted, no timestamps: replays are
    identical). The sealed `manifest.json` is written later, after the report (steps/manifest.py)."""
    objects: list[dict[str, Any]] = []
    for part_id in part_ids:
        objects.extend(_read_part(storage, dest_root, part_id))
    for name in MANIFEST_DERIVED:
        obj = storage.stat(join(dest_root, "derived", name))
        if obj is not None:
            objects.append(
                PreservedObject(
                    source="derived", destination=obj.uri, size=obj.size, crc32c=obj.crc32c, md5=obj.md5, kind="derived"
                ).model_dump()
            )
    objects.sort(key=lambda o: str(o["destination"]))
    total_bytes = sum(int(o["size"]) for o in objects)
    manifest = {
        "run_id": run_id,
        "preserved_root": dest_root,
        "object_count": len(objects),
        "total_bytes": total_bytes,
        "objects": objects,
    }
    uri = join(dest_root, CAPTURE_MANIFEST)
    outcome = storage.write_if_absent(uri, dumps_indented(manifest, "objects"), "application/json")
    errors = []
    if outcome is WriteOutcome.conflict:
        errors.append(
            f"write_once_conflict: {uri} exists with different content (the run changed since it was captured)"
        )
    return CaptureSummary(manifest_uri=uri, object_count=len(objects), total_bytes=total_bytes, errors=errors)
