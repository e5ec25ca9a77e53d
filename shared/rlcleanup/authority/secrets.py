"""Secret scan of every byte that would be published, in the form it is published (the staged copy).

What a file is comes from parsing it, never from its name:
- a safetensors file whose header parses and whose tensors exactly fill the rest of the file: the header (names,
  `__metadata__`) is scanned; tensor bytes are the only bytes not scanned;
- a file without NUL bytes: text, every byte scanned (no line is cut, however long);
- anything else: refused as unscannable (not published), never skipped.

Text is read in blocks. A fast pre-filter (one compiled alternation of every rule's anchor, run over whole
blocks) finds candidate lines; only those go through detect-secrets' plugins and our own rules, which are
registered as detect-secrets plugins (rlcleanup.authority.secret_plugins) so allowlist comments and baselines
work. Each block is also scanned as decoded: JSON/unicode escapes undone, backslash-continued lines and string
concatenations joined, base64 runs decoded. Findings name the object, the 1-based line and the rule, never the
secret itself. The rule set is listed in docs/authority.md.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rlcleanup.authority import secret_prefilter as prefilter
from rlcleanup.authority.secret_views import (
    WINDOW,
    b64_decoded,
    decoded_run,
    iter_line_views,
    line_views,
    unescape,
)
from rlcleanup.formats.safetensors_header import CorruptHeaderError, read_header
from rlcleanup.ports.storage import ObjectInfo, Storage

# Entropy detectors flag every git SHA and tokenizer merge; an IP address is not a credential.
_SKIPPED_PLUGINS = {"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"}
_BLOCK = 4 * 1024 * 1024
_SNIFF = 8192
# The longest line the scan holds (a line is read whole; its windows are scanned one by one). Past it the file is
# refused as unscannable, never published unscanned: time and memory per file stay bounded.
MAX_LINE_BYTES = 16 * 1024 * 1024
# A PNG's compressed text chunks may inflate to at most this much in all, and no chunk more than this ratio
# (beyond its first 64 KiB): a 0.5 MB PNG inflating to 512 MiB is refused, not scanned.
PNG_TEXT_MAX_BYTES = 16 * 1024 * 1024
PNG_MAX_INFLATION_RATIO = 100
_PLUGIN_FILE = Path(__file__).with_name("secret_plugins.py")
_SESSION_LOCK = threading.RLock()  # detect-secrets settings are process-global


class ScanBoundExceeded(Exception):
    """A file whose scan would pass a bound (a line's length, a PNG's inflated text): refused, never published."""


@dataclass(frozen=True)
class Finding:
    uri: str
    line: int
    rule: str

    def __str__(self) -> str:
        return f"{self.uri}:{self.line}: {self.rule}"


@dataclass
class ScanReport:
    findings: list[Finding]
    scanned: list[str]
    skipped: list[str] = field(default_factory=list)  # tensor data sections (identified by parsing), with why
    refused: list[str] = field(default_factory=list)  # objects whose bytes could not be scanned: never published

    @property
    def clean(self) -> bool:
        return not self.findings and not self.refused


# ---------------------------------------------------------------- detect-secrets, restricted to candidate lines


def plugins_used() -> list[dict[str, str]]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
    own = set(_our_plugin_names())
    names = sorted({c.__name__ for c in classes} - own - _SKIPPED_PLUGINS)
    return [{"name": n} for n in names] + [{"name": n, "path": f"file://{_PLUGIN_FILE}"} for n in sorted(own)]


@cache
def _our_plugin_names() -> tuple[str, ...]:
    from rlcleanup.authority import secret_plugins

    return tuple(cls.__name__ for cls in secret_plugins.PLUGINS)


@cache
def _settings() -> dict[str, Any]:
    return {"plugins_used": plugins_used()}  # default filters: allowlist comments, heuristics


@contextmanager
def detect_secrets_session() -> Iterator[None]:
    """detect-secrets configured with our plugin set for the duration of a scan (configuring it per line would
    cost more than the scan). Its plugin-class mapping is cached: cleared so our file plugins are found."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.settings import transient_settings

    settings = _settings()
    get_mapping_from_secret_type_to_class.cache_clear()
    with _SESSION_LOCK, transient_settings(settings):
        get_mapping_from_secret_type_to_class.cache_clear()
        yield
    get_mapping_from_secret_type_to_class.cache_clear()


def _line_findings(line: str) -> set[str]:
    from detect_secrets.core.scan import scan_line

    return {secret.type for secret in scan_line(line)}


