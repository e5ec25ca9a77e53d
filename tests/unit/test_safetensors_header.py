"""safetensors header reader: agrees with the real library, and hostile bytes end in CorruptHeaderError only."""

from __future__ import annotations

import itertools
import json
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy as stn
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from safetensors import safe_open

import rlcleanup.formats.safetensors_header as sth
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.safetensors_header import (
    DTYPE_BITS,
    CorruptHeaderError,
    SafetensorsHeader,
    check_json_depth,
    loads_bounded,
    parse_header,
    read_header,
)
from rlcleanup.ports.storage import ObjectInfo


class CountingStorage:
    """LocalStorage that counts ranged requests and bytes handed back (the cost on GCS)."""

    def __init__(self) -> None:
        self.inner = LocalStorage(checksums=False)
        self.requests = 0
        self.bytes = 0
        self.uris: list[str] = []

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        data = self.inner.read_range(uri, start, length)
        self.requests += 1
        self.bytes += len(data)
        self.uris.append(uri)
        return data

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        data = self.inner.read_bytes(uri, max_bytes)
        self.requests += 1
        self.bytes += len(data)
        self.uris.append(uri)
        return data

    def stat(self, uri: str) -> ObjectInfo | None:
        return self.inner.stat(uri)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix_uri)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


_DIR = tempfile.TemporaryDirectory(prefix="st-header-")
_NAMES = itertools.count()


def _write(data: bytes) -> Path:
    path = Path(_DIR.name) / f"f{next(_NAMES)}.safetensors"
    path.write_bytes(data)
    return path


def _file(header: Any, data_len: int | None = None, raw: bytes | None = None) -> bytes:
    body = raw if raw is not None else json.dumps(header).encode()
    if data_len is None:
        data_len = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    return struct.pack("<Q", len(body)) + body + b"\0" * data_len


def _read(path: Path, first_block: int = 65536) -> tuple[SafetensorsHeader, CountingStorage]:
    storage = CountingStorage()
    return read_header(storage, str(path), path.stat().st_size, first_block), storage


NUMPY_DTYPES = [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64]
NUMPY_DTYPES += [np.uint32, np.uint64, np.bool_]


def test_real_files_match_safe_open(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tensors = {
        f"layer.{i}.{np.dtype(dt).name}": rng.integers(0, 2, size=tuple(rng.integers(0, 5, size=i % 4))).astype(dt)
        for i, dt in enumerate(NUMPY_DTYPES * 2)
    }
    path = tmp_path / "model.safetensors"
    stn.save_file(tensors, str(path), metadata={"format": "pt", "step": "7"})
    header, storage = _read(path)
    with safe_open(str(path), framework="numpy") as fh:
        names = fh.keys()  # safe_open is not iterable
        assert set(header.tensors) == set(names)
        assert header.metadata == fh.metadata()
        for name in names:
            sl = fh.get_slice(name)
            assert header.tensors[name].dtype == sl.get_dtype()
            assert list(header.tensors[name].shape) == sl.get_shape()
    assert header.parameter_count == sum(t.size for t in tensors.values())
    assert header.tensor_bytes == sum(t.nbytes for t in tensors.values())
    assert header.expected_size == path.stat().st_size
    assert (storage.requests, header.requests) == (1, 1)
    assert header.bytes_read == storage.bytes == path.stat().st_size  # a small file fits in the first block


def test_large_header_takes_exactly_two_requests(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    tensors = {f"t{i:05d}": np.zeros((2,), np.float32) for i in range(3000)}  # ~200 KB of header
    stn.save_file(tensors, str(path))
    header, storage = _read(path)
    assert header.header_len > 65536
    assert (storage.requests, header.requests) == (2, 2)
    assert storage.bytes == 8 + header.header_len  # never a byte of tensor data
    assert len(header.tensors) == 3000


def test_error_names_uri_and_reason(tmp_path: Path) -> None:
    path = _write(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(CorruptHeaderError) as info:
        _read(path)
    assert str(path) in str(info.value)
    assert "exceeds the cap" in info.value.reason
    assert info.value.code == "corrupt_header"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ({"a": {"dtype": "Q99", "shape": [1], "data_offsets": [0, 1]}}, "unknown dtype"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, "shape dimension"),
        ({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}, "shape dimension"),
        ({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, "shape dimension"),
        ({"a": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}}, "shape is not a list"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, "start 4 > end 0"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, "not [start, end]"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, "needs 8"),
        ({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, "whole bytes"),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
            },
            "overlap",
        ),
        (
            {
                "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
            },
            "hole",
        ),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, "hole"),
        ({"__metadata__": {"step": 7}}, "strings to strings"),
        ({"a": [1, 2]}, "not an object"),
        ({"a": {"dtype": "U8", "shape": [2**40, 2**40], "data_offsets": [0, 1]}}, "2^64"),
    ],
)
def test_format_rules(header: Any, reason: str) -> None:
    path = _write(_file(header, data_len=16))
    with pytest.raises(CorruptHeaderError, match=None) as info:
        _read(path)
    assert reason in info.value.reason


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[1, 2]", "not an object"),
        (b"{not json}", "not valid JSON"),
        (b'{"a": \xff}', "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
        (b'{"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {}}}}}}}}}}', "nested deeper"),
        (b'{"a": 1, "a": 2}', "duplicate key"),
        (b'{"a": {"dtype": "F32", "dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', "duplicate key"),
        # Below the two levels the fast count covers: the hooked parse still finds it.
        (b'{"a": {"dtype": "F32", "x": {"k": 1, "k": 2}, "shape": [1], "data_offsets": [0, 4]}}', "duplicate key"),
        (b'{"a": {"dtype": "F32", "x": [{"k": 1, "k": 2}], "shape": [1], "data_offsets": [0, 4]}}', "duplicate key"),
        (b'{"a": 1, "a": 2} x', "duplicate key"),  # the same error a single hooked parse gives
        (b'{"a": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}', "not valid JSON"),
    ],
)
def test_hostile_json(raw: bytes, reason: str) -> None:
    with pytest.raises(CorruptHeaderError) as info:
        _read(_write(_file({}, data_len=0, raw=raw)))
    assert reason in info.value.reason


