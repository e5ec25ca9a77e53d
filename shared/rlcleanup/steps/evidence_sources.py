"""A run's sources of evidence, in the order they are trusted: the one list the cause finder and capture read.

Order (run-layout-v3.md §4, issue 34 item 3):
  1. failure receipts `<rendezvous>/debug_artifacts/<node>/outcomes/*.exception.json`: the failing process's own
     record of its first causal error, written before native teardown can mask it;
  2. the attempt's own logs (the Iris/driver log and its siblings);
  3. kubelet-rotated pod logs under the attempt's logs (`0.log.<stamp>[.gz]`, CRI records);
  4. the ranks' Ray logs copied out of the pods (`<rendezvous>/ray_session_logs/<node>/<session>/`, or the
     durable Ray-log root of task_runtime.py@006eddc);
  5. termination artifacts `<rendezvous>/term_artifacts/*.txt` (df, nvidia-smi, the dmesg OOM-killer tail).
Receipts are read whole at the terminal step (`read_receipts`); 2-5 are logs, scanned by the log-scan parts
(`attach_scan_prefixes` hands each attempt the prefixes of its sources); capture preserves every root
(`capture_roots`), so what a cause cites is always in the evidence. `source_kind` names the source a file came
from: the record says which source decided (`FailureCause.evidence_source`).

The roots themselves come from steps/layout_rendezvous.py, which accepts a location only when it is this run's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from typing import TypeVar

from rlcleanup.parsing.attempt_logs import RANK_LOG_SEGMENT, TERMINATION_SEGMENT
from rlcleanup.parsing.debug_artifacts import (
    MAX_RECEIPT_BYTES,
    ExceptionReceipt,
    is_exception_receipt,
    read_exception_receipt,
)
from rlcleanup.parsing.log_scanner import ErrorCandidate
from rlcleanup.parsing.pod_logs import is_rotated_log
from rlcleanup.ports.storage import ObjectInfo, Storage, StorageError
from rlcleanup.steps.layout_model import RunLayout
from rlcleanup.uris import basename, join

MAX_RECEIPT_OBJECTS = 2000  # receipts read under one rendezvous's debug_artifacts/
MAX_ARTIFACT_BYTES = MAX_RECEIPT_BYTES  # a receipt or a sync manifest: small JSON documents
T = TypeVar("T")


class SourceKind(StrEnum):
    failure_receipt = "failure_receipt"
    driver_log = "driver_log"
    rotated_pod_log = "rotated_pod_log"
    rank_log = "rank_log"
    termination_artifact = "termination_artifact"
    # A failed Marin export step's attempt record: its `response.failure` is the export's own caught error, kept
    # only as text (steps/first_cause.py `export_failure_candidate`); read only when no log states a cause.
    attempt_record = "attempt_record"


TRUST_ORDER = tuple(SourceKind)  # the declaration order above is the trust order


@dataclass(frozen=True)
class EvidenceSource:
    kind: SourceKind
    prefix: str
    attempt_id: str | None

    @property
    def trust(self) -> int:
        return TRUST_ORDER.index(self.kind)


def evidence_sources(layout: RunLayout) -> list[EvidenceSource]:
    """Every source of the run, most trusted first (then in attempt order)."""
    sources: list[EvidenceSource] = []
    for attempt in layout.attempts:
        if attempt.log_prefix is not None:
            sources.append(EvidenceSource(SourceKind.driver_log, attempt.log_prefix, attempt.attempt_id))
    for root in layout.evidence_roots:
        if root.kind == "rendezvous":
            sources.append(
                EvidenceSource(SourceKind.failure_receipt, join(root.uri, "debug_artifacts"), root.attempt_id)
            )
            sources.append(EvidenceSource(SourceKind.rank_log, join(root.uri, "ray_session_logs"), root.attempt_id))
            sources.append(
                EvidenceSource(SourceKind.termination_artifact, join(root.uri, "term_artifacts"), root.attempt_id)
            )
        else:
            sources.append(EvidenceSource(SourceKind.rank_log, root.uri, root.attempt_id))
    return sorted(sources, key=lambda s: s.trust)


def _logs_attempt(layout: RunLayout, attempt_id: str | None) -> str | None:
    """The attempt whose scan a source joins: its own, else the chain's last (a run-wide rendezvous)."""
    ids = [a.attempt_id for a in layout.attempts]
    if attempt_id in ids:
        return attempt_id
    return ids[-1] if ids else None


