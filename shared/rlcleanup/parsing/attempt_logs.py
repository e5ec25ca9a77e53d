"""An attempt's logs through the Storage port: which files are logs, in what order, each scanned in one stream.

`scan_log` streams one file with the block engine (ranged reads of BLOCK_BYTES) or, without google-re2, line by
line; `assemble_attempt` joins an attempt's file scans in scan order and applies the after-error-only noise rules
across its files (each file is scanned alone, in parallel parts). The pipeline plans parts over these
(steps/logscan.py); a pre-cancel capture, tests and benches scan an attempt in one go (`scan_attempt`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from rlcleanup.parsing.log_engine import BlockScan, hit_finder
from rlcleanup.parsing.log_grammar import EventKind
from rlcleanup.parsing.log_scanner import ErrorCandidate, LogScan, LogScanner, TrainerEvent
from rlcleanup.parsing.metrics import MetricRow
from rlcleanup.parsing.pod_logs import cri_lines, gzip_lines, is_cri, is_rotated_log, rotation_key
from rlcleanup.parsing.teardown import CLIENT_CONNECTION_REASON, by_name, client_connection_error
from rlcleanup.ports.storage import ObjectInfo, Storage, StorageError, list_in_name_order
from rlcleanup.uris import basename

_SKIP_NAMES = re.compile(r"^python-core-.*|.*\.(?:gz|zst|bz2|xz|zip|tar|png|jpg|parquet|pt|safetensors|json)$")


# Where a file sits in scan order by the evidence source it came from (steps/evidence_sources.py names the
# prefixes): an attempt's own logs first, then the ranks' Ray logs copied to the rendezvous, then termination
# artifacts. When not every first error carries a timestamp, this order decides which is first.
RANK_LOG_SEGMENT = "/ray_session_logs/"
TERMINATION_SEGMENT = "/term_artifacts/"
MAX_GZIP_LOG_BYTES = 256 * 1024 * 1024  # compressed bytes read from one rotated log
POD_LOG_NAME = re.compile(r"^\d+\.log(?:\.\d{8}-\d{6})?$")  # the kubelet's `<restart count>.log` and its rotations


def log_rank(uri: str) -> tuple[int, str]:
    """Scan order: finelog.log first (the aggregated stream), then its siblings, then worker logs, then the rest;
    a pod's rotated files oldest first, before its live file; rendezvous rank logs and termination artifacts
    after every log of the attempt itself."""
    name = basename(uri)
    if TERMINATION_SEGMENT in uri:
        return (6, uri)
    if RANK_LOG_SEGMENT in uri and f"/logs{RANK_LOG_SEGMENT}" not in uri:  # copied out of the attempt's logs
        return (5, uri)
    if name == "finelog.log":
        return (0, uri)
    if name.startswith("finelog"):
        return (1, uri)
    if name.startswith("worker-"):
        return (2, uri)
    return (3, uri[: len(uri) - len(name)] + rotation_key(name))


def is_scanned_log(uri: str) -> bool:
    """Whether a file under an attempt's logs is scanned at all (archives, images, tensors and JSON are not; a
    kubelet-rotated pod log is, gzipped or not)."""
    name = basename(uri)
    return is_rotated_log(name) or not _SKIP_NAMES.match(name)


def log_order(uris: Iterable[str]) -> list[str]:
    """The scanned logs among `uris`, in scan order (`log_rank`)."""
    return sorted((u for u in uris if is_scanned_log(u)), key=log_rank)


@dataclass
class AttemptScan:
    attempt_id: str
    files: list[LogScan] = field(default_factory=list)  # in scan order
    problems: list[str] = field(default_factory=list)  # unreadable logs, named with their uri and cause
    unread: list[str] = field(default_factory=list)  # listed but never scanned (its log-scan part failed)

    @property
    def log_uris(self) -> list[str]:
        return [f.uri for f in self.files]

    @property
    def metric_rows(self) -> list[MetricRow]:
        return [row for f in self.files for row in f.metric_rows]

    @property
    def events(self) -> list[TrainerEvent]:
        return [event for f in self.files for event in f.events]

    @property
    def errors(self) -> list[ErrorCandidate]:
        return [error for f in self.files for error in f.errors]

    def has_event(self, kind: EventKind) -> bool:
        return any(e.kind == kind for f in self.files for e in f.events)

    @property
    def last_step(self) -> int | None:
        steps = [r.step for r in self.metric_rows if r.kind == "train"]
        return max(steps) if steps else None


def scan_log(storage: Storage, uri: str, attempt_id: str | None) -> LogScan:
    """Stream one log file; a read failure keeps what was scanned and names the uri, line and cause. A gzipped
    rotation is inflated in a stream and a CRI pod log is read back as the lines the program wrote
    (parsing/pod_logs.py); any other file goes through the block engine."""
    scanner = LogScanner(uri, attempt_id)
    finder = hit_finder()
    try:
        if uri.endswith(".gz"):
            lines = gzip_lines(storage.read_bytes(uri, MAX_GZIP_LOG_BYTES))
            _feed(scanner, lines)
        elif _starts_cri(storage, uri):
            _feed(scanner, storage.iter_lines(uri))
        elif finder is None:
            for raw in storage.iter_lines(uri):
                scanner.feed(raw)
        else:  # ranged reads of BLOCK_BYTES: one request per 4 MiB, the same on every Storage
            BlockScan(scanner, finder).run(lambda start, length: storage.read_range(uri, start, length))
    except (StorageError, OSError, ValueError) as exc:
        scanner.scan.problems.append(f"log {uri} could not be read past line {scanner.scan.lines}: {exc}")
    return scanner.finish()


def _starts_cri(storage: Storage, uri: str) -> bool:
    """A kubelet pod log (`<restart>.log[.<stamp>]`, or anything under a `pods/` directory) whose first record is
    CRI. Other logs are never probed: the probe is one more request per file."""
    if not (POD_LOG_NAME.match(basename(uri)) or "/pods/" in uri):
        return False
    head = storage.read_range(uri, 0, 512).decode("utf-8", errors="replace")
    return bool(head) and is_cri(head.split("\n", 1)[0])


def _feed(scanner: LogScanner, lines: Iterable[str]) -> None:
    """Every line, CRI records joined back into lines when the file is a pod log."""
    iterator = iter(lines)
    first = next(iterator, None)
    if first is None:
        return
    rest = _chain(first, iterator)
    for line in cri_lines(rest) if is_cri(first) else rest:
        scanner.feed(line)


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


def carry_error_seen(files: list[LogScan]) -> None:
    """Apply after-error-only noise rules across an attempt's files, in scan order (files are scanned alone)."""
    seen = False
    for scan in files:
        if seen:
            for error in scan.errors:
                rule = by_name(error.noise_after_error)
                if error.causal and rule is not None:
                    error.causal, error.noise, error.noise_reason = False, rule.name, rule.reason
        seen = seen or bool(scan.errors)


