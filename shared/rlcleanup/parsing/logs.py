"""One streaming pass over a training log: metric rows, trainer events and error candidates.

Memory is bounded per file: a traceback keeps a capped head and tail, the error list is capped, and the
metric parser caps its legacy-dict buffer. The whole file is never held: the block scanner (below) holds one
block of BLOCK_BYTES plus at most one partial line of MAX_LINE_BYTES.
"""

from __future__ import annotations

import io
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol, cast

from rlcleanup.models.parts import SegmentSeed
from rlcleanup.parsing.metrics import MAX_LINE_CHARS, CleanLine, MetricParser, MetricRow, clean_line
from rlcleanup.parsing.teardown import TEARDOWN, TeardownWording, by_name, causal_what_payload, teardown_for
from rlcleanup.ports.lines import bounded_lines
from rlcleanup.ports.storage import ObjectInfo, Storage, StorageError, list_in_name_order
from rlcleanup.uris import basename

TRACEBACK_MAX_LINES = 200
TRACEBACK_MAX_BYTES = 64 * 1024
TRACEBACK_TAIL_LINES = 40  # kept past the cap, so the final `ErrorType: message` is never lost
MAX_ERRORS_PER_FILE = 64  # later ones are counted, not kept (64 ranks can print the same traceback)
MAX_FOREIGN_IN_TRACEBACK = 20  # interleaved lines from other processes tolerated inside a traceback
_MAX_EVENT_TEXT = 500
_TRACEBACK_HEADER = "Traceback (most recent call last):"


class EventKind(StrEnum):
    saved_checkpoint = "saved_checkpoint"
    reached_max_steps = "reached_max_steps"
    saved_final_checkpoint = "saved_final_checkpoint"
    training_done = "training_done"
    loaded_checkpoint = "loaded_checkpoint"
    no_checkpoint = "no_checkpoint"
    already_complete_on_resume = "already_complete_on_resume"
    resumed_already_complete = "resumed_already_complete"
    stopped_early = "stopped_early"
    controller_stopped = "controller_stopped"  # Slurm cancelled the job: time limit, preemption, scancel


# (kind, pattern); group 1 is the step when there is one. The `resumed ... already COMPLETE` line precedes
# `Reached max` so its `max training steps (N)` is not read as a normal finish.
_EVENT_PATTERNS: tuple[tuple[EventKind, re.Pattern[str]], ...] = (
    (EventKind.saved_checkpoint, re.compile(r"Successfully saved checkpoint for global_step_(\d+)")),
    (
        EventKind.resumed_already_complete,
        re.compile(r"Resumed at global_step (\d+) >= max training steps \((\d+)\); run is already COMPLETE"),
    ),
    (EventKind.reached_max_steps, re.compile(r"Reached max training steps \((\d+)\)")),
    (EventKind.saved_final_checkpoint, re.compile(r"Saved final checkpoint\.")),
    (EventKind.training_done, re.compile(r"Training done!")),
    (EventKind.loaded_checkpoint, re.compile(r"(?i)loaded (?:complete )?checkpoint(?: state)? from global_step_(\d+)")),
    (EventKind.no_checkpoint, re.compile(r"No checkpoint found, starting training from scratch")),
    (EventKind.already_complete_on_resume, re.compile(r"Training already complete on resume")),
    (EventKind.stopped_early, re.compile(r"Training stopped early by callback")),
    (EventKind.controller_stopped, re.compile(r"\*\*\* (?:JOB|STEP) [\w.]+ ON \S+ CANCELLED AT \S+")),
)

# Causal fatal lines printed outside any Python traceback: (pattern, error_type). Checked before the noise table,
# so `received signal SIGSEGV` is causal while `received signal 15` is teardown.
# The message is group 1 when the pattern has one, else the whole line. No leading `.*`: these run on every line.
_FATAL_LINES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Fatal Python error: ?(.*)"), "Fatal Python error"),
    # Signal names count only where a signal is reported (`received signal 11`, `*** SIGSEGV received at`, the
    # kernel's `Segmentation fault`); prose that lists SIGSEGV as a possible cause is matched as teardown first.
    (
        re.compile(r"(?i)segmentation fault|\*\*\* SIGSEGV received|received signal (?:11|SIGSEGV)\b|SIGSEGV \(@"),
        "SegmentationFault",
    ),
    (re.compile(r"(?i)\bbus error\b|\*\*\* SIGBUS received|received signal (?:7|SIGBUS)\b"), "BusError"),
    (re.compile(r"torch\.(?:cuda\.)?OutOfMemoryError:? ?(.*)"), "torch.OutOfMemoryError"),
    (re.compile(r"ray\.exceptions\.OutOfMemoryError:? ?(.*)"), "ray.exceptions.OutOfMemoryError"),
    (re.compile(r"CUDA out of memory"), "torch.OutOfMemoryError"),
    (re.compile(r"CUDA error: ?(.*)"), "CUDAError"),
    (re.compile(r"terminate called after throwing an instance of '([^']+)'"), "C++ exception"),
)
_MAX_MATCH_CHARS = 16 * 1024  # events, fatal lines and noise are matched on this much of a line
# Cheap substring gates: most lines are throughput chatter and skip the regex tables entirely.
_EVENT_HINTS = ("global_step", "Training", "Reached max", "Saved final", "No checkpoint", "CANCELLED AT")
# Lowercased-line gates. Not plain "nccl": every `NCCL INFO` chatter line has it; the NCCL noise rule needs a
# watchdog, a timeout or an abort, so gate on those words instead.
_FATAL_HINTS = (
    "error",
    "fault",
    "sig",
    "terminate",
    "cuda",
    "watchdog",
    "timeout",
    "time out",
    "timed out",
    "aborted",
    "fatal",
)


