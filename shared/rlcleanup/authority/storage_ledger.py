"""The storage ledger per run (issue 40 item 1): bytes and object counts by class, where each lives, its expiry,
and a monthly cost at list prices.

What is listed: the record's roots (`run_uri`, `temp_root`: the roots classification checked), its preserved
locations, the destinations of its publishes and hand-offs (object stores and local paths; a Hub repo is not
storage the run pays for here), its quarantine (`<bucket>/<prefix>/<run>/`), and, where the backend has them,
the incomplete multipart uploads under the run's roots (`ports.storage.ListsIncompleteUploads`). Each object goes
to one class (models/storage_ledger.LEDGER_CLASSES); the resume checkpoints are the retention plan's
(authority/retention.py). Expiry is `steps/expiry.expires_at` (a `tmp/ttl=<N>d/` root), or the quarantine's.

Not counted: rlcleanup's own rendered outputs in the preserved location (`manifest*.json`, `derived/report*.md`,
`derived/report*.html`, `derived/timeline*.png`: `steps/manifest.written_by_rlcleanup`, the names the sealed manifest
knows them by; a few KB re-rendered as the record changes). Counting them would make
the ledger measured at completion depend on whether an earlier delivery (or an earlier pass onto the same preserved
root) had written them yet: the ledger is of what the run holds, and the same run gives the same ledger.

Prices: each store's list price per GiB-month of standard storage, as its backend declares it in the storage
registry (`SchemeFacts.price`, adapters/storage_registry.py); the figure is an estimate of holding the bytes, not a
bill (no free tier, no discounts, no operations). A store that declares no price, or a scheme no backend serves, is
refused `unpriced_scheme` (the record's `storage_ledger_note` says so), never priced as another store.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rlcleanup.authority import quarantine, retention
from rlcleanup.errors import PermanentError
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.storage_ledger import LEDGER_CLASSES, LedgerClass, LedgerTotals, StorageLedger
from rlcleanup.ports.hub import is_hub
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import ListsIncompleteUploads, ObjectInfo, Storage, scheme_facts
from rlcleanup.settings import QuarantineSettings, read
from rlcleanup.steps.expiry import expires_at
from rlcleanup.steps.manifest import written_by_rlcleanup
from rlcleanup.uris import scheme, strip_file_scheme

HISTORY_KEPT = 50  # the record holds at most this many earlier totals

_LOGS = re.compile(r"/logs?/|\.log$|\.log\.\d+$|/stdout|/stderr")
_DEBUG = re.compile(r"/debug_artifacts/|/debug/|/outcomes/|termination|\.exception\.json$|/crash|/core\.")


class Prices:
    """The list prices of the stores one measurement holds bytes in, as each backend declares them; remembers
    which it used, for the ledger's `prices`."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.used: dict[str, str] = {}  # scheme -> the price's source

    def monthly_usd(self, uri: str, size: int) -> float:
        """The list price of holding `size` bytes at `uri` for a month. A store without a declared price (or a
        scheme no backend serves) is refused (`unpriced_scheme`), never estimated at another store's price."""
        price = scheme_facts(self.storage, uri).price
        if price is None:
            raise PermanentError(
                "unpriced_scheme",
                f"no list price for scheme {scheme(uri)!r} ({uri[:200]}): its storage backend declares none",
            )
        self.used.setdefault(scheme(uri), price.source)
        return size / 2**30 * price.usd_per_gib_month

    def source(self) -> str:
        """The prices used, per scheme, each with its source and date (the ledger's `prices`, quoted by the report
        as "... a month at list prices (<this>)")."""
        listed = "; ".join(f"{name}: {source}" for name, source in sorted(self.used.items()))
        return listed or "no store held any bytes"


@dataclass
class _Acc:
    bytes: int = 0
    objects: int = 0
    where: set[str] = field(default_factory=set)
    expires: datetime | None = None
    usd: float = 0.0

    def add(self, where: str, size: int, usd: float, expiry: datetime | None) -> None:
        self.bytes += size
        self.objects += 1
        self.usd += usd
        if len(self.where) < 5:
            self.where.add(where)
        if expiry is not None and (self.expires is None or expiry < self.expires):
            self.expires = expiry


class LedgerTooLarge(Exception):
    """The run holds more objects than the pass may list (`measure(max_objects=...)`): not measured inline."""


class _Counting:
    """Counts the listing calls the ledger makes (the bench's figure), and stops past `max_objects` objects."""

    def __init__(self, storage: Storage, max_objects: int | None = None) -> None:
        self.storage = storage
        self.listings = 0
        self.objects = 0
        self.max_objects = max_objects

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self.listings += 1
        for info in self.storage.list(prefix):
            self.objects += 1
            if self.max_objects is not None and self.objects > self.max_objects:
                raise LedgerTooLarge(f"more than {self.max_objects} objects under the run's roots")
            yield info


def _under(path: str, root: str) -> bool:
    root = strip_file_scheme(root).rstrip("/")
    return path == root or path.startswith(root + "/")


def _own_output(uri: str, location: str) -> bool:
    """rlcleanup's own rendered report or sealed manifest in a preserved location (not counted: module docstring)."""
    path, root = strip_file_scheme(uri), strip_file_scheme(location).rstrip("/")
    return path.startswith(root + "/") and written_by_rlcleanup(path[len(root) + 1 :])


