"""The block engine: a LogScanner driven over raw bytes, fed only the lines that can change its scan.

Feeding every line through LogScanner costs ~10 µs of Python per line (ANSI cleaning, a timestamp parse, a
lowercased look for hints), while well under 1% of a training log's lines can change a scan. The block engine
reads a file in blocks of raw bytes, finds the lines that can matter with one compiled multi-pattern search over
the block (RE2), and feeds only those lines, plus every line while a traceback or a legacy metric block is open,
through the same LogScanner. A line without a hit only counts, and may carry a timestamp: the first stamp of the
file and the last stamp before each hit are found by regex searches over the bytes, never by parsing every line.
The differential test (tests/unit/test_logs_differential.py) holds it to the line scanner's exact output.

Memory is bounded: one block of BLOCK_BYTES plus at most one partial line of MAX_LINE_BYTES.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import datetime
from typing import Protocol, cast

from rlcleanup.parsing.log_grammar import EVENT_HINTS, FATAL_HINTS, TRACEBACK_HEADER
from rlcleanup.parsing.log_scanner import LogScanner, with_year
from rlcleanup.parsing.metrics import MAX_LINE_CHARS, CleanLine, clean_line

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
    event hint, a traceback header, a fatal-line hint (matched on the lowercased line), a metric mirror line, a console
    tracker `Step N:` header or the start of a legacy dict block (`{` then a quote). A superset is harmless (the line is fed and judged exactly)."""
    patterns = [_tolerant(hint) for hint in EVENT_HINTS]
    patterns.append(_tolerant(TRACEBACK_HEADER))
    patterns += [_tolerant(hint, caseless=True) for hint in FATAL_HINTS]
    patterns.append(_tolerant("WANDB_MIRROR"))
    patterns.append(_tolerant("Step "))  # the console tracker's `Step N:` header names the next line's dict's step
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


@functools.cache
def hit_finder() -> HitFinder | None:
    """The process's finder, compiled on first use and kept (a cached factory, not a global the callers set);
    None without google-re2: the caller then feeds every line. Two threads racing on the first call may each compile
    one (~1 ms); the cache keeps one and both work alike."""
    try:
        return Re2Finder(hit_patterns())
    except ImportError:
        return None


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
        scan = self.scanner.scan
        while pos < cut and (end := next_hit(buf, pos, cut)) is not None:
            start = buf.rfind(b"\n", pos - 1, end) + 1  # hits never span a newline
            stop = buf.find(b"\n", end, cut)
            raw = _decode(buf[start:stop])
            cleaned = clean_line(raw)
            if cleaned.timestamp is not None and scan.first_timestamp is not None:
                # The hit line's own stamp replaces whatever the quiet lines before it held before anything reads
                # it (LogScanner.feed sets it first): count them, skip their stamp searches.
                scan.lines += buf.count(b"\n", pos, start)
            else:
                self._quiet(buf, pos, start)
            self.scanner.feed(raw, cleaned)
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
            scan.first_timestamp = scan.last_timestamp = scanner.latest_stamp = stamp
        last = self._last_stamp(buf, low, stop, scanner.latest_stamp)
        if last is not None:
            scan.last_timestamp = scanner.latest_stamp = last

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