def attach_scan_prefixes(layout: RunLayout) -> None:
    """Give each attempt the prefixes of its log sources beyond its own logs, so the log scan reads them."""
    by_id = {a.attempt_id: a for a in layout.attempts}
    for source in evidence_sources(layout):
        if source.kind in (SourceKind.rank_log, SourceKind.termination_artifact):
            owner = _logs_attempt(layout, source.attempt_id)
            attempt = by_id.get(owner) if owner is not None else None
            if (
                attempt is not None
                and attempt.log_prefix is not None
                and source.prefix not in attempt.evidence_prefixes
            ):
                attempt.evidence_prefixes.append(source.prefix)


def capture_roots(layout: RunLayout) -> list[tuple[str, str]]:
    """(label, root) of every evidence root, for capture: a rendezvous directory whole (receipts, stacks, flight
    recorder, sync manifests, Ray logs, termination artifacts), a durable Ray-log root whole."""
    roots: list[tuple[str, str]] = []
    for index, root in enumerate(layout.evidence_roots):
        label = "rendezvous" if root.kind == "rendezvous" else "ray-logs"
        roots.append((f"{label}-{index}" if index else label, root.uri))
    return roots


def source_kind(uri: str, layout: RunLayout) -> SourceKind:
    """Which source a file a cause cites belongs to."""
    if is_exception_receipt(uri):
        return SourceKind.failure_receipt
    if TERMINATION_SEGMENT in uri:
        return SourceKind.termination_artifact
    ray_roots = [r.uri for r in layout.evidence_roots if r.kind != "rendezvous"]
    if (RANK_LOG_SEGMENT in uri and f"/logs{RANK_LOG_SEGMENT}" not in uri) or any(
        uri.startswith(root + "/") for root in ray_roots
    ):
        return SourceKind.rank_log
    if is_rotated_log(basename(uri)):
        return SourceKind.rotated_pod_log
    return SourceKind.driver_log


@dataclass(frozen=True)
class FoundReceipt:
    receipt: ExceptionReceipt
    attempt_id: str | None  # the attempt whose rendezvous held it


def list_source(storage: Storage, source: EvidenceSource, problems: list[str]) -> list[ObjectInfo] | None:
    """The objects under a source's prefix (None, and a problem line, when it cannot be listed)."""
    try:
        return sorted(storage.list(source.prefix), key=lambda o: o.uri)
    except (StorageError, OSError) as exc:
        problems.append(f"{source.kind.value} objects under {source.prefix} could not be listed: {exc}")
        return None


def read_small(
    storage: Storage, uri: str, parse: Callable[[bytes], T | None], what: str, problems: list[str]
) -> T | None:
    """One small JSON artifact of a source, parsed; a problem line when it cannot be read or is not what it says."""
    try:
        value = parse(storage.read_bytes(uri, MAX_ARTIFACT_BYTES))
    except (StorageError, OSError, ValueError) as exc:
        problems.append(f"{what} {uri} could not be read: {exc}")
        return None
    if value is None:
        problems.append(f"{what} {uri} is not a {what}")
    return value


def read_receipts(storage: Storage, layout: RunLayout) -> tuple[list[FoundReceipt], list[str]]:
    """Every failure receipt of the run (earliest observed first), and a problem per one that could not be read."""
    receipts: list[FoundReceipt] = []
    problems: list[str] = []
    for source in evidence_sources(layout):
        if source.kind is not SourceKind.failure_receipt:
            continue
        listed = list_source(storage, source, problems) or []
        for info in [o for o in listed if is_exception_receipt(o.uri)][:MAX_RECEIPT_OBJECTS]:
            parse = partial(read_exception_receipt, info.uri)
            receipt = read_small(storage, info.uri, parse, "failure receipt", problems)
            if receipt is not None:
                receipts.append(FoundReceipt(receipt, source.attempt_id))
    receipts.sort(key=lambda f: (f.receipt.observed_at_ns is None, f.receipt.observed_at_ns or 0, f.receipt.uri))
    return receipts, problems


def receipt_candidate(found: FoundReceipt, layout: RunLayout) -> ErrorCandidate:
    """A receipt as the cause finder's candidate: causal by definition (the process recorded it as its failure)."""
    receipt, attempt_id = found.receipt, found.attempt_id
    stamp = datetime.fromtimestamp(receipt.observed_at_ns / 1e9, tz=UTC) if receipt.observed_at_ns else None
    where = ", ".join(p for p in (receipt.role, receipt.hostname, f"pid {receipt.pid}" if receipt.pid else "") if p)
    return ErrorCandidate(
        source_uri=receipt.uri,
        attempt_id=_logs_attempt(layout, attempt_id),
        line=1,
        error_type=receipt.short_type,
        message=receipt.message,
        traceback=receipt.traceback or f"{receipt.short_type}: {receipt.message} ({where})",
        kind="failure_receipt",
        timestamp=stamp,
    )