def test_header_lengths_checked_before_any_second_read(tmp_path: Path) -> None:
    for n, reason in [(0, "too small"), (1, "too small"), (2**63, "exceeds the cap"), (5000, "past the end")]:
        path = _write(struct.pack("<Q", n) + b"{}" + b" " * 100)
        with pytest.raises(CorruptHeaderError) as info:
            _read(path, first_block=16)
        assert reason in info.value.reason
    path = _write(struct.pack("<Q", 200) + b"{}" + b" " * 198)
    with pytest.raises(CorruptHeaderError, match="cap"):
        read_header(CountingStorage(), str(path), path.stat().st_size, max_header=100)
    with pytest.raises(CorruptHeaderError, match="shorter than the 8-byte"):
        _read(_write(b"\x01\x02"))


def test_strings_with_brackets_and_escapes_are_not_nesting() -> None:
    check_json_depth(r'{"a": "[[[[[[[[[[{{{{{{{{{{\"\\", "b": ["\\\"]]]]]"]}', 3)
    with pytest.raises(ValueError):
        check_json_depth('{"a": [[[[[[[[[[1]]]]]]]]]]}', 8)
    with pytest.raises(ValueError):  # an unterminated string hides nothing: what follows its quote still counts
        check_json_depth('{"a": "x\\"' + "[" * 20, 8)


@pytest.mark.parametrize(
    "text",
    [
        '{"a:b": {"c\\":": 1, "d\\\\": "::"}, "e": {"f": {"g": 1, "h": 2}}}',  # colons and escapes in strings
        '{"x": [{"k": 1}, {"k": 2}], "y": {"z": {"k": 3}}}',  # objects below two levels, no duplicate
        '[{"a": 1}, {"a": 2}]',
        '{"__metadata__": {"k": "v"}, "w": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}',
    ],
)
def test_loads_bounded_agrees_with_json_when_there_is_no_duplicate(text: str) -> None:
    assert loads_bounded(text, 8) == json.loads(text)


def test_a_valid_header_needs_no_hooked_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    # The per-shard cost: a header without duplicate keys is parsed once, by the C parser alone.
    calls: list[int] = []
    real = sth._no_duplicates

    def counted(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        calls.append(1)
        return real(pairs)

    monkeypatch.setattr(sth, "_no_duplicates", counted)
    header: dict[str, Any] = {"__metadata__": {"format": "pt", "step": "3"}}
    for i in range(30):
        header[f"model.layers.{i}.w"] = {"dtype": "BF16", "shape": [2, 3], "data_offsets": [12 * i, 12 * i + 12]}
    parsed, _ = _read(_write(_file(header)))
    assert len(parsed.tensors) == 30 and calls == []
    with pytest.raises(CorruptHeaderError, match="duplicate key"):
        _read(_write(_file({}, data_len=0, raw=b'{"__metadata__": {"k": "1", "k": "2"}}')))
    assert calls  # a repeated key falls back to the hooked parse, which names it


def test_metadata_keys_with_colons_and_quotes_parse() -> None:
    header = {"__metadata__": {'a:"b': 'c:"d', "e": "\\"}, "t:1": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}
    parsed, _ = _read(_write(_file(header)))
    assert parsed.metadata == header["__metadata__"] and list(parsed.tensors) == ["t:1"]


def test_sub_byte_and_zero_sized_tensors() -> None:
    header = {
        "f4": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]},
        "empty": {"dtype": "BF16", "shape": [0, 7], "data_offsets": [2, 2]},
        "e8": {"dtype": "F8_E8M0", "shape": [3], "data_offsets": [2, 5]},
    }
    parsed, _ = _read(_write(_file(header)))
    assert parsed.data_end == 5 and parsed.parameter_count == 7


# ---------------------------------------------------------------- properties

FIRST_BLOCKS = st.sampled_from([8, 9, 16, 100, 4096, 65536])


