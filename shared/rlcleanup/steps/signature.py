"""A failure's signature: a stable fingerprint of its first cause (docs/failures.md).

It hashes four things, each normalised so that what varies between two occurrences of one failure does not count:
- the exception type (`torch.cuda.OutOfMemoryError` and `torch.OutOfMemoryError` are one type since torch 2.5);
- the message with URIs, paths, addresses, IPs, hex ids, host names, ranks and every number replaced by a token;
- the innermost frames of our code (`file:function`, no line numbers: a commit moves lines, not the failure),
  frames of installed libraries (site-packages, dist-packages, the Python library) left out;
- the failing collective, when the message or traceback names one (NCCL's `OpType=ALLREDUCE`, `dist.all_reduce`).
Two different exception types, messages, frames or collectives give different signatures.
"""

from __future__ import annotations

import hashlib
import re

from rlcleanup.models.failures import SignatureBasis
from rlcleanup.models.record import FailureCause

SIGNATURE_PREFIX = "sig1:"  # bump the version when the normalisation changes: old and new never compare equal
MAX_FRAMES = 3
MAX_MESSAGE = 400

# Order matters: whole locations first (a URI holds a path, a path holds numbers), numbers last.
_SUBSTITUTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    # A GPU's Xid names the fault (79: fallen off the bus, 48: double-bit ECC): the code stays, the PCI address
    # goes (NVIDIA driver wording `NVRM: Xid (PCI:0000:3b:00): 79, pid=...`).
    (re.compile(r"\bXid \(PCI:[^)]*\):\s*(?=\d)"), "Xid "),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I), "<uri>"),
    (re.compile(r"(?<![\w.])(?:~|\.{1,2})?/(?:[\w.@+=-]+/?)+"), "<path>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<addr>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"\[?\b(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}\b\]?", re.I), "<ip>"),
    # Host names before hex ids (a GKE node name holds one): names whose first label has a digit
    # (node-17.cluster.internal), names under a network suffix, and kebab names of 3+ parts with a digit
    # (gke-h100-b, gke-marin-pool-5f1c2a3b-x9kq). Dotted module paths (torch.cuda.X) are not hosts.
    (re.compile(r"\b[a-z][a-z-]*\d[a-z0-9-]*(?:\.[a-z0-9-]+)+\b", re.I), "<host>"),
    (re.compile(r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:internal|local|lan|com|net|org|io)\b", re.I), "<host>"),
    (re.compile(r"\b(?=[a-z0-9-]*\d)[a-z0-9]+(?:-[a-z0-9]+){2,}\b", re.I), "<host>"),
    (re.compile(r"\b[a-z]{2,}\d{3,}\b", re.I), "<host>"),  # numbered nodes: nid004012, gpu001
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{4,}\b", re.I), "<id>"),
    (re.compile(r"\b(?:global_)?rank\s*[=:]?\s*\d+", re.I), "rank <n>"),
    # Numbers, except the codes that name a fault: an Xid and an errno (28: no space, 2: no such file).
    (re.compile(r"(?<!Xid )(?<!Errno )(?<!\d)\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.I), "<n>"),
)
_SPACES = re.compile(r"\s+")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+, in (?P<func>\S+)', re.M)
_LIBRARY = re.compile(r"(?:site-packages|dist-packages)/|/lib/python\d[\d.]*/|^<frozen |^<string>")
_COLLECTIVE = re.compile(
    r"OpType=(?P<op>\w+)|\b(?:dist\.|torch\.distributed\.|c10d::|nccl)?"
    r"(?P<call>all_?reduce|all_?gather(?:_into_tensor|_base)?|reduce_?scatter(?:_tensor|_base)?|broadcast"
    r"|all_?to_?all(?:_single)?|barrier|send|recv)\b",
    re.I,
)
# Aliases of one exception type, so a torch upgrade does not split a failure in two.
_TYPE_ALIASES = {"torch.cuda.OutOfMemoryError": "torch.OutOfMemoryError"}


def normalise_message(message: str) -> str:
    text = message.strip()
    for pattern, token in _SUBSTITUTIONS:
        text = pattern.sub(token, text)
    return _SPACES.sub(" ", text).strip()[:MAX_MESSAGE]


def normalise_type(error_type: str) -> str:
    cleaned = _SPACES.sub(" ", error_type.strip())
    return _TYPE_ALIASES.get(cleaned, cleaned)


def our_frames(traceback: str) -> list[str]:
    """The innermost MAX_FRAMES frames outside installed libraries, innermost first, as `dir/file.py:function`."""
    frames = []
    for match in _FRAME.finditer(traceback):
        path = match.group("path")
        if _LIBRARY.search(path):
            continue
        tail = "/".join(path.replace("\\", "/").split("/")[-2:])
        frames.append(f"{tail}:{match.group('func')}")
    return list(reversed(frames))[:MAX_FRAMES]


def failing_collective(*texts: str) -> str | None:
    """The collective the failure names, spelt one way (`allreduce`, `allgather`, ...)."""
    for text in texts:
        match = _COLLECTIVE.search(text)
        if match:
            name = (match.group("op") or match.group("call")).lower().replace("_", "")
            return re.sub(r"(?:intotensor|base|tensor|single|coalesced)$", "", name) or name
    return None


def signature_basis(cause: FailureCause) -> SignatureBasis:
    return SignatureBasis(
        error_type=normalise_type(cause.error_type),
        message=normalise_message(cause.message),
        frames=our_frames(cause.traceback),
        collective=failing_collective(cause.message, cause.traceback),
    )


def signature_of(basis: SignatureBasis) -> str:
    text = "\x1f".join([basis.error_type, basis.message, "\x1e".join(basis.frames), basis.collective or ""])
    return SIGNATURE_PREFIX + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def signature(cause: FailureCause) -> tuple[str, SignatureBasis]:
    basis = signature_basis(cause)
    return signature_of(basis), basis