def rules() -> list[str]:
    """The rule set in force (docs/authority.md lists it)."""
    return [p["name"] for p in plugins_used()]


# ---------------------------------------------------------------- the two scan paths over a text


def reference_findings(text: str) -> set[tuple[int, str]]:
    """The slow path: every detect-secrets plugin on every view of every line, (1-based line, rule). The fast
    scan must find exactly these (the differential test and bench/bench_secret_scan.py compare them)."""
    lines = text.split("\n")
    found: set[tuple[int, str]] = set()
    with detect_secrets_session():
        for i, line in enumerate(lines):
            for view in line_views(line, lines[i + 1] if i + 1 < len(lines) else None):
                found |= {(i + 1, rule) for rule in _line_findings(view)}
    return found


def scan_string(text: str, uri: str, first_line: int = 1) -> list[Finding]:
    """Findings in a text (first line numbered first_line): pre-filter, then every rule on candidate lines."""
    with detect_secrets_session():
        return _scan_string(text, uri, first_line)


@cache
def _regexes() -> tuple[Any, Any, Any]:
    """(block, view, base64-run) RE2 regexes of the rule set in force (fixed for the process: _settings)."""
    with detect_secrets_session():
        return prefilter.block_regex(), prefilter.view_regex(), prefilter.b64_run_regex()


