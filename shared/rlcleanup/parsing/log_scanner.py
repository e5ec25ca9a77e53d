"""One streaming pass over a training log: metric rows, trainer events and error candidates.

`LogScanner` is the state machine fed one line at a time: it reads each line with the grammar (log_grammar.py),
follows a traceback across its lines (chained ones merged), pairs a `terminate called` line with its `what():`,
judges teardown noise (parsing/teardown.py) and hands metric lines to the metric parser. Memory is bounded per file:
a traceback keeps a capped head and tail, the error list is capped, and the metric parser caps its legacy-dict
buffer. The block engine (log_engine.py) drives the same scanner over raw bytes, feeding only the lines that can
matter; `scan_lines` feeds every line (the reference the engine is held to).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rlcleanup.models.parts import SegmentSeed
from rlcleanup.parsing.infra_statements import statement_for, statement_message
from rlcleanup.parsing.log_grammar import (
    CHAIN_LINES,
    EVENT_GATES,
    EVENT_HINTS,
    EVENT_PATTERNS,
    FATAL_HINTS,
    FATAL_LINES,
    MAX_EVENT_TEXT,
    MAX_MATCH_CHARS,
    ORPHAN_EXCEPTION,
    SKYRL_TRAINING_FAILED,
    TRACEBACK_HEADER,
    WHAT_LOOKAHEAD,
    EventKind,
    exception_line,
)
from rlcleanup.parsing.metrics import CleanLine, MetricParser, MetricRow, clean_line
from rlcleanup.parsing.teardown import causal_what_payload, teardown_for, watchdog_cuda_payload

TRACEBACK_MAX_LINES = 200
TRACEBACK_MAX_BYTES = 64 * 1024
TRACEBACK_TAIL_LINES = 40  # kept past the cap, so the final `ErrorType: message` is never lost
MAX_ERRORS_PER_FILE = 64  # later ones are counted, not kept (64 ranks can print the same traceback)
MAX_FOREIGN_IN_TRACEBACK = 20  # interleaved lines from other processes tolerated inside a traceback
MAX_NOISE_PER_FILE = 16  # teardown lines kept as symptoms; 64 ranks' watchdog lines must not crowd out a cause


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
    kind: str  # "traceback" | "fatal_line" | "statement" | "orphan_line" (an exception line without its traceback)
    causal: bool = True
    noise: str | None = None  # the TeardownWording's name when it is teardown noise
    noise_reason: str | None = None
    timestamp: datetime | None = None  # the line's own stamp, else the last stamp seen before it in the file
    truncated: bool = False
    complete: bool = True  # False when the file ended before the final `ErrorType: message`
    # The after-error-only rule that would make this (causal) error noise had an earlier file of the attempt
    # shown an error. Files are scanned independently (in parallel parts); `carry_error_seen` applies it.
    noise_after_error: str | None = None
    # The infrastructure statement (parsing/infra_statements.py) this error is, by name: it outranks the attempt's
    # other causes (steps/first_cause.py) and is never teardown.
    statement: str | None = None


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
        self.stated_type: str | None = None  # the type a tracker's header names (SkyRL's `... with <Type>:`)
        self.orphan = False  # opened by an exception line printed without its traceback (log_grammar.ORPHAN_EXCEPTION)

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


def from_header(text: str) -> str:
    """The traceback header line without what was glued in front of it. A progress bar (tqdm: "Training Batches
    Processed", "Training Step Progress") redraws with a bare `\r` and no newline, so in a pod log the traceback's
    first line lands on the bar's physical line (run-layout-v3.md §7 [KL]); even split at the `\r`, the last bar
    frame and the header share a line. The stored traceback starts at the header."""
    return text[text.index(TRACEBACK_HEADER) :]


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

    The block engine (log_engine.BlockScan) feeds only the lines its hit patterns find (and every line inside a
    traceback or a metric block); a line it skips may only be counted and carry a timestamp. A new per-line effect in
    `feed` or `clean_line` therefore needs its pattern in `log_engine.hit_patterns` or the stamp search
    (test_logs_differential.py)."""

    def __init__(self, uri: str, attempt_id: str | None = None, *, error_seen: bool = False) -> None:
        self.scan = LogScan(uri=uri, attempt_id=attempt_id)
        self._metrics = MetricParser(uri, attempt_id)
        self._tb: _Traceback | None = None
        self._error_seen = error_seen  # for after-error-only noise rules (carried across an attempt's files)
        # The last stamp seen (a vLLM stamp given its year): a line without one is stamped with it. The block engine
        # sets it too, for the stamped lines it counts without feeding them.
        self.latest_stamp: datetime | None = None
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
    def metric_blocks_dropped(self) -> int:
        """Legacy metric blocks dropped so far (a cut log's segment counts its own from a point on)."""
        return self._metrics.dropped_blocks

    @property
    def busy(self) -> bool:
        """Inside a traceback or a legacy metric block: every next line must be fed, whatever it holds."""
        return self._tb is not None or self._metrics.in_block

    def feed(self, raw: str, cleaned: CleanLine | None = None) -> None:
        """One line; `cleaned` is clean_line(raw) when the caller has it already (the block engine does)."""
        scan = self.scan
        scan.lines += 1
        lineno = scan.lines
        cleaned = clean_line(raw) if cleaned is None else cleaned
        if cleaned.timestamp is None and cleaned.month_day_time is not None:
            cleaned = CleanLine(cleaned.text, self._with_year(cleaned.month_day_time), None)
        if cleaned.timestamp is not None:
            self.latest_stamp = cleaned.timestamp
            scan.first_timestamp = scan.first_timestamp or cleaned.timestamp
            scan.last_timestamp = cleaned.timestamp
        text = cleaned.text
        row = self._metrics.feed(raw, lineno, cleaned)
        if row is not None:
            scan.metric_rows.append(row)
        self._event(text[:MAX_MATCH_CHARS], lineno, cleaned.timestamp)
        if self._tb is not None and self._traceback_line(text):
            return
        if TRACEBACK_HEADER in text:
            self._tb = _Traceback(lineno, cleaned.timestamp or self.latest_stamp)
            self._tb.add(from_header(text))
            return
        if "Training failed at step" in text and (failed := SKYRL_TRAINING_FAILED.search(text)):
            self._tb = _Traceback(lineno, cleaned.timestamp or self.latest_stamp)
            self._tb.add(failed.group(0))
            self._tb.stated_type = failed.group("type")
            return
        self._fatal_line(text[:MAX_MATCH_CHARS], lineno, cleaned.timestamp or self.latest_stamp)

    def resume(self, seed: SegmentSeed) -> None:
        """Start where a cut log's earlier segments left off (the scalar state at the seed's overlap start)."""
        self.scan.lines = seed.lines
        self.scan.first_timestamp, self.scan.last_timestamp = seed.first_timestamp, seed.last_timestamp
        self.latest_stamp = seed.last_timestamp
        self._error_seen = seed.error_seen

    def seed(self, warm: int, start: int, at_warm: SegmentSeed | None = None) -> SegmentSeed:
        """This scanner's state as the next segment's seed: scalars now (or as `at_warm` took them at its overlap
        start), caps counters now (at its first own line)."""
        here = at_warm or SegmentSeed(
            warm=warm,
            start=start,
            lines=self.scan.lines,
            first_timestamp=self.scan.first_timestamp,
            last_timestamp=self.latest_stamp,
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
        return pending is not None and self.scan.lines - pending.line < WHAT_LOOKAHEAD

    def _with_year(self, month_day_time: str) -> datetime | None:
        return with_year(month_day_time, self.latest_stamp)

    def finish(self) -> LogScan:
        if self._tb is not None:
            self._close_traceback()
        self._metrics.finish()
        self.scan.metric_blocks_dropped = self._metrics.dropped_blocks
        return self.scan

    def _event(self, text: str, lineno: int, timestamp: datetime | None) -> None:
        if not any(hint in text for hint in EVENT_HINTS):
            return
        for (kind, pattern), gate in zip(EVENT_PATTERNS, EVENT_GATES, strict=True):
            if gate is not None and gate not in text:
                continue  # the literal every match holds is absent: the search cannot match
            match = pattern.search(text)
            if not match:
                continue
            groups = match.groups()
            step = int(groups[0]) if groups else None
            max_steps = int(groups[1]) if len(groups) > 1 else None
            self.scan.events.append(
                TrainerEvent(kind, self.scan.uri, lineno, step, text[:MAX_EVENT_TEXT], timestamp, max_steps)
            )
            return

    def _traceback_line(self, text: str) -> bool:
        """Consume a line into the open traceback; False when the traceback has ended (line not consumed)."""
        tb = self._tb
        assert tb is not None
        stripped = text.strip()
        if tb.state == "chain":  # between chained tracebacks: blanks, the chain sentence, the next header
            if not stripped or stripped in CHAIN_LINES:
                tb.add(text)
                tb.chained = tb.chained or bool(stripped)
                return True
            if tb.chained and TRACEBACK_HEADER in text:  # else: a separate traceback
                tb.add(from_header(text))
                tb.state, tb.chained = "frames", False
                return True
            self._close_traceback()
            return False
        if TRACEBACK_HEADER in text and tb.state == "frames" and tb.stated_type is not None and len(tb.head) == 1:
            tb.add(from_header(text))  # the header right after a tracker's `Training failed ...` line: one traceback
            return True
        if TRACEBACK_HEADER in text and tb.state == "tail":
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
        exc = exception_line(stripped, strict=tb.state == "tail")
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
        etype, message = tb.segments[0] if tb.segments else (tb.stated_type or "<incomplete traceback>", "")
        signatures = [f"{t}: {m}" for t, m in tb.segments] or [f"{etype}: {message}"]
        stated = next((found for sig in signatures if (found := statement_for(sig)) is not None), None)
        self._add_error(
            ErrorCandidate(
                source_uri=self.scan.uri,
                attempt_id=self.scan.attempt_id,
                line=tb.line,
                error_type=etype,
                message=message,
                traceback=tb.text(),
                timestamp=tb.timestamp,
                kind="orphan_line" if tb.orphan else "traceback",
                truncated=tb.omitted > 0 or len(tb.tail) > 0,
                complete=complete,
                statement=stated.name if stated is not None else None,
            ),
            signatures,
        )

    def _fatal_line(self, text: str, lineno: int, timestamp: datetime | None) -> None:
        stripped = text.strip()
        lowered = stripped.lower()
        if not stripped or not any(hint in lowered for hint in FATAL_HINTS):
            return
        pending = self._pending_terminate
        if pending is not None and lineno - pending.line > WHAT_LOOKAHEAD:
            pending = self._pending_terminate = None
        if stripped.startswith("what():"):
            payload = causal_what_payload(stripped)
            if pending is not None:
                # The `what():` line finishes the `terminate called ...` report: keep both lines as one candidate.
                self._pending_terminate = None
                pending.traceback = f"{pending.traceback}\n{stripped}"[:TRACEBACK_MAX_BYTES]
                pending.message = (payload or stripped.removeprefix("what():").strip())[:MAX_EVENT_TEXT]
                if payload is not None and not pending.causal:
                    # run-layout-v2.md §7: a what() payload carrying a CUDA or NCCL error is causal.
                    pending.causal, pending.noise, pending.noise_reason = True, None, None
                return
            if payload is not None:
                self._add_error(self._line_error(lineno, "C++ exception", payload, stripped, timestamp), None)
                return
        # An infrastructure statement first: it says why a process died, even in a teardown wrapper's message.
        stated = statement_for(stripped, lowered)
        if stated is not None:
            # An exception line that states it (`ray.exceptions.OutOfMemoryError: Task was killed due to ...`) keeps
            # its own type and message, as Python printed them.
            exc = exception_line(stripped, strict=True)
            etype, said = exc if exc is not None else (stated.error_type, statement_message(stated, stripped))
            error = self._line_error(lineno, etype, said, stripped, timestamp)
            error.kind, error.statement = "statement", stated.name
            self._add_error(error, None)
            return
        if (carried := watchdog_cuda_payload(stripped)) is not None:  # the watchdog carries a CUDA error: causal
            self._add_error(self._line_error(lineno, "CUDAError", carried, stripped, timestamp), None)
            return
        # Teardown next (§7): prose that names a signal or an error word is not a cause.
        rule = teardown_for(stripped, error_seen=self._error_seen)
        if rule is not None:
            error = self._line_error(lineno, rule.name, stripped, stripped, timestamp)
            error.kind, error.causal, error.noise, error.noise_reason = "noise_line", False, rule.name, rule.reason
            self._add_error(error, None)
            if rule.name == "dist_backend_terminate":
                error.error_type, error.message = "c10::DistBackendError", stripped[:MAX_EVENT_TEXT]
                self._pending_terminate = error
            return
        for pattern, etype in FATAL_LINES:
            match = pattern.search(stripped)
            if match:
                message = (match.group(1) if pattern.groups else stripped).strip() or stripped
                error = self._line_error(lineno, etype, message, stripped, timestamp)
                self._add_error(error, None)
                if etype == "C++ exception":
                    self._pending_terminate = error
                return
        if orphan := ORPHAN_EXCEPTION.match(stripped):
            # Read as a traceback already past its frames: the indented lines after it continue its message
            # (`Error(s) in loading state_dict for X:` then `\tsize mismatch for …`), the next plain line ends it.
            self._tb = _Traceback(lineno, timestamp)
            self._tb.add(stripped)
            self._tb.current = (orphan.group("type"), orphan.group("msg").strip())
            self._tb.state, self._tb.orphan = "tail", True

    def _line_error(
        self, lineno: int, etype: str, message: str, line: str, timestamp: datetime | None
    ) -> ErrorCandidate:
        return ErrorCandidate(
            source_uri=self.scan.uri,
            attempt_id=self.scan.attempt_id,
            line=lineno,
            error_type=etype,
            message=message[:MAX_EVENT_TEXT],
            traceback=line[:TRACEBACK_MAX_BYTES],
            kind="fatal_line",
            timestamp=timestamp,
        )

    def _add_error(self, error: ErrorCandidate, signatures: list[str] | None) -> None:
        if error.causal and error.statement is None:
            # A traceback is noise only when every chained exception in it is noise.
            rules = [
                teardown_for(sig, error_seen=self._error_seen)
                for sig in (signatures or [f"{error.error_type}: {error.message}"])
            ]
            if rules and all(r is not None for r in rules):
                first = rules[0]
                assert first is not None
                error.causal, error.noise, error.noise_reason = False, first.name, first.reason
            elif not self._error_seen:
                later = [
                    teardown_for(sig, error_seen=True)
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