def _check_contract(path: Path, first_block: int) -> SafetensorsHeader | None:
    """The reader returns a coherent header or raises CorruptHeaderError, and reads at most first_block + N."""
    data = path.read_bytes()
    claimed = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else 0
    storage = CountingStorage()
    try:
        header = read_header(storage, str(path), len(data), first_block)
    except CorruptHeaderError as exc:
        assert exc.reason and str(path) in str(exc)
        header = None
    assert storage.bytes <= first_block + claimed
    assert storage.requests <= 2
    if header is not None:
        assert storage.requests == (1 if 8 + header.header_len <= first_block else 2)
        cursor = 0
        for info in sorted(header.tensors.values(), key=lambda t: t.offsets):
            assert info.offsets[0] == cursor and info.dtype in DTYPE_BITS
            assert (info.offsets[1] - info.offsets[0]) * 8 == info.numel * DTYPE_BITS[info.dtype]
            cursor = info.offsets[1]
        assert cursor == header.data_end
    return header


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300), first_block=FIRST_BLOCKS)
def test_random_bytes(data: bytes, first_block: int) -> None:
    _check_contract(_write(data), first_block)


LENGTHS = st.one_of(
    st.sampled_from([0, 1, 2, 2**63, 2**64 - 1, 100 * 1024 * 1024 + 1]),
    st.integers(min_value=0, max_value=2**64 - 1),
    st.integers(min_value=0, max_value=400),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=LENGTHS, body=st.binary(max_size=300), first_block=FIRST_BLOCKS)
def test_hostile_lengths(n: int, body: bytes, first_block: int) -> None:
    _check_contract(_write(struct.pack("<Q", n) + body), first_block)


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8))
JSON = st.recursive(
    JSON_LEAF, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON, first_block=FIRST_BLOCKS, depth=st.integers(0, 3000), tail=st.binary(max_size=20))
def test_arbitrary_json_and_deep_nesting(value: Any, first_block: int, depth: int, tail: bytes) -> None:
    raw = ("[" * depth + json.dumps(value) + "]" * depth).encode()
    _check_contract(_write(_file({}, data_len=0, raw=raw) + tail), first_block)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    """A well-formed header for numpy dtypes, then at most one hostile mutation."""
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U8": 1, "BOOL": 1, "I32": 4, "F64": 8}
    header: dict[str, Any] = {}
    cursor = 0
    for i in range(draw(st.integers(0, 6))):
        dtype = draw(st.sampled_from(sorted(sizes)))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        nbytes = sizes[dtype] * int(np.prod(shape, dtype=np.int64))
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [cursor, cursor + nbytes]}
        cursor += nbytes
    if draw(st.booleans()):
        header["__metadata__"] = {"format": "pt"}
    names = [k for k in header if k != "__metadata__"]
    mutation = draw(st.sampled_from(["none", "shift", "grow", "dtype", "shape", "swap", "metadata"]))
    if names and mutation != "none":
        t = header[draw(st.sampled_from(names))]
        delta = draw(st.integers(-3, 3))
        if mutation == "shift":
            t["data_offsets"] = [max(0, t["data_offsets"][0] + delta), max(0, t["data_offsets"][1] + delta)]
        elif mutation == "grow":
            t["data_offsets"][1] = max(0, t["data_offsets"][1] + delta)
        elif mutation == "dtype":
            t["dtype"] = draw(st.sampled_from(["F8", "f32", "", "INT4", "BF16"]))
        elif mutation == "shape":
            t["shape"] = draw(st.sampled_from([[-1], [1, None], "3", None, [2**70]]))
        elif mutation == "swap":
            t["data_offsets"] = t["data_offsets"][::-1]
        elif mutation == "metadata":
            header["__metadata__"] = draw(st.sampled_from([[], 1, {"a": 1}, {"a": None}]))
    return header, _file(header, data_len=cursor)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=layouts(), first_block=FIRST_BLOCKS)
def test_agrees_with_the_safetensors_library(case: tuple[dict[str, Any], bytes], first_block: int) -> None:
    """Differential: on whole files, we accept exactly what safetensors accepts, with the same tensors."""
    header_json, data = case
    path = _write(data)
    ours = _check_contract(path, first_block)
    if ours is not None and ours.expected_size != len(data):
        ours = None  # truncation/extra bytes: the library refuses the file, validate reports truncated_shard
    try:
        with safe_open(str(path), framework="numpy") as fh:
            names = fh.keys()
            theirs: dict[str, Any] | None = {
                k: (fh.get_slice(k).get_dtype(), fh.get_slice(k).get_shape()) for k in names
            }
    except Exception:
        theirs = None
    event("accepted" if theirs is not None else "rejected")
    assert (ours is None) == (theirs is None), (header_json, ours, theirs)
    if ours is not None and theirs is not None:
        assert {k: (t.dtype, list(t.shape)) for k, t in ours.tensors.items()} == theirs


@settings(max_examples=150, deadline=None)
@given(buf=st.binary(max_size=200), size=st.integers(-5, 2**64))
def test_parse_header_pure(buf: bytes, size: int) -> None:
    try:
        parse_header(buf, size)
    except CorruptHeaderError as exc:
        assert exc.reason