def _candidates(buf: bytes) -> Iterator[tuple[int, int, int, bool]]:
    """(line index, start, end, rule or trigger hit) in buf (UTF-8, newline-normalised) of every line some rule
    or decoder could fire on: one RE2 pass of the relaxed rules and decoder triggers over the whole block, one
    for base64 runs, and every line longer than a window (a window starts a line of its own, where `^` could
    match). A line found only by the base64 pass cannot match a rule as written (the first pass would have)."""
    block_rx, _, b64_rx = _regexes()
    hits: dict[int, tuple[int, int, bool]] = {}

    def mark(pos: int, hit: bool) -> int:
        start = buf.rfind(b"\n", 0, pos) + 1
        end = buf.find(b"\n", pos)
        end = len(buf) if end < 0 else end
        hits[start] = (start, end, hit or hits.get(start, (0, 0, False))[2])
        return end + 1

    pos = 0
    while pos <= len(buf) and (m := block_rx.search(buf, pos)) is not None:
        pos = mark(m.start(), True)
    # Every base64 run; its line is a candidate only when the run decodes to printable text (decoded_run, what
    # b64_decoded yields for it): a line found only here is scanned through those decodings alone, so a run that
    # decodes to nothing (`AsyncVLLMInferenceEngine` on every vLLM metrics line) adds nothing to scan.
    for m in b64_rx.finditer(buf):
        run_start, run_end = m.span(1)  # the run itself (the match may begin with the character before it)
        padded_end = run_end + len(buf[run_end : run_end + 2]) - len(buf[run_end : run_end + 2].lstrip(b"="))
        if decoded_run(buf[run_start:padded_end].decode("ascii")) is not None:
            mark(run_start, False)
    # A line over WINDOW bytes holds a whole aligned segment of half that without a newline: find those by
    # memchr over each segment instead of splitting the block into lines.
    # Each line is looked at once: after a segment without a newline the loop jumps past that line's end, so the
    # work is linear in the block however long its lines are (looking back to the line's start from every segment
    # of it made a 32 MiB line cost 8192 scans of up to 32 MiB).
    step = WINDOW // 2
    seg = 0
    while seg + step <= len(buf):
        if buf.find(b"\n", seg, seg + step) >= 0:
            seg += step
            continue
        start = buf.rfind(b"\n", 0, seg) + 1  # the segment before held a newline (or this is the first)
        end = buf.find(b"\n", seg)
        end = len(buf) if end < 0 else end
        if end - start > WINDOW:
            mark(seg, True)
        seg = max(seg + step, (end // step) * step)
    newline_before, counted_to = 0, 0
    for start in sorted(hits):
        newline_before += buf.count(b"\n", counted_to, start)
        counted_to = start
        yield newline_before, *hits[start]


def _scan_string(text: str, uri: str, first_line: int = 1, lookahead: bool = False) -> list[Finding]:
    return _scan_buf(text.encode("utf-8", errors="surrogatepass"), uri, first_line, lookahead)


def _scan_buf(buf: bytes, uri: str, first_line: int = 1, lookahead: bool = False) -> list[Finding]:
    """Findings in a newline-normalised UTF-8 text; with lookahead its last line is only the line after the
    others (joins reach into it) and is scanned with the next block."""
    last = buf.count(b"\n")  # index of the last line
    view_search = _regexes()[1].search
    found: set[Finding] = set()
    for i, start, end, hit in _candidates(buf):
        if lookahead and i == last:
            continue
        line = buf[start:end].decode("utf-8", errors="surrogatepass")
        if hit:
            following = None
            if i < last:
                nxt = buf.find(b"\n", end + 1)
                following = buf[end + 1 : len(buf) if nxt < 0 else nxt].decode("utf-8", errors="surrogatepass")
            views: Iterable[str] = iter_line_views(line, following)  # one at a time: a long line's windows
        else:  # no rule or trigger on the line, and it is one window: only its decoded base64 can differ
            views = {v for decoded in b64_decoded(line) for v in (decoded, unescape(decoded))}
        seen: set[str] = set()  # a view repeated nearby (an unchanged decoding) is checked once
        for view in views:
            if view in seen:
                continue
            if len(seen) >= 256:  # bounded: a long line's windows are not all held at once
                seen.clear()
            seen.add(view)
            if view_search(view.encode("utf-8", errors="surrogatepass")) is not None:
                found |= {Finding(uri, first_line + i, rule) for rule in _line_findings(view)}
    return sorted(found, key=lambda f: (f.line, f.rule))


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n")


def _normalised(data: bytes) -> bytes:
    """What _decode(data).encode() gives, without the round trip when the bytes are already valid UTF-8."""
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return _decode(data).encode("utf-8")
    return data.replace(b"\r\n", b"\n") if b"\r" in data else data


def _blocks(storage: Storage, info: ObjectInfo) -> Iterator[tuple[int, bytes, bool]]:
    """(first line number, normalised UTF-8 text, lookahead) per block, split on line ends, never inside a line
    (a line longer than a block is read whole). Each block's last line is also the next block's first: joins
    across the block edge see it, and it is scanned once, with the next block (lookahead)."""
    offset, line_no, carry = 0, 1, b""
    while True:
        chunk = storage.read_range(info.uri, offset, min(_BLOCK, info.size - offset)) if offset < info.size else b""
        offset += len(chunk)
        data = carry + chunk
        if not chunk:
            yield line_no, _normalised(data), False
            return
        cut = data.rfind(b"\n")
        prev = data.rfind(b"\n", 0, cut) if cut > 0 else -1
        if prev < 0:  # fewer than two whole lines: read on
            if len(data) - (cut + 1) > MAX_LINE_BYTES:
                raise ScanBoundExceeded(
                    f"line {line_no + (1 if cut >= 0 else 0)} is longer than the scan's bound of {MAX_LINE_BYTES} "
                    "bytes without a line end"
                )
            carry = data
            continue
        text = _normalised(data[: cut + 1])[:-1]  # whole lines; the last one is the look-ahead
        yield line_no, text, True
        line_no += text.count(b"\n")
        carry = data[prev + 1 :]


def scan_text(storage: Storage, info: ObjectInfo) -> list[Finding]:
    found: list[Finding] = []
    for first, text, lookahead in _blocks(storage, info):
        found.extend(_scan_buf(text, info.uri, first, lookahead))
    return sorted(set(found), key=lambda f: (f.line, f.rule))


# ---------------------------------------------------------------- what a file is, by parsing


def _tensor_header(storage: Storage, info: ObjectInfo) -> Any | None:
    """The safetensors header when the file is one whose tensors exactly fill the rest; else None."""
    try:
        header = read_header(storage, info.uri, info.size)
    except CorruptHeaderError:
        return None
    return header if 8 + header.header_len + header.data_end == info.size else None


_PNG = b"\x89PNG\r\n\x1a\n"
_PNG_MAX = 64 * 1024 * 1024


def _inflate(compressed: bytes, room: int, uri: str) -> bytes | None:
    """A zlib stream inflated without ever holding more than the bounds allow: at most `room` bytes (what is left
    of the PNG's text budget) and at most PNG_MAX_INFLATION_RATIO times its compressed size beyond 64 KiB. Past a
    bound: ScanBoundExceeded (refused); not a zlib stream: None (a PNG that does not parse)."""
    limit = min(room, 64 * 1024 + PNG_MAX_INFLATION_RATIO * len(compressed))
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(compressed, limit + 1)  # never more than the bound (+1 to see it passed)
    except zlib.error:
        return None
    if len(out) > limit or (inflater.unconsumed_tail and not inflater.eof):
        raise ScanBoundExceeded(
            f"a compressed text chunk inflates past {limit} bytes ({len(compressed)} bytes compressed; bounds: "
            f"{PNG_MAX_INFLATION_RATIO}x its size, {PNG_TEXT_MAX_BYTES} bytes of text per PNG)"
        )
    if not inflater.eof:
        return None  # truncated stream
    return out


def _png_texts(storage: Storage, info: ObjectInfo) -> str | None:
    """Every text a PNG carries (tEXt, zTXt, iTXt, eXIf and any chunk that is not image data), one per line;
    None when the chunk structure does not parse to its end. Image data (IHDR/PLTE/IDAT/IEND) is the exemption."""
    if info.size > _PNG_MAX:
        return None
    data = storage.read_bytes(info.uri, _PNG_MAX)
    pos, texts, budget_used = len(_PNG), list[str](), 0
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if len(body) != length or pos + 12 + length > len(data):
            return None
        pos += 12 + length
        if kind in {b"IHDR", b"PLTE", b"IDAT", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"pHYs", b"bKGD", b"IEND"}:
            if kind == b"IEND":
                trailing = data[pos:]
                return "\n".join(texts) + ("\n" + trailing.decode("utf-8", "replace") if trailing else "")
            continue
        if kind == b"zTXt" and b"\x00" in body:
            key, rest = body.split(b"\x00", 1)
            inflated = _inflate(rest[1:], PNG_TEXT_MAX_BYTES - budget_used, info.uri)
            if inflated is None:
                return None
            body = key + b" " + inflated
        elif kind == b"iTXt":
            parts = body.split(b"\x00", 2)
            if len(parts) == 3 and len(parts[1]) >= 1 and parts[1][:1] == b"\x01":
                tail = parts[2][1:].split(b"\x00", 2)  # method, language, translated keyword, text
                inflated = _inflate(tail[-1], PNG_TEXT_MAX_BYTES - budget_used, info.uri)
                if inflated is None:
                    return None
                body = parts[0] + b" " + inflated
        budget_used += len(body)
        if budget_used > PNG_TEXT_MAX_BYTES:
            raise ScanBoundExceeded(f"its text chunks hold more than {PNG_TEXT_MAX_BYTES} bytes")
        texts.append(body.replace(b"\x00", b" ").decode("utf-8", "replace"))
    return None  # no IEND: truncated or not a PNG


def scan_object(storage: Storage, info: ObjectInfo, report: ScanReport) -> None:
    header = _tensor_header(storage, info) if info.size >= 8 else None
    if header is not None:
        head = storage.read_range(info.uri, 8, header.header_len).decode("utf-8", errors="replace")
        report.findings.extend(Finding(f"{info.uri}#header", f.line, f.rule) for f in _scan_string(head, info.uri))
        report.scanned.append(f"{info.uri}#header")
        report.skipped.append(f"{info.uri}: {header.data_end} tensor bytes (parsed as safetensors)")
        return
    sniff = storage.read_range(info.uri, 0, min(_SNIFF, info.size)) if info.size else b""
    if sniff.startswith(_PNG):  # our own report images: their text chunks are scanned, pixels are not text
        try:
            texts = _png_texts(storage, info)
        except ScanBoundExceeded as exc:
            report.refused.append(f"{info.uri}: a PNG past the scan's bounds: {exc}")
            return
        if texts is None:
            report.refused.append(f"{info.uri}: a PNG whose chunks do not parse")
            return
        report.findings.extend(Finding(f"{info.uri}#text", f.line, f.rule) for f in _scan_string(texts, info.uri))
        report.scanned.append(f"{info.uri}#text")
        report.skipped.append(f"{info.uri}: image data (parsed as PNG)")
        return
    if b"\x00" in sniff:
        report.refused.append(f"{info.uri}: binary and not a parsed tensor file")
        return
    try:
        found = scan_text(storage, info)
    except ScanBoundExceeded as exc:
        report.refused.append(f"{info.uri}: past the scan's bounds: {exc}")
        return
    report.findings.extend(found)
    report.scanned.append(info.uri)


def scan_objects(storage: Storage, objects: Iterable[ObjectInfo]) -> ScanReport:
    report = ScanReport(findings=[], scanned=[])
    with detect_secrets_session():
        for info in objects:
            scan_object(storage, info, report)
    return report
