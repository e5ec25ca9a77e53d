"""Read only the header of a safetensors file: 8-byte little-endian length N, then N bytes of JSON.

The tensor bytes are never fetched: one speculative ranged read of the first block, and a second ranged read only
when the header is longer than that block. Every field is checked against the format's rules (safetensors
`tensor.rs`), so hostile input ends in `CorruptHeaderError` with a reason, never in another exception.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from rlcleanup.ports.storage import Storage

CORRUPT_HEADER = "corrupt_header"
DEFAULT_FIRST_BLOCK = 64 * 1024
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the Rust reader's MAX_HEADER_SIZE
MIN_HEADER_BYTES = 2  # "{}"
# A valid header nests 3 deep ({name: {shape: [..]}}); anything far deeper is hostile, not a format variant.
MAX_JSON_DEPTH = 8
_U64 = 1 << 64  # the format stores sizes and offsets as u64/usize: larger numbers cannot be real

# Bits per element (safetensors Dtype::bitsize). Sub-byte dtypes must still fill whole bytes. This static copy
# (safetensors 0.8 `Dtype`) is only the fallback: `library_dtype_bits()` asks the installed library itself.
_STATIC_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
_VARIANTS = re.compile(r"expected one of ((?:`\w+`(?:, )?)+)")


def _probe(deserialize: Any, dtype: str, numel: int, nbytes: int) -> str | None:
    header = json.dumps({"t": {"dtype": dtype, "shape": [numel], "data_offsets": [0, nbytes]}}).encode()
    try:
        deserialize(struct.pack("<Q", len(header)) + header + b"\0" * nbytes)
    except Exception as exc:  # the library's own error type; its message is the data here
        return str(exc)
    return None


@functools.cache
def library_dtype_bits() -> dict[str, int]:
    """The dtype table of the installed `safetensors`, asked of the library itself (issue 14 item 8).

    The Rust reader exposes no table, but it names every `Dtype` variant when it rejects an unknown one (serde's
    "unknown variant ..., expected one of `BOOL`, `F4`, ..."), and it checks `numel * bitsize == 8 * bytes`: the
    bits of each dtype are the byte count it accepts for 8 elements. Falls back to the static table when the
    library cannot be asked (not installed, or its message changed).
    """
    try:
        from safetensors._safetensors_rust import deserialize
    except ImportError:
        return dict(_STATIC_DTYPE_BITS)
    message = _probe(deserialize, "__rlcleanup_probe__", 1, 1) or ""
    match = _VARIANTS.search(message)
    if match is None:
        return dict(_STATIC_DTYPE_BITS)
    bits: dict[str, int] = {}
    for name in re.findall(r"`(\w+)`", match.group(1)):
        # 8 elements take `bits` bytes: the smallest accepted byte count is the bit size (≤ 128 bits/element).
        found = next((n for n in range(1, 129) if _probe(deserialize, name, 8, n) is None), None)
        if found is not None:
            bits[name] = found
    return bits or dict(_STATIC_DTYPE_BITS)


DTYPE_BITS: dict[str, int] = library_dtype_bits()

_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class CorruptHeaderError(ValueError):
    """Raised when a safetensors header is unreadable or breaks the format; `reason` says which rule."""

    code = CORRUPT_HEADER

    def __init__(self, reason: str, uri: str | None = None) -> None:
        self.reason = reason
        self.uri = uri
        super().__init__(f"{uri}: corrupt safetensors header: {reason}" if uri else f"corrupt header: {reason}")


class TensorInfo(NamedTuple):
    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, int]  # [start, end) relative to the end of the header

    @property
    def numel(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n


@dataclass(frozen=True)
class SafetensorsHeader:
    header_len: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_end: int  # max end offset: the data section's length when the file is whole
    requests: int = 0
    bytes_read: int = 0

    @property
    def expected_size(self) -> int:
        """The object size this header promises: 8 + N + data_end."""
        return 8 + self.header_len + self.data_end

    @property
    def parameter_count(self) -> int:
        return sum(t.numel for t in self.tensors.values())

    @property
    def tensor_bytes(self) -> int:
        return sum(t.offsets[1] - t.offsets[0] for t in self.tensors.values())


def _outside_strings(text: str) -> str:
    """The JSON text with every string literal (and escape) removed: what is left is structure and scalars.

    `\\\\` before `\\"`, left to right, is exactly how JSON tokenizes escapes inside strings; the quotes then pair
    up as strings. An unmatched last quote keeps what follows it (like a `"[^"]*"` scan would): it is never a string.
    """
    parts = text.replace("\\\\", "").replace('\\"', "").split('"')
    outside = "".join(parts[::2])
    return outside if len(parts) % 2 else outside + '"' + parts[-1]


def _check_depth(outside: str, max_depth: int) -> None:
    skeleton = _NOT_BRACKET.sub("", outside)
    for _ in range(max_depth):
        if not skeleton:
            return
        peeled = skeleton.replace("[]", "").replace("{}", "")
        if peeled == skeleton:
            break
        skeleton = peeled
    if skeleton:
        raise ValueError(f"JSON nested deeper than {max_depth} levels (or unbalanced brackets)")


def check_json_depth(text: str, max_depth: int) -> None:
    """Refuse nesting deeper than max_depth *before* json.loads, whose recursion would otherwise blow the stack.

    Escapes and strings are dropped, then every character but brackets (all linear, C speed); innermost
    `[]`/`{}` pairs are then peeled max_depth times: anything left is deeper than allowed (or unbalanced,
    which JSON rejects anyway).
    """
    _check_depth(_outside_strings(text), max_depth)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _shallow_pairs(value: Any) -> int:
    """Key-value pairs in the top object and the objects directly inside it (a header's or an index's depth)."""
    if not isinstance(value, dict):
        return 0
    return len(value) + sum(len(v) for v in value.values() if isinstance(v, dict))


def loads_bounded(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """json.loads with a depth guard and duplicate-key rejection; raises ValueError only.

    Outside strings a `:` only ever separates a key from its value, so the text holds exactly that many pairs.
    When the parsed objects (top level and one below: all a safetensors header or an index has) hold as many,
    no key was repeated and the plain C parse stands. Otherwise (a duplicate, objects nested deeper, or not JSON
    at all) the text is parsed again through a hook that refuses duplicate keys anywhere, which also gives the
    error exactly as a single hooked parse would.
    """
    outside = _outside_strings(text)
    _check_depth(outside, max_depth)
    try:
        try:
            value = json.loads(text)
        except ValueError:
            pass
        else:
            if _shallow_pairs(value) == outside.count(":"):
                return value
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError as exc:  # belt and braces: the depth check should already have refused it
        raise ValueError("JSON nested too deeply") from exc


def _u64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _U64:
        raise CorruptHeaderError(f"{what} must be an integer in [0, 2^64), got {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _tensor(name: str, entry: Any) -> TensorInfo:
    # The checks run inline and build their message only on failure: this runs for every tensor of every shard.
    if not isinstance(entry, dict):
        raise CorruptHeaderError(f"tensor {name!r}: entry is {type(entry).__name__}, not an object")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or (dtype_bits := DTYPE_BITS.get(dtype)) is None:
        raise CorruptHeaderError(f"tensor {name!r}: unknown dtype {_short(dtype)}")
    shape = entry.get("shape")
    if not isinstance(shape, list):
        raise CorruptHeaderError(f"tensor {name!r}: shape is not a list")
    numel = 1
    for dim in shape:
        if type(dim) is not int or not 0 <= dim < _U64:  # bool is not int here
            _u64(dim, f"tensor {name!r}: shape dimension")
        numel *= dim
        if numel >= _U64:  # stop before a hostile shape makes a huge integer
            raise CorruptHeaderError(f"tensor {name!r}: shape {_short(shape)} has 2^64 or more elements")
    offsets = entry.get("data_offsets")
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise CorruptHeaderError(f"tensor {name!r}: data_offsets is not [start, end]")
    start, end = offsets
    if type(start) is not int or not 0 <= start < _U64:
        _u64(start, f"tensor {name!r}: data_offsets start")
    if type(end) is not int or not 0 <= end < _U64:
        _u64(end, f"tensor {name!r}: data_offsets end")
    if start > end:
        raise CorruptHeaderError(f"tensor {name!r}: data_offsets start {start} > end {end}")
    bits = numel * dtype_bits
    if bits % 8:
        raise CorruptHeaderError(f"tensor {name!r}: {numel} x {dtype} does not fill whole bytes")
    if end - start != bits // 8:
        raise CorruptHeaderError(
            f"tensor {name!r}: data_offsets span {end - start} bytes but {dtype}{shape} needs {bits // 8}"
        )
    return TensorInfo(dtype, tuple(shape), (start, end))


def _check_contiguous(tensors: dict[str, TensorInfo]) -> int:
    """The data section must be tiled exactly: sorted by offset, no overlap, no hole, starting at 0."""
    cursor = 0
    for name, info in sorted(tensors.items(), key=lambda kv: kv[1].offsets):
        start, end = info.offsets
        if start < cursor:
            raise CorruptHeaderError(f"tensor {name!r}: data_offsets [{start}, {end}] overlap the previous tensor")
        if start > cursor:
            raise CorruptHeaderError(f"tensor {name!r}: hole of {start - cursor} bytes before offset {start}")
        cursor = end
    return cursor


def header_length(prefix: bytes, file_size: int, max_header: int = MAX_HEADER_BYTES) -> int:
    """Decode and sanity-check N from the first 8 bytes, before anything else is read."""
    if file_size < 8 or len(prefix) < 8:
        raise CorruptHeaderError(f"file is {min(file_size, len(prefix))} bytes, shorter than the 8-byte length")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n > max_header:
        raise CorruptHeaderError(f"header length {n} exceeds the cap of {max_header} bytes")
    if n < MIN_HEADER_BYTES:
        raise CorruptHeaderError(f"header length {n} is too small to hold a JSON object")
    if 8 + n > file_size:
        raise CorruptHeaderError(f"header length {n} runs past the end of the {file_size}-byte file")
    return int(n)


def parse_header(buf: bytes, file_size: int, max_header: int = MAX_HEADER_BYTES) -> SafetensorsHeader:
    """Parse a header from `buf` (the file's first 8 + N bytes, or more) given the object's size."""
    n = header_length(buf, file_size, max_header)
    if len(buf) < 8 + n:
        raise CorruptHeaderError(f"got {len(buf)} bytes, need {8 + n} for the header")
    try:
        text = buf[8 : 8 + n].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptHeaderError(f"header is not UTF-8 at byte {exc.start}") from exc
    try:
        parsed = loads_bounded(text)
    except ValueError as exc:
        raise CorruptHeaderError(f"header is not valid JSON: {_short(str(exc))}") from exc
    if not isinstance(parsed, dict):
        raise CorruptHeaderError(f"header JSON is {type(parsed).__name__}, not an object")
    raw_metadata = parsed.pop("__metadata__", None)
    metadata = {} if raw_metadata is None else raw_metadata
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CorruptHeaderError("__metadata__ must map strings to strings")
    tensors = {name: _tensor(name, entry) for name, entry in parsed.items()}
    data_end = _check_contiguous(tensors)
    return SafetensorsHeader(header_len=n, tensors=tensors, metadata=metadata, data_end=data_end)


def read_header(
    storage: Storage,
    uri: str,
    size: int,
    first_block: int = DEFAULT_FIRST_BLOCK,
    max_header: int = MAX_HEADER_BYTES,
) -> SafetensorsHeader:
    """Read the header of the object at `uri` (whose size the caller already knows from a listing).

    Reads at most max(first_block, 8 + N) bytes in at most two requests. Raises CorruptHeaderError naming the uri.
    """
    try:
        if size < 8:
            raise CorruptHeaderError(f"file is {size} bytes, shorter than the 8-byte length")
        first = storage.read_range(uri, 0, min(max(first_block, 8), size))
        requests, got = 1, len(first)
        n = header_length(first, size, max_header)
        buf = first
        if len(first) < 8 + n:
            # The length was checked against size and the cap before this read: memory stays bounded.
            rest = storage.read_range(uri, len(first), 8 + n - len(first))
            requests, got = 2, got + len(rest)
            buf = first + rest
        header = parse_header(buf, size, max_header)
    except CorruptHeaderError as exc:
        raise CorruptHeaderError(exc.reason, uri) from exc
    return SafetensorsHeader(header.header_len, header.tensors, header.metadata, header.data_end, requests, got)
