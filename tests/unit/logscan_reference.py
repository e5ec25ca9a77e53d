"""The line scanner, as the block scanner's differential reference: every line of a file fed to LogScanner.

`reference_scan` reads a file the way `LocalStorage.iter_lines` does (text mode, universal newlines, UTF-8 with
replacement, lines cut at MAX_LINE_CHARS characters; that reading path is copied here, so a change to the product's
cannot move the reference with it) and feeds every line through the product's `scan_lines`, the line-at-a-time
scanner the block scanner replaced in `scan_log`. The block scanner must give exactly this scan: the same errors,
events, metric rows, line numbers, timestamps and counters.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import TextIO

from rlcleanup.parsing.log_scanner import LogScan, scan_lines

MAX_LINE_CHARS = 1024 * 1024


def bounded_lines(fh: TextIO, max_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    while line := fh.readline(max_chars):
        if len(line) == max_chars and not line.endswith("\n"):
            while (rest := fh.readline(max_chars)) and not rest.endswith("\n"):
                pass
        yield line.rstrip("\n")


def reference_lines(data: bytes) -> Iterator[str]:
    """The lines LocalStorage.iter_lines yields for a file holding `data`."""
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline=None)
    yield from bounded_lines(text)


def reference_scan(data: bytes, uri: str, attempt_id: str | None = None) -> LogScan:
    return scan_lines(reference_lines(data), uri, attempt_id)