def demote_survived_connection_errors(files: list[LogScan]) -> None:
    """A client connection error (teardown.client_connection_error) followed, in the same attempt, by a causal error
    of another kind is chatter the process carried on past: the later error is what ended the attempt, so the
    connection error becomes a symptom. Later means by timestamp where both errors have one, else in scan order
    (file order, then line). A connection error with nothing causal after it stays the cause."""
    ordered = [(i, e) for i, scan in enumerate(files) for e in scan.errors if e.causal]
    strong = [(i, e) for i, e in ordered if not client_connection_error(e.error_type, e.message)]
    if not strong:
        return

    def after(later: tuple[int, ErrorCandidate], earlier: tuple[int, ErrorCandidate]) -> bool:
        (li, le), (ei, ee) = later, earlier
        if le.timestamp is not None and ee.timestamp is not None:
            return le.timestamp > ee.timestamp
        return (li, le.line) > (ei, ee.line)

    for pair in ordered:
        error = pair[1]
        if client_connection_error(error.error_type, error.message) and any(after(s, pair) for s in strong):
            error.causal, error.noise, error.noise_reason = False, "client_connection", CLIENT_CONNECTION_REASON


def assemble_attempt(attempt_id: str, files: list[LogScan]) -> AttemptScan:
    """An attempt's scan from its files' scans, given in `log_order`."""
    carry_error_seen(files)
    demote_survived_connection_errors(files)
    return AttemptScan(attempt_id=attempt_id, files=files, problems=[p for f in files for p in f.problems])


class AttemptLogs(Protocol):
    """Where an attempt's logs are (steps.layout.AttemptFiles has it): readers know no layout policy."""

    @property
    def attempt_id(self) -> str: ...

    @property
    def log_prefix(self) -> str | None: ...

    @property
    def log_objects(self) -> list[ObjectInfo]: ...

    @property
    def evidence_prefixes(self) -> list[str]: ...


def attempt_log_objects(storage: Storage, attempt: AttemptLogs, start_after: str | None = None) -> Iterator[ObjectInfo]:
    """The attempt's log files in name order, after `start_after`: everything under its log prefix and the
    evidence prefixes discovery accepted for it (its rendezvous rank logs and termination artifacts), listed now (a
    paged plan resumes here), or the files discovery named (a Slurm attempt's one `.out`). Prefixes are listed in
    name order, so one cursor resumes across all of them."""
    if attempt.log_prefix is not None:
        for prefix in _disjoint([attempt.log_prefix, *attempt.evidence_prefixes]):
            yield from list_in_name_order(storage, prefix, start_after)
        return
    for info in sorted(attempt.log_objects, key=lambda o: o.uri):
        if start_after is None or info.uri > start_after:
            yield info


def _disjoint(prefixes: list[str]) -> list[str]:
    """Prefixes in the order their objects sort (`a/logs/` before `a/logs2/`), none inside another."""
    ordered = sorted({p.rstrip("/") + "/" for p in prefixes})
    kept: list[str] = []
    for prefix in ordered:
        if not any(prefix.startswith(outer) for outer in kept):
            kept.append(prefix)
    return [p.rstrip("/") for p in kept]


def scan_attempt(storage: Storage, attempt: AttemptLogs) -> AttemptScan:
    """One attempt's scan in one go (a pre-cancel capture, tests, benches; the pipeline plans parts instead)."""
    uris = log_order(info.uri for info in attempt_log_objects(storage, attempt))
    return assemble_attempt(attempt.attempt_id, [scan_log(storage, uri, attempt.attempt_id) for uri in uris])
