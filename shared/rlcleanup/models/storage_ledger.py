"""The storage ledger's models (issue 40 item 1): what a run holds, by class, where, until when, at what cost.

Computed by `authority/storage_ledger.py` when the record completes, at a reclaim (before and after) and by
`rlcleanup storage --refresh`; the record keeps the latest ledger and the totals of every earlier one
(`storage_ledger_history`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

LEDGER_CLASSES = (
    "resume_checkpoints",  # the checkpoints a resume needs (latest committed + max_ckpts_to_keep)
    "checkpoints",  # older checkpoints the run still holds
    "exports",  # candidates' exported weights
    "export_staging",  # an export job's .tmp-hf-export-* / .old-hf-export-* directories
    "logs",
    "debug_artifacts",  # debug and termination artifacts (rendezvous debug_artifacts, exception receipts)
    "ray_spill",  # Ray object spilling under the run's roots
    "incomplete_uploads",  # S3 multipart uploads never completed (invisible to every listing)
    "preserved_evidence",  # what rlcleanup copied into the evidence store
    "published_copies",  # published or handed-off copies at their destinations
    "quarantine",  # what a reclaim moved aside, until its expiry
    "other",  # configs, markers, anything else under the run's roots
)


class LedgerClass(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="one of LEDGER_CLASSES")
    bytes: int = Field(default=0, ge=0)
    objects: int = Field(default=0, ge=0)
    where: list[str] = Field(default_factory=list, description="the prefixes holding them (at most 5)")
    expires_at: datetime | None = Field(default=None, description="the earliest expiry among them, if any")
    monthly_usd: float = Field(default=0.0, ge=0, description="list price of holding them for a month")


class LedgerTotals(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = Field(description="when it was measured: `before reclaim <grant>`, `after reclaim <grant>`, ...")
    measured_at: datetime
    bytes: int = 0
    objects: int = 0
    monthly_usd: float = 0.0


class StorageLedger(LedgerTotals):
    classes: list[LedgerClass] = Field(default_factory=list)
    listings: int = Field(default=0, description="listing calls it took to measure")
    prices: str = Field(default="", description="the price table used (source and date)")
