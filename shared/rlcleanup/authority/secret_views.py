"""The decoded views of a line the secret scan runs its rules on (authority/secrets.py): the line in overlapping
windows, each as written, JSON-unescaped, with string concatenations and continuations joined and base64 runs
decoded; the line's end joined with the next line's start; and a token cut in two across the line end. Both scan
paths (the reference and the fast one) use exactly these views, and no view is longer than two windows, so the
rules' work is linear in a line's length."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from functools import lru_cache

WINDOW, OVERLAP = 8192, 2048  # long lines are scanned in windows this size, overlapping this much

_B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
_JSON_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\([\\/\"nrt])")
# "ab" + "cd", "ab" "cd", 'ab' .. 'cd', across a line end too. Possessive: a quote before a long run of blanks
# would otherwise backtrack through every split of the run (8,000 blanks took 0.8 s; now microseconds). A newline
# needs no alternative of its own: it is a blank.
_CONCAT = re.compile(r"""(["'])\s*+(?:\+|\.\.|\\\n)?\s*+\1""")
_CONTINUATION = re.compile(r"\\\r?\n\s*")
_NON_PRINTABLE = re.compile(r"[^\x20-\x7e\t\n]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# A token cut in two, each half after text of its own ("A=hf_abc" / "B=def"): a line that ends in a fragment
# starting with a known token prefix is joined with the word after the next line's last `=`/`:` and with that
# line's last word. The prefilter's trigger (secret_prefilter.SPLIT_TOKEN_TRIGGER) is a superset of this one.
SPLIT_PREFIXES = ("hf_", "api_org_", "github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_")
_TAIL = "[ \t'\"`,;).]*"
_SPLIT_HEAD = re.compile(rf"(?<![A-Za-z0-9_])((?:{'|'.join(SPLIT_PREFIXES)})[A-Za-z0-9_]*){_TAIL}\Z")
_SPLIT_LAST = re.compile(rf"([A-Za-z0-9_]+){_TAIL}\Z")
_SPLIT_ASSIGNED = re.compile(r"[=:][ \t'\"`]*([A-Za-z0-9_]+)[^=:]*\Z")


def unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        return {"n": "\n", "r": "\r", "t": "\t"}.get(m.group(2), m.group(2))

    decoded = _JSON_ESCAPE.sub(one, text)
    if not _SURROGATE.search(decoded):
        return decoded
    # JSON writes a character beyond the BMP as an escaped surrogate pair ("\\ud83d\\ude00"): join the pairs as
    # JSON decoders do, and make a lone surrogate U+FFFD, so every view is encodable text (detect-secrets hashes
    # what it finds as UTF-8; a lone surrogate would crash the scan instead of scanning).
    return decoded.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def join_pieces(text: str) -> str:
    return _CONCAT.sub("", _CONTINUATION.sub("", text))


def _mixed_case(run: str) -> bool:
    return run.lower() != run and run.upper() != run  # C-speed: no per-character Python loop


def b64_decoded(line: str) -> Iterator[str]:
    """Printable text encoded in base64 runs. Only runs with both cases count: base64 of text always has both
    (and hex ids, lowercase paths and digits decode to nothing printable), which keeps the pre-filter narrow."""
    for m in _B64_RUN.finditer(line):
        text = decoded_run(m.group(0))
        if text is not None:
            yield text


# A trainer writes the same identifiers on every line (`AsyncVLLMInferenceEngine` in each vLLM metrics line, a
# mixed-case run of 24): their decoding is remembered instead of redone per line. Only short runs are kept, so the
# cache holds at most _RUN_CACHE_SIZE x _CACHED_RUN_CHARS characters of keys.
_CACHED_RUN_CHARS, _RUN_CACHE_SIZE = 256, 4096


def decoded_run(run: str) -> str | None:
    """The printable text one base64 run (as `_B64_RUN` matches it, padding included) decodes to; None when it
    decodes to nothing printable (or has one case only)."""
    return _decoded_short_run(run) if len(run) <= _CACHED_RUN_CHARS else _decode_run(run)


@lru_cache(maxsize=_RUN_CACHE_SIZE)
def _decoded_short_run(run: str) -> str | None:
    return _decode_run(run)


def _decode_run(run: str) -> str | None:
    if not _mixed_case(run):
        return None
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decode(run + "=" * (-len(run) % 4))
        except (binascii.Error, ValueError):
            continue
        text = raw.decode("utf-8", errors="ignore")
        if len(text) >= 16 and len(_NON_PRINTABLE.findall(text)) <= 0.1 * len(text):
            return text
    return None


def _windows(line: str) -> Iterator[str]:
    """A long line in overlapping windows: every rule still sees any secret whole (none is longer than the
    overlap), and no detector regex ever runs over a megabyte-long line."""
    if len(line) <= WINDOW:
        yield line
        return
    step = WINDOW - OVERLAP
    for start in range(0, len(line) - OVERLAP, step):
        yield line[start : start + WINDOW]


def _piece_views(piece: str) -> Iterator[str]:
    yield piece
    unescaped = unescape(piece)
    if unescaped != piece:
        yield unescaped
    whole = join_pieces(unescaped)
    if whole != unescaped:
        yield whole
    for decoded in b64_decoded(piece):
        yield decoded
        yield unescape(decoded)


def iter_line_views(line: str, following: str | None) -> Iterator[str]:
    """Every string the rules are run on for one line, one at a time: its windows, each as written,
    JSON-unescaped, with concatenations joined and base64 runs decoded; and the line's last window joined with
    the next line's first (a backslash continuation or a string concatenation across the line end: any secret
    it forms lies within a window of the end). Both scan paths use exactly these; no view is longer than two
    windows, so the rules' work is linear in the line's length."""
    for piece in _windows(line):
        yield from _piece_views(piece)
    if following is not None:
        across = join_pieces(unescape(line[-WINDOW:] + "\n" + following[:WINDOW]))
        if "\n" not in across:
            yield across
        # A token split across the line end with text before each half (its views are built from the two lines).
        yield from _split_token_views(line, following)


def line_views(line: str, following: str | None) -> list[str]:
    return list(iter_line_views(line, following))


def _split_token_views(line: str, following: str) -> list[str]:
    """A token prefix's fragment ending this line joined with the next line's second half (its assigned value,
    its last word): `A="hf_AbC..."` then `B="...xYz"` gives the whole token as a view of the first line."""
    head = _SPLIT_HEAD.search(line[-WINDOW:])
    if head is None:
        return []
    tail = following[-WINDOW:]
    halves = {m.group(1) for m in (_SPLIT_LAST.search(tail), _SPLIT_ASSIGNED.search(tail)) if m is not None}
    return sorted(head.group(1) + half for half in halves)