# Teardown noise: what a dying job prints after (and because of) the real failure. The vocabulary is data in
# parsing/teardown.py (one table, each wording with its upstream source); these names keep the scanner's API.
NoiseRule = TeardownWording
NOISE_RULES = TEARDOWN
MAX_NOISE_PER_FILE = 16  # teardown lines kept as symptoms; 64 ranks' watchdog lines must not crowd out a cause
_WHAT_LOOKAHEAD = 3  # a `terminate called ...` line is decided by the `what():` line right after it


def noise_rule_for(signature: str, *, error_seen: bool) -> NoiseRule | None:
    return teardown_for(signature, error_seen=error_seen)


@dataclass(frozen=True)
class TrainerEvent:
    kind: EventKind
    source_uri: str
    line: int
    step: int | None  # the N the line names (saved/loaded step, max steps, resumed-at step)
    text: str
    timestamp: datetime | None = None
    max_steps: int | None = None  # only for resumed_already_complete


@dataclass
class ErrorCandidate:
    source_uri: str
    attempt_id: str | None
    line: int  # 1-based: the `Traceback` line, or the fatal line
    error_type: str
    message: str
    traceback: str
    kind: str  # "traceback" | "fatal_line"
    causal: bool = True
    noise: str | None = None  # NoiseRule.name when it is teardown noise
    noise_reason: str | None = None
    timestamp: datetime | None = None  # the line's own stamp, else the last stamp seen before it in the file
    truncated: bool = False
    complete: bool = True  # False when the file ended before the final `ErrorType: message`
    # The after-error-only rule that would make this (causal) error noise had an earlier file of the attempt
    # shown an error. Files are scanned independently (in parallel parts); `carry_error_seen` applies it.
    noise_after_error: str | None = None


@dataclass
class LogScan:
    uri: str
    attempt_id: str | None
    lines: int = 0
    metric_rows: list[MetricRow] = field(default_factory=list)
    events: list[TrainerEvent] = field(default_factory=list)
    errors: list[ErrorCandidate] = field(default_factory=list)
    errors_dropped: int = 0
    metric_blocks_dropped: int = 0
    first_timestamp: datetime | None = None
    last_timestamp: datetime | None = None
    problems: list[str] = field(default_factory=list)


# `Name: message` (any dotted identifier, optionally `Wrapper(Inner)`), or a bare name that reads as an exception.
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:\([\w., ]*\))?)(?::\s?(?P<msg>.*))?$")
_BARE_EXC = re.compile(r"(?:Error|Exception|Interrupt|Exit|Fault|Failure|Timeout|Iteration|Group|Warning)$")
_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def _exception_line(text: str, *, strict: bool) -> tuple[str, str] | None:
    """`ErrorType: message`. Strict (after an exception line, where log lines follow) wants an exception-like name;
    lenient (ending frames) also takes any CamelCase name with a message. `INFO: ...` is never one."""
    match = _EXC_LINE.match(text.rstrip())
    if not match:
        return None
    etype, msg = match.group("type"), match.group("msg")
    name = etype.split("(")[0]
    last = name.rsplit(".", 1)[-1]
    exception_like = bool(_BARE_EXC.search(name)) or ("." in name and last[:1].isupper())
    camel = last[:1].isupper() and any(c.islower() for c in last)
    if not exception_like and (strict or msg is None or not camel):
        return None
    return etype, (msg or "").strip()


class _Traceback:
    """One traceback (chained ones merged) being read; stores a capped head and a rolling tail."""

    def __init__(self, line: int, timestamp: datetime | None) -> None:
        self.line = line
        self.timestamp = timestamp
        self.head: list[str] = []
        self.head_bytes = 0
        self.tail: deque[str] = deque(maxlen=TRACEBACK_TAIL_LINES)
        self.omitted = 0
        self.segments: list[tuple[str, str]] = []  # the last exception line of each chained traceback
        self.current: tuple[str, str] | None = None  # last exception line seen in the current segment
        self.state = "frames"  # frames -> tail (after an exception line) -> chain (after a blank line)
        self.foreign = 0
        self.chained = False  # saw "During handling ..." / "The above exception ...": the next header continues

    def add(self, text: str) -> None:
        if len(self.head) < TRACEBACK_MAX_LINES and self.head_bytes + len(text) <= TRACEBACK_MAX_BYTES:
            self.head.append(text)
            self.head_bytes += len(text) + 1
            return
        if len(self.tail) == self.tail.maxlen:
            self.omitted += 1
        self.tail.append(text)

    def end_segment(self) -> None:
        if self.current is not None:
            self.segments.append(self.current)
            self.current = None

    def text(self) -> str:
        lines = list(self.head)
        if self.omitted:
            lines.append(f"... [{self.omitted} lines omitted] ...")
        lines.extend(self.tail)
        while lines and not lines[-1].strip():
            lines.pop()
        return "\n".join(lines)


