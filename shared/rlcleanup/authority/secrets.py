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

import base64
import binascii
import bisect
import re
import threading
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rlcleanup.formats.safetensors_header import CorruptHeaderError, read_header
from rlcleanup.ports.storage import ObjectInfo, Storage

# Entropy detectors flag every git SHA and tokenizer merge; an IP address is not a credential.
_SKIPPED_PLUGINS = {"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"}
_BLOCK = 4 * 1024 * 1024
_SNIFF = 8192
_WINDOW, _OVERLAP = 8192, 2048  # long lines are scanned in windows this size, overlapping this much
_PLUGIN_FILE = Path(__file__).with_name("secret_plugins.py")
_SESSION_LOCK = threading.RLock()  # detect-secrets settings are process-global

# Anchors of every rule (ours and detect-secrets' plugins): a line containing none of them cannot produce a
# finding. Literals are matched on the lowered text; rules without a literal anchor keep a case-sensitive regex.
# Keep in step with the plugins: the differential test (tests/unit/test_secret_scan_properties.py) checks that
# the pre-filtered scan finds what running every rule on every line finds.
_LITERALS = (
    "key", "secret", "token", "passw", "pwd", "pass", "auth", "credential", "bearer", "private", "api", "login",
    "-----begin", "putty", "akia", "asia", "a3t", "abia", "acca", "aws", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
    "github_pat_", "glpat-", "gldt-", "glptt-", "glrt-", "glsoat-", "glcbt-", "glffct-", "glft-", "glimt-",
    "glagent-", "gloas-", "xox", "hooks.slack", "sk_live", "rk_live", "sq0", "sg.", "hf_", "api_org_", "npm_",
    "pypi-", "aiza", "ya29.", "accountkey", "eyj", "discord", "twilio", "mailchimp", "artifactory", "ibm",
    "cloudant", "softlayer", "azure", "sk-", "t3blbkfj", "://", "wandb",
)  # fmt: skip
_LITERAL_RX = re.compile("|".join(re.escape(x) for x in sorted(_LITERALS, key=len, reverse=True)))
_ANCHOR_REGEXES = (
    re.compile(r"AKC[a-zA-Z0-9]{10}|AP[0-9ABCDEF][a-zA-Z0-9]{8}"),  # Artifactory
    re.compile(r"[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{20}"),  # Discord-shaped tokens
    re.compile(r"[0-9]{8,10}:[A-Za-z0-9_-]{35}"),  # Telegram bot tokens
    re.compile(r"(?:AC|SK)[a-z0-9]{32}"),  # Twilio
    re.compile(r"[0-9a-z]{32}-us[0-9]"),  # Mailchimp
)


def _anchored(text: str) -> bool:
    return _LITERAL_RX.search(text.lower()) is not None or any(p.search(text) for p in _ANCHOR_REGEXES)