def classify(info: ObjectInfo, record: CompletionRecord, plan: retention.RetentionPlan) -> str:
    """One object of the run's roots → its ledger class."""
    path = strip_file_scheme(info.uri)
    if any(_under(path, p) for p in record.preserved_locations):
        return "preserved_evidence"
    if retention.STAGING.search(path):
        return "export_staging"
    if retention.RAY_SPILL.search(path):
        return "ray_spill"
    step_of_export = next(
        (c.step for c in record.candidates if _under(path, c.uri.rstrip("/").removesuffix("/policy"))), None
    )
    if step_of_export is not None:
        return "exports"
    if _DEBUG.search(path):
        return "debug_artifacts"
    if _LOGS.search(path):
        return "logs"
    found = re.findall(r"/global_step_(\d+)/", path)
    if found:
        return "resume_checkpoints" if int(found[-1]) in plan.resume_steps else "checkpoints"
    return "other"


def measure(  # noqa: C901 -- one pass over the ledger's root kinds (run, preserved, destinations, quarantine, uploads)
    storage: Storage,
    record: CompletionRecord,
    label: str,
    now: datetime,
    *,
    max_objects: int | None = None,
    quarantine_settings: QuarantineSettings | None = None,
) -> StorageLedger:
    """List what the run holds now and sum it by class: one listing per root, none per object. With
    `max_objects`, LedgerTooLarge once the listings pass that many objects (a bounded pass)."""
    counting = _Counting(storage, max_objects)
    prices = Prices(storage)
    settings = quarantine_settings or read(QuarantineSettings)  # the deployment's (cold start), else read now
    acc = {name: _Acc() for name in LEDGER_CLASSES}
    seen: set[str] = set()

    def add(cls: str, info: ObjectInfo, where: str, expiry: datetime | None) -> None:
        if info.uri in seen:
            return
        seen.add(info.uri)
        acc[cls].add(where, info.size, prices.monthly_usd(info.uri, info.size), expiry)

    listed: dict[str, ObjectInfo] = {}
    roots = [record.run_uri, *([record.temp_root] if record.temp_root else [])]
    for root in roots:
        for o in counting.list(root):
            listed.setdefault(o.uri, o)
    run_objects = list(listed.values())
    declared = retention.declared_max_ckpts(storage, record)  # one read of the resolved config, hash-checked
    plan = retention.make_retention(record, retention.checkpoint_steps(run_objects, record), declared)
    for info in run_objects:
        cls = classify(info, record, plan)
        add(cls, info, next(r for r in roots if _under(strip_file_scheme(info.uri), r)), expires_at(info))
    for location in record.preserved_locations:
        for info in counting.list(location):
            if _own_output(info.uri, location):
                continue
            add("preserved_evidence", info, location, expires_at(info))
    for dest in sorted({a.destination for a in record.authority_actions if a.state in {"published", "handed_off"}
                        and a.destination and not is_hub(a.destination)}):  # fmt: skip
        for info in counting.list(dest):
            add("published_copies", info, dest, None)
    for root in sorted({quarantine.quarantine_root(r, record.run_uri, settings) for r in roots}):
        held = f"{root}/{record.run_id}"
        for info in counting.list(held):
            born = info.created or info.updated
            add("quarantine", info, held, born + timedelta(days=settings.days) if born else None)
    if isinstance(storage, ListsIncompleteUploads):
        for root in roots:
            for upload in storage.incomplete_uploads(root):
                if upload.key_uri in seen:
                    continue
                usd = prices.monthly_usd(upload.key_uri, upload.bytes)
                acc["incomplete_uploads"].add(root, upload.bytes, usd, None)
    classes = [
        LedgerClass(
            name=name,
            bytes=a.bytes,
            objects=a.objects,
            where=sorted(a.where),
            expires_at=a.expires,
            monthly_usd=round(a.usd, 6),
        )
        for name, a in acc.items()
        if a.objects
    ]
    return StorageLedger(
        label=label,
        measured_at=now,
        bytes=sum(c.bytes for c in classes),
        objects=sum(c.objects for c in classes),
        monthly_usd=round(sum(c.monthly_usd for c in classes), 6),
        classes=sorted(classes, key=lambda c: -c.bytes),
        listings=counting.listings,
        prices=prices.source(),
    )


def _same_measure(a: StorageLedger, b: StorageLedger) -> bool:
    """The same label and the same figures: a redelivered measurement, not a new one."""
    return a.model_dump(exclude={"measured_at"}) == b.model_dump(exclude={"measured_at"})


def record_ledger(records: RunRecords, run_id: str, ledger: StorageLedger) -> StorageLedger:
    """Put `ledger` (a `measure`) on the record as the latest and return it; the one it replaces joins the history
    as totals. A measurement equal to the latest (same label, same figures: a redelivery) changes nothing, so the
    record stays as it was."""
    record = records.get(run_id)
    if record is None or (record.storage_ledger is not None and _same_measure(record.storage_ledger, ledger)):
        return ledger
    uploads = next(
        (c for c in ledger.classes if c.name == "incomplete_uploads"), LedgerClass(name="incomplete_uploads")
    )
    history = list(record.storage_ledger_history)
    if record.storage_ledger is not None:
        history.append(LedgerTotals.model_validate(record.storage_ledger.model_dump(exclude={"classes", "listings",
                                                                                              "prices"})))  # fmt: skip
    records.update(
        run_id,
        {
            "storage_ledger": ledger.model_dump(mode="json"),
            "storage_ledger_note": None,  # measured now: an earlier "not measured" no longer holds
            "storage_bytes": ledger.bytes,
            "storage_monthly_usd": ledger.monthly_usd,
            "incomplete_uploads": uploads.objects,
            "incomplete_upload_bytes": uploads.bytes,
            "storage_ledger_history": [h.model_dump(mode="json") for h in history[-HISTORY_KEPT:]],
        },
    )
    return ledger