def with_year(month_day_time: str, last: datetime | None) -> datetime | None:
    """vLLM stamps carry no year: take the one of the last stamp in this file (none seen: no stamp). A stamp made so
    keeps that year and zone, so they are always those of the file's last full stamp before it."""
    if last is None:
        return None
    try:
        stamp = datetime.strptime(f"{last.year}-{month_day_time}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return stamp.replace(tzinfo=last.tzinfo or UTC)


class LogScanner:
    """Feed lines in order (`feed`), then `finish()` for the LogScan.

    The block scanner below feeds only the lines its hit patterns find (and every line inside a traceback or a
    metric block); a line it skips may only be counted and carry a timestamp. A new per-line effect in `feed` or
    `clean_line` therefore needs its pattern in `hit_patterns` or the stamp search (test_logs_differential.py)."""

    def __init__(self, uri: str, attempt_id: str | None = None, *, error_seen: bool = False) -> None:
        self.scan = LogScan(uri=uri, attempt_id=attempt_id)
        self._metrics = MetricParser(uri, attempt_id)
        self._tb: _Traceback | None = None
        self._error_seen = error_seen  # for after-error-only noise rules (carried across an attempt's files)
        self._last_ts: datetime | None = None
        self._pending_terminate: ErrorCandidate | None = None  # waits for its `what():` line
        self._noise_kept = 0
        self._errors_before = 0  # errors a cut log's earlier segments kept (the per-file cap counts them)
        # False while a cut log's segment reads its overlap (or the few lines past its end): what happens there
        # belongs to another segment, which keeps and counts it; only the scanner's state moves.
        self.owning = True

    @property
    def error_seen(self) -> bool:
        return self._error_seen

    @property
    def busy(self) -> bool:
        """Inside a traceback or a legacy metric block: every next line must be fed, whatever it holds."""
        return self._tb is not None or self._metrics.in_block

    def feed(self, raw: str) -> None:
        scan = self.scan
        scan.lines += 1
        lineno = scan.lines
        cleaned = clean_line(raw)
        if cleaned.timestamp is None and cleaned.month_day_time is not None:
            cleaned = CleanLine(cleaned.text, self._with_year(cleaned.month_day_time), None)
        if cleaned.timestamp is not None:
            self._last_ts = cleaned.timestamp
            scan.first_timestamp = scan.first_timestamp or cleaned.timestamp
            scan.last_timestamp = cleaned.timestamp
        text = cleaned.text
        row = self._metrics.feed(raw, lineno, cleaned)
        if row is not None:
            scan.metric_rows.append(row)
        self._event(text[:_MAX_MATCH_CHARS], lineno, cleaned.timestamp)
        if self._tb is not None and self._traceback_line(text):
            return
        if _TRACEBACK_HEADER in text:
            self._tb = _Traceback(lineno, cleaned.timestamp or self._last_ts)
            self._tb.add(text)
            return
        self._fatal_line(text[:_MAX_MATCH_CHARS], lineno, cleaned.timestamp or self._last_ts)

    def resume(self, seed: SegmentSeed) -> None:
        """Start where a cut log's earlier segments left off (the scalar state at the seed's overlap start)."""
        self.scan.lines = seed.lines
        self.scan.first_timestamp, self.scan.last_timestamp = seed.first_timestamp, seed.last_timestamp
        self._last_ts = seed.last_timestamp
        self._error_seen = seed.error_seen

    def seed(self, warm: int, start: int, at_warm: SegmentSeed | None = None) -> SegmentSeed:
        """This scanner's state as the next segment's seed: scalars now (or as `at_warm` took them at its overlap
        start), caps counters now (at its first own line)."""
        here = at_warm or SegmentSeed(
            warm=warm,
            start=start,
            lines=self.scan.lines,
            first_timestamp=self.scan.first_timestamp,
            last_timestamp=self._last_ts,
            error_seen=self._error_seen,
        )
        kept = self._errors_before + len(self.scan.errors)
        return here.model_copy(update={"start": start, "noise_kept": self._noise_kept, "errors_kept": kept})

    def own_from(self, seed: SegmentSeed) -> None:
        """The segment's own lines begin: the caps count what the earlier segments kept; the overlap's events and
        metric rows were the earlier segment's."""
        self.owning = True
        self._noise_kept, self._errors_before = seed.noise_kept, seed.errors_kept
        self.scan.events.clear()
        self.scan.metric_rows.clear()

    @property
    def settling(self) -> bool:
        """A `terminate called` line kept here may still get its `what():` line from the lines after it."""
        pending = self._pending_terminate
        return pending is not None and self.scan.lines - pending.line < _WHAT_LOOKAHEAD

    def _with_year(self, month_day_time: str) -> datetime | None:
        return with_year(month_day_time, self._last_ts)

    def finish(self) -> LogScan:
        if self._tb is not None:
            self._close_traceback()
        self._metrics.finish()
        self.scan.metric_blocks_dropped = self._metrics.dropped_blocks
        return self.scan

    def _event(self, text: str, lineno: int, timestamp: datetime | None) -> None:
        if not any(hint in text for hint in _EVENT_HINTS):
            return
        for kind, pattern in _EVENT_PATTERNS:
            match = pattern.search(text)
            if not match:
                continue
            groups = match.groups()
            step = int(groups[0]) if groups else None
            max_steps = int(groups[1]) if len(groups) > 1 else None
            self.scan.events.append(
                TrainerEvent(kind, self.scan.uri, lineno, step, text[:_MAX_EVENT_TEXT], timestamp, max_steps)
            )
            return

    def _traceback_line(self, text: str) -> bool:
        """Consume a line into the open traceback; False when the traceback has ended (line not consumed)."""
        tb = self._tb
        assert tb is not None
        stripped = text.strip()
        if tb.state == "chain":  # between chained tracebacks: blanks, the chain sentence, the next header
            if not stripped or stripped in _CHAIN_LINES:
                tb.add(text)
                tb.chained = tb.chained or bool(stripped)
                return True
            if tb.chained and _TRACEBACK_HEADER in text:  # else: a separate traceback
                tb.add(text)
                tb.state, tb.chained = "frames", False
                return True
            self._close_traceback()
            return False
        if _TRACEBACK_HEADER in text and tb.state == "tail":
            self._close_traceback()  # a new, unrelated traceback
            return False
        if text[:1].isspace() or (tb.state == "frames" and not stripped):
            tb.add(text)  # a frame, a code line, `^^^^` markers, or a message continuation
            tb.foreign = 0
            return True
        if not stripped:  # blank after the exception line: maybe a chained traceback follows
            tb.end_segment()
            tb.state = "chain"
            tb.add(text)
            return True
        exc = _exception_line(stripped, strict=tb.state == "tail")
        if exc is not None:
            tb.add(text)
            tb.current = exc  # Ray wrappers print the remote error after their own line: the last one wins
            tb.state = "tail"
            tb.foreign = 0
            return True
        if tb.state == "tail":
            self._close_traceback()
            return False
        tb.foreign += 1  # an interleaved line from another process; skipped
        if tb.foreign > MAX_FOREIGN_IN_TRACEBACK:
            self._close_traceback()
            return False
        return True

    def _close_traceback(self) -> None:
        tb = self._tb
        assert tb is not None
        self._tb = None
        tb.end_segment()
        complete = bool(tb.segments)
        etype, message = tb.segments[0] if tb.segments else ("<incomplete traceback>", "")
        signatures = [f"{t}: {m}" for t, m in tb.segments] or [f"{etype}: {message}"]
        self._add_error(
            ErrorCandidate(
                source_uri=self.scan.uri,
                attempt_id=self.scan.attempt_id,
                line=tb.line,
                error_type=etype,
                message=message,
                traceback=tb.text(),
                kind="traceback",
                timestamp=tb.timestamp,
                truncated=tb.omitted > 0 or len(tb.tail) > 0,
                complete=complete,
            ),
            signatures,
        )

    def _fatal_line(self, text: str, lineno: int, timestamp: datetime | None) -> None:
        stripped = text.strip()
        lowered = stripped.lower()
        if not stripped or not any(hint in lowered for hint in _FATAL_HINTS):
            return
        pending = self._pending_terminate
        if pending is not None and lineno - pending.line > _WHAT_LOOKAHEAD:
            pending = self._pending_terminate = None
        if stripped.startswith("what():"):
            payload = causal_what_payload(stripped)
            if pending is not None:
                # The `what():` line finishes the `terminate called ...` report: keep both lines as one candidate.
                self._pending_terminate = None
                pending.traceback = f"{pending.traceback}\n{stripped}"[:TRACEBACK_MAX_BYTES]
                pending.message = (payload or stripped.removeprefix("what():").strip())[:_MAX_EVENT_TEXT]
                if payload is not None and not pending.causal:
                    # run-layout-v2.md §7: a what() payload carrying a CUDA or NCCL error is causal.
                    pending.causal, pending.noise, pending.noise_reason = True, None, None
                return
            if payload is not None:
                self._add_error(self._line_error(lineno, "C++ exception", payload, stripped, timestamp), None)
                return
        # Teardown first (§7): prose that names a signal or an error word is not a cause.
        rule = teardown_for(stripped, error_seen=self._error_seen)
        if rule is not None:
            error = self._line_error(lineno, rule.name, stripped, stripped, timestamp)
            error.kind, error.causal, error.noise, error.noise_reason = "noise_line", False, rule.name, rule.reason
            self._add_error(error, None)
            if rule.name == "dist_backend_terminate":
                error.error_type, error.message = "c10::DistBackendError", stripped[:_MAX_EVENT_TEXT]
                self._pending_terminate = error
            return
        for pattern, etype in _FATAL_LINES:
            match = pattern.search(stripped)
            if match:
                message = (match.group(1) if pattern.groups else stripped).strip() or stripped
                error = self._line_error(lineno, etype, message, stripped, timestamp)
                self._add_error(error, None)
                if etype == "C++ exception":
                    self._pending_terminate = error
                return

    def _line_error(
        self, lineno: int, etype: str, message: str, line: str, timestamp: datetime | None
    ) -> ErrorCandidate:
        return ErrorCandidate(
            source_uri=self.scan.uri,
            attempt_id=self.scan.attempt_id,
            line=lineno,
            error_type=etype,
            message=message[:_MAX_EVENT_TEXT],
            traceback=line[:TRACEBACK_MAX_BYTES],
            kind="fatal_line",
            timestamp=timestamp,
        )

    def _add_error(self, error: ErrorCandidate, signatures: list[str] | None) -> None:
        if error.causal:
            # A traceback is noise only when every chained exception in it is noise.
            rules = [
                noise_rule_for(sig, error_seen=self._error_seen)
                for sig in (signatures or [f"{error.error_type}: {error.message}"])
            ]
            if rules and all(r is not None for r in rules):
                first = rules[0]
                assert first is not None
                error.causal, error.noise, error.noise_reason = False, first.name, first.reason
            elif not self._error_seen:
                later = [
                    noise_rule_for(sig, error_seen=True)
                    for sig in (signatures or [f"{error.error_type}: {error.message}"])
                ]
                if later and all(r is not None for r in later):
                    first = later[0]
                    assert first is not None
                    error.noise_after_error = first.name
        self._error_seen = True
        if not self.owning:
            return
        if not error.causal:
            self._noise_kept += 1
            if self._noise_kept > MAX_NOISE_PER_FILE:
                self.scan.errors_dropped += 1
                return
        if self._errors_before + len(self.scan.errors) >= MAX_ERRORS_PER_FILE:
            self.scan.errors_dropped += 1
            return
        self.scan.errors.append(error)


def scan_lines(lines: Iterable[str], uri: str, attempt_id: str | None = None, *, error_seen: bool = False) -> LogScan:
    scanner = LogScanner(uri, attempt_id, error_seen=error_seen)
    for raw in lines:
        scanner.feed(raw)
    return scanner.finish()


# -- block scanner ----------------------------------------------------------------------------------------------
#
# Feeding every line through LogScanner costs ~10 µs of Python per line (ANSI cleaning, a timestamp parse, a
# lowercased look for hints), while well under 1% of a training log's lines can change a scan. The block scanner
# reads a file in blocks of raw bytes, finds the lines that can matter with one compiled multi-pattern search over
# the block (RE2), and feeds only those lines, plus every line while a traceback or a legacy metric block is open,
# through the same LogScanner. A line without a hit only counts, and may carry a timestamp: the first stamp of the
# file and the last stamp before each hit are found by regex searches over the bytes, never by parsing every line.
# The differential test (tests/unit/test_logs_differential.py) holds it to the line scanner's exact output.

BLOCK_BYTES = 4 * 1024 * 1024
FIRST_READ_BYTES = 256 * 1024
# A line is cut at MAX_LINE_CHARS characters; UTF-8 (or U+FFFD for each invalid byte) fits that many characters in
# 4 bytes each, and a character may look 3 bytes ahead: a longer line keeps this head and skips the rest.
MAX_LINE_BYTES = 4 * MAX_LINE_CHARS + 4

# Any run of what clean_line's ANSI regex removes. An escape sequence never holds a newline or another ESC, so the
# sequences a line loses are exactly the ones between the characters that remain: allowing this gap between every
# two characters of an anchor finds the anchor in the raw bytes wherever it appears in the cleaned text.
_GAP = rb"(?:\x1b(?:\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_]))*"
# The same for Python's backtracking `re`, possessive: at an ESC the sequence is unique (its classes are disjoint and
# hold no ESC), and what follows a gap here (`[`, a digit) never starts one, so giving nothing back loses no match,
# while plain `*` would backtrack quadratically over a long run of codes.
_GAP_RE = rb"(?:\x1b(?:\[[0-9;?]*+[ -/]*+[@-~]|[@-Z\\-_]))*+"


def _tolerant(literal: str, *, caseless: bool = False) -> bytes:
    """A pattern for `literal` with ANSI gaps between its characters; caseless as ASCII letter classes.

    ASCII case folding is enough for the lowercased hints: the only non-ASCII characters whose str.lower() holds an
    ASCII letter are U+0130 (to "i" + U+0307) and U+212A (to "k"), which can never complete a hint
    (test_non_ascii_lowercase_cannot_complete_a_hint enumerates every code point)."""
    parts = []
    for ch in literal:
        if caseless and ch.isascii() and ch.isalpha():
            parts.append(f"[{ch.lower()}{ch.upper()}]".encode())
        else:
            parts.append(re.escape(ch).encode())
    return _GAP.join(parts)


def hit_patterns() -> list[bytes]:
    """What makes LogScanner.feed do more than count a line and note its timestamp, as raw-byte patterns: a trainer
    event hint, a traceback header, a fatal-line hint (matched on the lowercased line), a metric mirror line or the
    start of a legacy dict block (`{` then a quote). A superset is harmless (the line is fed and judged exactly)."""
    patterns = [_tolerant(hint) for hint in _EVENT_HINTS]
    patterns.append(_tolerant(_TRACEBACK_HEADER))
    patterns += [_tolerant(hint, caseless=True) for hint in _FATAL_HINTS]
    patterns.append(_tolerant("WANDB_MIRROR"))
    patterns.append(rb"\{" + _GAP + rb"['\"]")
    return patterns


def stamp_core(gap: bytes = _GAP_RE, *, full: bool = False) -> bytes:
    """What every stamp clean_line can read holds, wherever its prefixes put it: `MM-DD[T ]HH:MM:SS`, the tail of a
    full `YYYY-MM-DD HH:MM:SS` and the whole of vLLM's yearless one (`full`: with the year). Only ASCII digits:
    datetime.fromisoformat and strptime's %d-style fields reject other digits, so such a stamp never parses."""
    template = "dddd-dd-ddTdd:dd:dd" if full else "dd-ddTdd:dd:dd"
    chars = [rb"[0-9]" if c == "d" else rb"[T ]" if c == "T" else c.encode() for c in template]
    return gap.join(chars)


# The last stamp-like text before a point, near it: greedy `.*` jumps to the end and backtracks, in C. In a stamped
# log the stamp is a line or two back; sre backtracks at ~30 MB/s, so past _BACK_WINDOW the finder's RE2 pass
# (~450 MB/s forward over the rest) takes over.
_STAMP_LAST = re.compile(rb"(?s).*" + stamp_core())
_FULL_STAMP_LAST = re.compile(rb"(?s).*" + stamp_core(full=True))  # vLLM's lines do not stop this one
_BACK_WINDOW = 16 * 1024


class HitFinder(Protocol):
    def next_hit(self, buf: bytes, start: int, stop: int) -> int | None:
        """The end (exclusive) of the leftmost hit_patterns() match in buf[start:stop], or None."""
        ...

    def next_stamp(self, buf: bytes, start: int, stop: int) -> int | None:
        """The start of the leftmost stamp_core(full=True) match in buf[start:stop], or None."""
        ...

    def last_stamp(self, buf: bytes, start: int, stop: int, *, full: bool) -> int | None:
        """The end of the rightmost stamp_core(full=full) match in buf[start:stop], or None."""
        ...


class Re2Finder:
    """hit_patterns() as one RE2 alternation over Latin-1 bytes (a byte is a character; invalid UTF-8 is inert).

    RE2 runs a lazily built DFA: compiling costs ~1 ms and a search ~2 ns per byte whatever the number of patterns.
    bench/bench_log_engines.py measures it on these anchors against sre (~60x slower), hyperscan (~2x slower with
    a Python callback per match), bytes.find and pyahocorasick (literals only: no ANSI tolerance). Thread-safe."""

    def __init__(self, patterns: list[bytes]) -> None:
        import re2

        options = re2.Options()
        options.encoding = re2.Options.Encoding.LATIN1
        options.never_capture = True
        self._search = re2.compile(b"|".join(b"(?:" + p + b")" for p in patterns), options).search
        self._stamp = re2.compile(stamp_core(_GAP, full=True), options).search
        self._last = {
            full: re2.compile(rb"(?s).*" + stamp_core(_GAP, full=full), options).match for full in (False, True)
        }

    def next_hit(self, buf: bytes, start: int, stop: int) -> int | None:
        match = self._search(buf, start, stop)
        return None if match is None else int(match.end())

    def next_stamp(self, buf: bytes, start: int, stop: int) -> int | None:
        match = self._stamp(buf, start, stop)
        return None if match is None else int(match.start())

    def last_stamp(self, buf: bytes, start: int, stop: int, *, full: bool) -> int | None:
        match = self._last[full](buf, start, stop)
        return None if match is None else int(match.end())


_FINDER: HitFinder | None = None
_FINDER_LOCK = threading.Lock()
_FINDER_TRIED = False


def hit_finder() -> HitFinder | None:
    """The process's finder, compiled on first use; None without google-re2 (scan_log then feeds every line)."""
    global _FINDER, _FINDER_TRIED
    with _FINDER_LOCK:
        if not _FINDER_TRIED:
            _FINDER_TRIED = True
            try:
                _FINDER = Re2Finder(hit_patterns())
            except ImportError:
                _FINDER = None
        return _FINDER


def _decode(line: bytes) -> str:
    """One line as iter_lines gave it: UTF-8 with replacement, cut at MAX_LINE_CHARS characters."""
    text = line.decode("utf-8", "replace")
    return text[:MAX_LINE_CHARS] if len(text) > MAX_LINE_CHARS else text


class BlockScan:
    """Drive a LogScanner over a file read in blocks; `run(read)` with read(start, length) -> bytes (short at EOF).

    Each block is newline-normalised the way universal-newline text mode reads (\r\n and a lone \r end a line) and
    scanned in place from its first newline to its last; the line cut by the block's start (the carried rest of the
    previous one, and this block up to its first newline) gets a small buffer of its own that begins with a
    sentinel newline. Every region scanned so starts right after a newline, the file's first line included.
    """

    def __init__(self, scanner: LogScanner, finder: HitFinder, block: int = BLOCK_BYTES) -> None:
        self.scanner = scanner
        self.finder = finder
        self.block = block

    def run(self, read: Callable[[int, int], bytes]) -> None:
        offset, carry, held_cr, skipping = 0, b"", False, False
        # Most logs are far smaller than a block: asking 4 MiB for a 70 KB file costs an allocation of 4 MiB per
        # read (~50 us locally, x3 the read itself). Start small; a file that fills it is read in whole blocks.
        size = min(self.block, FIRST_READ_BYTES)
        while True:
            data = read(offset, size)
            offset += len(data)
            eof = len(data) < size
            size = self.block
            if held_cr:
                data, held_cr = b"\r" + data, False
            if not eof and data.endswith(b"\r"):  # maybe the \r of a \r\n cut by the block: decide with the next
                data, held_cr = data[:-1], True
            if b"\r" in data:
                data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if skipping:  # past MAX_LINE_BYTES of one line: drop bytes up to its end
                nl = data.find(b"\n")
                if nl < 0 and not eof:
                    continue
                data, skipping = (data[nl:] if nl >= 0 else b""), False
            first = data.find(b"\n")
            if first < 0:  # no line ends here: all of it continues the carried line
                carry += data
                if eof:
                    if carry:  # the last line has no newline: still a line
                        self._block(b"\n" + carry + b"\n", 0, len(carry) + 2)
                    return
                if len(carry) > MAX_LINE_BYTES:
                    carry, skipping = carry[:MAX_LINE_BYTES], True
                continue
            # The line the read cut, whole: a small buffer of its own, so the block itself is never copied.
            line = b"\n" + carry + data[: first + 1]
            self._block(line, 0, len(line))
            del line
            last = data.rfind(b"\n")
            if last > first:
                self._block(data, first, last + 1)
            carry = data[last + 1 :]
            del data  # before the next read: one block alive at a time
            if eof:
                if carry:
                    self._block(b"\n" + carry + b"\n", 0, len(carry) + 2)
                return
            if len(carry) > MAX_LINE_BYTES:
                carry, skipping = carry[:MAX_LINE_BYTES], True

    def _block(self, buf: bytes, low: int, cut: int) -> None:
        """The complete lines in buf[low + 1 : cut]; buf[low] is the newline before them."""
        pos = self._fed_while_busy(buf, low + 1, cut)
        next_hit = self.finder.next_hit
        while pos < cut and (end := next_hit(buf, pos, cut)) is not None:
            start = buf.rfind(b"\n", pos - 1, end) + 1  # hits never span a newline
            self._quiet(buf, pos, start)
            stop = buf.find(b"\n", end, cut)
            self.scanner.feed(_decode(buf[start:stop]))
            pos = self._fed_while_busy(buf, stop + 1, cut)
        self._quiet(buf, pos, cut)

    def _fed_while_busy(self, buf: bytes, pos: int, cut: int) -> int:
        scanner = self.scanner
        while pos < cut and scanner.busy:
            stop = buf.find(b"\n", pos, cut)
            scanner.feed(_decode(buf[pos:stop]))
            pos = stop + 1
        return pos

    def _quiet(self, buf: bytes, start: int, stop: int) -> None:
        """Lines [start, stop) hold no hit: count them and take their first and last timestamps."""
        if stop <= start:
            return
        scanner, scan = self.scanner, self.scanner.scan
        scan.lines += buf.count(b"\n", start, stop)
        low = start - 1  # the newline before the first line
        if scan.first_timestamp is None:
            # Nothing stamped yet, so vLLM's yearless stamps read as none: the first stamp is a full one.
            first = self._first_full_stamp(buf, low, stop)
            if first is None:
                return  # no stamp at all in these lines
            stamp, low = first
            scan.first_timestamp = scan.last_timestamp = scanner._last_ts = stamp
        last = self._last_stamp(buf, low, stop, scanner._last_ts)
        if last is not None:
            scan.last_timestamp = scanner._last_ts = last

    @staticmethod
    def _line_around(buf: bytes, low: int, stop: int, at: int) -> tuple[int, int]:
        """(start, end) of the line holding byte `at`: after the newline at or past `low`, up to its newline."""
        return buf.rfind(b"\n", low, at) + 1, buf.find(b"\n", at, stop)

    @staticmethod
    def _clean(buf: bytes, start: int, end: int) -> CleanLine:
        return clean_line(_decode(buf[start:end]))

    def _first_full_stamp(self, buf: bytes, low: int, stop: int) -> tuple[datetime, int] | None:
        """The first full stamp in the lines after the newline at `low`, and the newline ending its line."""
        pos, next_stamp = low, self.finder.next_stamp
        while (at := next_stamp(buf, pos, stop)) is not None:
            start, end = self._line_around(buf, low, stop, at)
            stamp = self._clean(buf, start, end).timestamp
            if stamp is not None:
                return stamp, end
            pos = end  # stamp-like text that clean_line does not read as a stamp: go on after its line
        return None

    def _last_stamp(self, buf: bytes, low: int, stop: int, before: datetime | None) -> datetime | None:
        """The stamp LogScanner would hold after the lines between the newline at `low` and `stop`, or None when
        they change nothing; `before` is the one it held before them (it gives vLLM stamps their year)."""
        end, full_before = stop, _UNSET
        while (at := self._last_match(buf, low, end, full=False)) is not None:
            start, line_end = self._line_around(buf, low, stop, at - 1)
            cleaned = self._clean(buf, start, line_end)
            if cleaned.timestamp is not None:
                return cleaned.timestamp
            if cleaned.month_day_time is not None:
                if full_before is _UNSET:  # the last full stamp before this line, once: nearer lines have none
                    full_before = self._last_full_stamp(buf, low, start - 1) or before
                stamp = with_year(cleaned.month_day_time, cast("datetime | None", full_before))
                if stamp is not None:
                    return stamp
            end = start - 1
        return None

    def _last_match(self, buf: bytes, low: int, end: int, *, full: bool) -> int | None:
        """The end of the last stamp-like text in buf[low:end] (buf[low] is a newline): sre backwards over the
        whole lines of the last _BACK_WINDOW bytes, then RE2 over the rest."""
        window = buf.rfind(b"\n", low, end - _BACK_WINDOW) if end - low > _BACK_WINDOW else low
        match = (_FULL_STAMP_LAST if full else _STAMP_LAST).match(buf, window, end)
        if match is not None:
            return match.end()
        return self.finder.last_stamp(buf, low, window, full=full) if window > low else None

    def _last_full_stamp(self, buf: bytes, low: int, end: int) -> datetime | None:
        while (at := self._last_match(buf, low, end, full=True)) is not None:
            start, line_end = self._line_around(buf, low, end + 1, at - 1)
            stamp = self._clean(buf, start, line_end).timestamp
            if stamp is not None:
                return stamp
            end = start - 1
        return None


_UNSET: object = object()


def scan_bytes(data: bytes, uri: str, attempt_id: str | None = None, *, block: int = BLOCK_BYTES) -> LogScan:
    """The scan of a whole file's bytes (tests, small objects); the block scanner when there is a finder."""
    scanner = LogScanner(uri, attempt_id)
    finder = hit_finder()
    if finder is None:
        for raw in _text_lines(data):
            scanner.feed(raw)
    else:
        BlockScan(scanner, finder, block).run(lambda start, length: data[start : start + length])
    return scanner.finish()


def _text_lines(data: bytes) -> Iterator[str]:
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline=None)
    yield from bounded_lines(text)