_B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
_JSON_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\([\\/\"nrt])")
_CONCAT = re.compile(r"""(["'])\s*(?:\+|\.\.|\\\n|\n)?\s*\1""")  # "ab" + "cd", "ab" "cd", 'ab' .. 'cd'
_CONTINUATION = re.compile(r"\\\r?\n\s*")
_NEWLINE = re.compile(r"\n")
_NON_PRINTABLE = re.compile(r"[^\x20-\x7e\t\n]")
_JOIN_HINT = re.compile(r"""\\\r?\n|["']\s*(?:\+|\.\.)?\s*\r?\n""")
_PREFILTERS = (_B64_RUN, re.compile(r"\\u[0-9a-fA-F]{4}|\\[/\"]"), _JOIN_HINT, re.compile(r"[\"']\s*\+?\s*[\"']"))


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


# ---------------------------------------------------------------- decoded views of a text


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        return {"n": "\n", "r": "\r", "t": "\t"}.get(m.group(2), m.group(2))

    return _JSON_ESCAPE.sub(one, text)


def _joined(text: str) -> str:
    return _CONCAT.sub("", _CONTINUATION.sub("", text))


def _b64_decoded(line: str) -> Iterator[str]:
    for m in _B64_RUN.finditer(line):
        run = m.group(0)
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                raw = decode(run + "=" * (-len(run) % 4))
            except (binascii.Error, ValueError):
                continue
            text = raw.decode("utf-8", errors="ignore")
            if len(text) >= 16 and len(_NON_PRINTABLE.findall(text)) <= 0.1 * len(text):
                yield text
                break


def _views(line: str) -> Iterator[str]:
    yield line
    unescaped = _unescape(line)
    if unescaped != line:
        yield unescaped
    joined = _joined(unescaped)
    if joined != unescaped:
        yield joined
    for decoded in _b64_decoded(line):
        yield decoded
        yield _unescape(decoded)


def scan_string(text: str, uri: str, first_line: int = 1) -> list[Finding]:
    """Findings in a text (first line numbered first_line): pre-filter, then every rule on candidate lines."""
    with detect_secrets_session():
        return _scan_string(text, uri, first_line)


def _candidate_lines(text: str) -> list[int]:
    """Indexes of the lines any rule, decoder or join could fire on, from whole-block regex passes, so the
    per-line work (detect-secrets) runs on the few candidate lines instead of all of them."""
    ends = [m.start() for m in _NEWLINE.finditer(text)]
    hits: set[int] = set()
    passes: list[tuple[re.Pattern[str], str]] = [(_LITERAL_RX, text.lower())]
    passes += [(p, text) for p in (*_ANCHOR_REGEXES, *_PREFILTERS)]
    for pattern, haystack in passes:
        for m in pattern.finditer(haystack):
            if pattern is _B64_RUN and not _mixed_case(m.group(0)):
                continue  # hex ids and lowercase paths decode to nothing printable
            line = bisect.bisect_left(ends, m.start())
            hits.add(line)
            if pattern is _JOIN_HINT:  # a join reaches into the next line
                hits.add(line + 1)
    return sorted(hits)


def _mixed_case(run: str) -> bool:
    return run.lower() != run and run.upper() != run  # C-speed: no per-character Python loop


def _windows(line: str) -> Iterator[str]:
    """A long line in overlapping windows: every rule still sees any secret whole (none is longer than the
    overlap), and no detector regex ever runs over a megabyte-long line."""
    if len(line) <= _WINDOW:
        yield line
        return
    step = _WINDOW - _OVERLAP
    for start in range(0, len(line) - _OVERLAP, step):
        yield line[start : start + _WINDOW]


def _scan_string(text: str, uri: str, first_line: int = 1) -> list[Finding]:
    found: set[Finding] = set()
    lines = text.split("\n")
    for i in _candidate_lines(text):
        if i >= len(lines):
            continue
        line = lines[i]
        views = [v for piece in _windows(line) for v in _views(piece) if _anchored(v)]
        if i + 1 < len(lines):  # joins across a line end: continuations, "a" +<newline> "b"
            joined = _joined(_unescape(line + "\n" + lines[i + 1]))
            if "\n" not in joined and _anchored(joined):
                views.append(joined)
        for view in views:
            for rule in _line_findings(view):
                found.add(Finding(uri, first_line + i, rule))
    return sorted(found, key=lambda f: (f.line, f.rule))


def _blocks(storage: Storage, info: ObjectInfo) -> Iterator[tuple[int, str]]:
    """(first line number, text) per block, split on line ends; a line longer than a block is kept whole."""
    offset, line_no, carry = 0, 1, b""
    while offset < info.size:
        chunk = storage.read_range(info.uri, offset, min(_BLOCK, info.size - offset))
        if not chunk:
            break
        offset += len(chunk)
        data = carry + chunk
        cut = data.rfind(b"\n")
        if cut < 0 and offset < info.size:
            carry = data  # one very long line: keep reading until it ends (never cut, never skipped)
            continue
        head, carry = (data, b"") if offset >= info.size else (data[: cut + 1], data[cut + 1 :])
        text = head.decode("utf-8", errors="replace").replace("\r\n", "\n")
        yield line_no, text
        line_no += text.count("\n")
    if carry:
        yield line_no, carry.decode("utf-8", errors="replace")


def scan_text(storage: Storage, info: ObjectInfo) -> list[Finding]:
    found: list[Finding] = []
    for first, text in _blocks(storage, info):
        found.extend(_scan_string(text, info.uri, first))
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


def _png_texts(storage: Storage, info: ObjectInfo) -> str | None:
    """Every text a PNG carries (tEXt, zTXt, iTXt, eXIf and any chunk that is not image data), one per line;
    None when the chunk structure does not parse to its end. Image data (IHDR/PLTE/IDAT/IEND) is the exemption."""
    if info.size > _PNG_MAX:
        return None
    data = storage.read_bytes(info.uri, _PNG_MAX)
    pos, texts = len(_PNG), list[str]()
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
            try:
                body = key + b" " + zlib.decompress(rest[1:])
            except zlib.error:
                return None
        elif kind == b"iTXt":
            parts = body.split(b"\x00", 2)
            if len(parts) == 3 and len(parts[1]) >= 1 and parts[1][:1] == b"\x01":
                tail = parts[2][1:].split(b"\x00", 2)  # method, language, translated keyword, text
                try:
                    body = parts[0] + b" " + zlib.decompress(tail[-1])
                except zlib.error:
                    return None
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
        texts = _png_texts(storage, info)
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
    found = scan_text(storage, info)
    report.findings.extend(found)
    report.scanned.append(info.uri)


def scan_objects(storage: Storage, objects: Iterable[ObjectInfo]) -> ScanReport:
    report = ScanReport(findings=[], scanned=[])
    with detect_secrets_session():
        for info in objects:
            scan_object(storage, info, report)
    return report
