"""Kubernetes pod logs as the kubelet leaves them: CRI records, partial lines, rotated and gzipped files.

Format (run-layout-v3.md §7 [KL]; marin `lib/iris/.../backends/k8s/logship.py`@3ba1fb0 reads the same files): each
record is `<RFC3339Nano time> <stdout|stderr> <tags> <message>`, where the first tag is `F` (the record ends a
line) or `P` (a partial record: the line continues in the next record of the same stream). containerd may carry
more tags after a `:` (`F:x`); the first is the one that counts. The kubelet rotates `0.log` to
`0.log.<YYYYMMDD-HHMMSS>` and gzips older rotations (`0.log.20261201-101010.gz`), so a pod's log in time order is
its rotations by stamp, then the live file.

`cri_lines` turns records back into the lines the program wrote (partials joined per stream); `is_cri` tells a CRI
file from a plain one by its first record; `rotation_key` orders a pod's files oldest first.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator

CRI_RECORD = re.compile(
    r"^(?P<time>\d{4}-\d{2}-\d{2}T[0-9:.]+(?:Z|[+-]\d{2}:\d{2})) (?P<stream>stdout|stderr) (?P<tags>[^ ]*) ?(?P<msg>.*)$"
)
# `0.log`, `0.log.20261201-101010`, `0.log.20261201-101010.gz` (the restart count, then the rotation stamp).
ROTATED_NAME = re.compile(r"^(?P<base>.+\.log)(?:\.(?P<stamp>\d{8}-\d{6}))?(?P<gz>\.gz)?$")
MAX_PARTIAL_CHARS = 1024 * 1024  # a line kept open by `P` records longer than this is cut (and the cut said)
MAX_GZIP_BYTES = 1024 * 1024 * 1024  # decompressed bytes read from one rotated file


def is_rotated_log(name: str) -> bool:
    """A kubelet rotation of a pod log (`0.log.<stamp>` or `0.log.<stamp>.gz`)."""
    match = ROTATED_NAME.match(name)
    return match is not None and match.group("stamp") is not None


def rotation_key(name: str) -> str:
    """Sorts a pod's files oldest first: its rotations by stamp, then the live file (no stamp)."""
    match = ROTATED_NAME.match(name)
    if match is None:
        return name
    return f"{match.group('base')}\x00{match.group('stamp') or '~'}"


def is_cri(first_line: str) -> bool:
    return CRI_RECORD.match(first_line) is not None


def cri_lines(records: Iterable[str]) -> Iterator[str]:
    """The program's lines from CRI records: `P` records joined with the records after them (per stream) up to
    the next `F`. A line that is not a CRI record (a truncated write) is passed through as it is. A partial line
    still open at the end is yielded, since a crash often ends in one."""
    open_lines: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    for raw in records:
        record = raw.rstrip("\n")
        match = CRI_RECORD.match(record)
        if match is None:
            yield record
            continue
        stream, tag, msg = match.group("stream"), match.group("tags").split(":", 1)[0], match.group("msg")
        parts = open_lines.setdefault(stream, [])
        if sizes.get(stream, 0) < MAX_PARTIAL_CHARS:
            parts.append(msg)
            sizes[stream] = sizes.get(stream, 0) + len(msg)
        if tag == "P":
            continue
        yield "".join(parts)
        open_lines[stream], sizes[stream] = [], 0
    for parts in open_lines.values():
        if parts:
            yield "".join(parts)


def gzip_lines(data: bytes, max_bytes: int = MAX_GZIP_BYTES) -> Iterator[str]:
    """The text lines of a gzipped file, decompressed in a stream (at most `max_bytes` of output). A truncated
    archive (the file was rotated while being compressed) yields what decompressed before the cut."""
    inflater = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    pending = b""
    produced = 0
    step = 1024 * 1024
    broken = False
    for start in range(0, len(data), step):
        compressed = data[start : start + step]
        while compressed and produced < max_bytes:
            try:  # bounded output per call: a small archive may inflate to far more than it weighs
                chunk = inflater.decompress(compressed, min(4 * step, max_bytes - produced))
            except zlib.error:
                broken = True
                break
            compressed = inflater.unconsumed_tail
            produced += len(chunk)
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.decode("utf-8", errors="replace")
        if produced >= max_bytes or broken:
            break
    if pending:
        yield pending.decode("utf-8", errors="replace")