# -- per attempt -----------------------------------------------------------------------------------------------

_SKIP_NAMES = re.compile(r"^python-core-.*|.*\.(?:gz|zst|bz2|xz|zip|tar|png|jpg|parquet|pt|safetensors|json)$")


def log_rank(uri: str) -> tuple[int, str]:
    """Scan order: finelog.log first (the aggregated stream), then its siblings, then worker logs, then the rest."""
    name = basename(uri)
    if name == "finelog.log":
        return (0, uri)
    if name.startswith("finelog"):
        return (1, uri)
    if name.startswith("worker-"):
        return (2, uri)
    return (3, uri)


def is_scanned_log(uri: str) -> bool:
    """Whether a file under an attempt's logs is scanned at all (archives, images, tensors and JSON are not)."""
    return not _SKIP_NAMES.match(basename(uri))


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
    """Stream one log file; a read failure keeps what was scanned and names the uri, line and cause."""
    scanner = LogScanner(uri, attempt_id)
    finder = hit_finder()
    try:
        if finder is None:
            for raw in storage.iter_lines(uri):
                scanner.feed(raw)
        else:  # ranged reads of BLOCK_BYTES: one request per 4 MiB, the same on every Storage
            BlockScan(scanner, finder).run(lambda start, length: storage.read_range(uri, start, length))
    except (StorageError, OSError, ValueError) as exc:
        scanner.scan.problems.append(f"log {uri} could not be read past line {scanner.scan.lines}: {exc}")
    return scanner.finish()


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


