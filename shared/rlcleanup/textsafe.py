"""The one neutraliser for text that reaches a person: every string from a run is data, never terminal control.

A log line, a config value, a file name or an error message a run wrote can hold escape sequences: OSC (`ESC ]`,
retitle a terminal, write a hyperlink or the clipboard), CSI (`ESC [`, move the cursor, clear the screen and print
a fake "all checks passed"), their 8-bit C1 forms (U+009B is CSI on its own), BEL, backspace and a carriage return
that overwrite what we printed, and Unicode bidi overrides/isolates that make a line read in another order than it
is stored (Trojan Source, CVE-2021-42574). `neutralise` turns every such code point into a visible `\\uXXXX`
escape: what was there stays readable, nothing acts on the terminal, the console or a browser.

One spelling for every surface: `\\uXXXX` is also a JSON string escape, so the same function keeps JSON output
valid and lossless (a JSON parser reads the original character back), while the raw character never reaches the
terminal. Newlines and tabs are kept by default (our own output is multi-line); `keep_newlines=False` escapes them
too, for a value that must stay on one line (a table cell, a field in a sentence). Lone surrogates (undecodable
bytes kept by `surrogateescape`) are escaped as well: they could not be printed at all.

This module sits at the bottom of the layers: it imports nothing from rlcleanup.
"""

from __future__ import annotations

import re

# Bidi embeddings/overrides/isolates and marks, the Arabic letter mark, and the Unicode line/paragraph separators
# (a terminal or a browser may break a line there: a fake new line).
_BIDI_AND_SEPARATORS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
# C0 controls but TAB and LF, DEL, C1 controls, the above, lone surrogates.
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}\ud800-\udfff]")
_UNSAFE_ONE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def neutralise(text: str, *, keep_newlines: bool = True) -> str:
    """`text` with every control, bidi and separator code point written as a visible `\\uXXXX` escape."""
    return (_UNSAFE if keep_newlines else _UNSAFE_ONE_LINE).sub(_escape, text)


def is_neutral(text: str, *, keep_newlines: bool = True) -> bool:
    """Whether `text` holds nothing `neutralise` would escape (what a surface's output must satisfy)."""
    return (_UNSAFE if keep_newlines else _UNSAFE_ONE_LINE).search(text) is None
