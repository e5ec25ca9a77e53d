"""The storage ledger on every surface that shows a record (issue 40 item 1): `show`'s lines and the report's
section, both from the record's `storage_ledger` alone (kept apart from build.py and cli/render.py so other changes
to those files merge cleanly)."""

from __future__ import annotations

from rlcleanup.models.record import CompletionRecord
from rlcleanup.report.document import Para, Section, Table


def ledger_lines(record: CompletionRecord) -> list[str]:
    """The ledger in words, for `show`: totals, then each class, largest first, then the earlier totals."""
    ledger = record.storage_ledger
    if ledger is None:
        return [f"storage        {record.storage_ledger_note}"] if record.storage_ledger_note else []
    lines = [
        f"storage        {ledger.bytes} bytes in {ledger.objects} objects, ${ledger.monthly_usd:.4f}/month at list "
        f"prices ({ledger.label}, {ledger.measured_at.isoformat(timespec='seconds')})"
    ]
    for c in ledger.classes:
        expiry = f", expires {c.expires_at.isoformat(timespec='seconds')}" if c.expires_at else ""
        lines.append(f"  - {c.name}: {c.bytes} B, {c.objects} objects, ${c.monthly_usd:.4f}/month{expiry}")
    lines += [f"  earlier: {h.label}: {h.bytes} B, {h.objects} objects" for h in record.storage_ledger_history[-4:]]
    return lines


def storage_section(record: CompletionRecord) -> Section | None:
    """The report's "Storage" section: one row per class, and the totals before and after each reclaim."""
    ledger = record.storage_ledger
    if ledger is None:
        note = record.storage_ledger_note
        return Section("Storage", "storage", [Para(f"Storage {note}.")]) if note else None
    rows = [
        [c.name, str(c.bytes), str(c.objects), f"{c.monthly_usd:.4f}", ", ".join(c.where),
         c.expires_at.isoformat(timespec="seconds") if c.expires_at else "—"]
        for c in ledger.classes
    ]  # fmt: skip
    # The latest row says "latest", not its time: a redelivered or replayed completion measures again, and the
    # report (write-once beside the evidence) must come out byte-identical when the figures are.
    history = [[h.label, h.measured_at.isoformat(timespec="seconds"), str(h.bytes), str(h.objects)]
               for h in record.storage_ledger_history]  # fmt: skip
    history.append([ledger.label, "latest", str(ledger.bytes), str(ledger.objects)])
    return Section(
        "Storage",
        "storage",
        [
            Para(
                f"{ledger.bytes} bytes in {ledger.objects} objects, ${ledger.monthly_usd:.4f} a month at list prices "
                f"({ledger.prices}); measured {ledger.label}."
            ),
            Table(["class", "bytes", "objects", "USD/month", "where", "expires"], rows),
            Table(["measured", "at", "bytes", "objects"], history),
        ],
    )