def assemble_attempt(attempt_id: str, files: list[LogScan]) -> AttemptScan:
    """An attempt's scan from its files' scans, given in `log_order`."""
    carry_error_seen(files)
    return AttemptScan(attempt_id=attempt_id, files=files, problems=[p for f in files for p in f.problems])


class AttemptLogs(Protocol):
    """Where an attempt's logs are (steps.layout.AttemptFiles has it): readers know no layout policy."""

    @property
    def attempt_id(self) -> str: ...

    @property
    def log_prefix(self) -> str | None: ...

    @property
    def log_objects(self) -> list[ObjectInfo]: ...


def attempt_log_objects(storage: Storage, attempt: AttemptLogs, start_after: str | None = None) -> Iterator[ObjectInfo]:
    """The attempt's log files in name order, after `start_after`: everything under its log prefix, listed now (a
    paged plan resumes here), or the files discovery named (a Slurm attempt's one `.out`)."""
    if attempt.log_prefix is not None:
        yield from list_in_name_order(storage, attempt.log_prefix, start_after)
        return
    for info in sorted(attempt.log_objects, key=lambda o: o.uri):
        if start_after is None or info.uri > start_after:
            yield info


def scan_attempt(storage: Storage, attempt: AttemptLogs) -> AttemptScan:
    """One attempt's scan in one go (a pre-cancel capture, tests, benches; the pipeline plans parts instead)."""
    uris = log_order(info.uri for info in attempt_log_objects(storage, attempt))
    return assemble_attempt(attempt.attempt_id, [scan_log(storage, uri, attempt.attempt_id) for uri in uris])
