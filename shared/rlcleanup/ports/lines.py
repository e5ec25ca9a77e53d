"""Bounded line reading, the line semantics of Storage.iter_lines: shared by every adapter and the block log
scanner, so one over-long line is never read into memory whole and both readers number lines alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TextIO

# The log scanner never looks past this much of a line (parsing.metrics.MAX_LINE_CHARS), so nothing is lost.
MAX_LINE_CHARS = 1024 * 1024


def bounded_lines(fh: TextIO, max_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Lines without their newline; a longer line is cut at max_chars and its rest skipped (numbering kept)."""
    while line := fh.readline(max_chars):
        if len(line) == max_chars and not line.endswith("\n"):
            while (rest := fh.readline(max_chars)) and not rest.endswith("\n"):
                pass
        yield line.rstrip("\n")
