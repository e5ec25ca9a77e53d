"""The checkpoint/export format interface, and the helpers every format shares.

A format is told a directory (its listing, taken once) and the step the run says it holds; it reads what it needs
through the storage port and reports problems ("<code>: <detail>", codes from models/vocab.py) and warnings, the
parameter count where it has one, and which objects the candidate's digest covers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from rlcleanup.formats.config import as_int
from rlcleanup.formats.safetensors_header import DEFAULT_FIRST_BLOCK, loads_bounded
from rlcleanup.models.vocab import CandidateKind, problem
from rlcleanup.ports.storage import ObjectInfo, Storage

MAX_PROBLEMS_PER_CODE = 20  # a hostile index naming 10^6 shards must not make a 10^6-line record
HEADER_WORKERS = 32  # a 70B export: config.json, the index and 30 shard headers in one round
JSON_CAP = 64 * 1024 * 1024
_JSON_DEPTH = 64  # config.json nests (text_config, rope_scaling...), but never this deep


class FormatKind(StrEnum):
    export = "export"  # a candidate for publishing (exports/global_step_<N>/policy/)
    checkpoint = "checkpoint"  # a training checkpoint role dir (checkpoints/global_step_<N>/policy/), for resume


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict)

    def add(self, code: str, detail: str) -> None:
        """A problem with a declared code (UnknownProblemCode otherwise), at most MAX_PROBLEMS_PER_CODE each."""
        text = problem(code, detail)
        n = self._counts[code] = self._counts.get(code, 0) + 1
        if n <= MAX_PROBLEMS_PER_CODE:
            self.problems.append(text)

    def close(self) -> None:
        for code, n in self._counts.items():
            if n > MAX_PROBLEMS_PER_CODE:
                self.problems.append(problem(code, f"... and {n - MAX_PROBLEMS_PER_CODE} more like the above"))


@dataclass(frozen=True)
class Listing:
    """One listing of a directory: objects by name relative to `uri` (the naming the digest uses)."""

    uri: str
    objects: dict[str, ObjectInfo]

    @property
    def top(self) -> dict[str, ObjectInfo]:
        return {name: info for name, info in self.objects.items() if "/" not in name}

    def under(self, folder: str) -> set[str]:
        prefix = f"{folder.rstrip('/')}/"
        return {rel[len(prefix) :] for rel in self.objects if rel.startswith(prefix)}


def list_dir(storage: Storage, uri: str) -> Listing:
    root = uri.rstrip("/")
    return Listing(root, {o.uri[len(root) + 1 :]: o for o in storage.list(root)})


@dataclass(frozen=True)
class ReadOptions:
    workers: int = HEADER_WORKERS  # concurrent reads per candidate
    first_block: int = DEFAULT_FIRST_BLOCK  # bytes of a shard's first ranged read (header length + JSON)


@dataclass
class FormatReport:
    parameter_count: int | None = None
    estimated_parameter_count: int | None = None
    shard_count: int = 0
    candidate_kind: CandidateKind = CandidateKind.full  # an adapter format says `adapter`
    base_model: str | None = None  # what an adapter applies to, as its config names it


class CheckpointFormat(Protocol):
    name: str  # the record's Candidate.format
    kind: FormatKind
    strategies: tuple[str, ...]  # trainer.strategy values that write it (checkpoint formats)

    def detect(self, listing: Listing) -> bool:
        """Do these files look like this format? Cheap: the listing only."""
        ...

    def validate(
        self, storage: Storage, listing: Listing, step: int, findings: Findings, options: ReadOptions
    ) -> FormatReport:
        """Check the directory; add problems and warnings to `findings`."""
        ...

    def digest_inputs(self, listing: Listing) -> Iterable[tuple[str, ObjectInfo]]:
        """The objects a candidate's digest covers (grants bind to it): by default every object listed (a format
        that subclasses this protocol inherits it)."""
        return listing.objects.items()


class UnknownFormatError(ValueError):
    """A format name or trainer strategy no registered format answers to."""

    def __init__(self, what: str, known: Iterable[str]) -> None:
        self.what = what
        super().__init__(f"no registered checkpoint/export format for {what}; known: {', '.join(sorted(known))}")


# ---------------------------------------------------------------- shared helpers


def as_step(value: Any) -> int | None:
    """Steps and counts: as_int, but a negative string is no step (a negative int still reaches the checks)."""
    number = as_int(value)
    return None if isinstance(value, str) and number is not None and number < 0 else number


def step_ranges(steps: Iterable[int]) -> str:
    """[3, 4, 5, 9] -> "3-5, 9"."""
    out: list[str] = []
    ordered = sorted(set(steps))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out)


def size_label(count: int) -> str:
    """9.7e9 -> "10B" (whole billions, half up); 131072 -> "131K"; 7.2e6 -> "7.2M"."""
    if count >= 10**9:
        return f"{(count + 5 * 10**8) // 10**9}B"
    for unit, scale in (("M", 10**6), ("K", 10**3)):
        if count >= scale:
            value = count / scale
            text = f"{value:.0f}" if value >= 100 else f"{value:.1f}".removesuffix(".0")
            return f"{text}{unit}"
    return str(count)


def export_digest(objects: Iterable[tuple[str, ObjectInfo]]) -> str:
    """sha256 over sorted "name<TAB>size<TAB>crc32c<TAB>fingerprint" lines.

    The fingerprint is the object's version (GCS generation; local device/inode/size/mtime_ns/ctime_ns; S3
    ETag/Last-Modified/version): a CRC32C can be restored after an edit with four chosen bytes and a large local
    file has none, but a version cannot be restored, so the digest a grant signs pins exactly the validated
    object versions without reading a shard's bytes. The same bytes copied elsewhere are another artifact."""
    lines = sorted(f"{name}\t{info.size}\t{info.crc32c or ''}\t{info.fingerprint or ''}" for name, info in objects)
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


JsonRead = tuple[dict[str, Any] | None, str | None]  # (object, None) or (None, why it is unreadable)


def read_json(storage: Storage, uri: str) -> JsonRead:
    """(object, None) or (None, why it is unreadable)."""
    try:
        return decode_json(storage.read_bytes(uri, JSON_CAP))
    except FileNotFoundError:
        return None, "absent"
    except ValueError as exc:  # too large
        return None, str(exc)[:200]


def read_listed_json(storage: Storage, uri: str, size: int) -> JsonRead:
    """A small JSON file the listing gave with its size: one ranged read (no stat, no second request).

    One byte more than listed is asked for, so a file rewritten since the listing shows as such instead of
    being judged on a prefix (the candidate's digest is the listing's).
    """
    if size > JSON_CAP:
        return None, f"{size} bytes, larger than the {JSON_CAP}-byte cap"
    try:
        data = storage.read_range(uri, 0, size + 1)
    except FileNotFoundError:
        return None, "absent"
    if len(data) != size:
        return None, f"changed since the listing ({size} bytes listed, {len(data)}{'+' * (len(data) > size)} read)"
    return decode_json(data)


def decode_json(data: bytes) -> JsonRead:
    try:
        value = loads_bounded(data.decode("utf-8"), _JSON_DEPTH)
    except (ValueError, UnicodeDecodeError) as exc:  # not UTF-8, not JSON, too deep
        return None, str(exc)[:200]
    if not isinstance(value, dict):
        return None, f"top level is {type(value).__name__}, not an object"
    return value, None
