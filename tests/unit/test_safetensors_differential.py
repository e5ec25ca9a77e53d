"""Differential: every safetensors file the installed library opens, our header reader opens with the same tensors,
shapes and dtypes (issue 14 item 8). The dtype table itself is asked of the library."""

from __future__ import annotations

import json
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors._safetensors_rust import deserialize

from rlcleanup.formats.safetensors_header import _STATIC_DTYPE_BITS, DTYPE_BITS, library_dtype_bits, parse_header

LIBRARY = library_dtype_bits()


def test_dtype_table_comes_from_the_library_and_knows_fnuz() -> None:
    assert DTYPE_BITS == LIBRARY
    assert LIBRARY["F8_E4M3FNUZ"] == 8 and LIBRARY["F8_E5M2FNUZ"] == 8  # corrupt_header before issue 14
    assert LIBRARY["F4"] == 4 and LIBRARY["F6_E2M3"] == 6 and LIBRARY["C64"] == 64
    assert set(LIBRARY) >= set(_STATIC_DTYPE_BITS) - {"F8_E4M3FNUZ", "F8_E5M2FNUZ"}


def _file(tensors: list[tuple[str, str, list[int], int]]) -> bytes:
    """(name, dtype, shape, extra bytes of slack or overlap) -> a safetensors file with contiguous data."""
    header: dict[str, object] = {}
    offset = 0
    for name, dtype, shape, skew in tensors:
        numel = 1
        for d in shape:
            numel *= d
        nbytes = (numel * LIBRARY[dtype] + 7) // 8 + skew
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + max(nbytes, 0)]}
        offset += max(nbytes, 0)
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\x00" * offset


_tensor = st.tuples(
    st.text(alphabet="abcdefghij._0123456789", min_size=1, max_size=12),
    st.sampled_from(sorted(LIBRARY)),
    st.lists(st.integers(min_value=0, max_value=9), min_size=0, max_size=3),
    st.sampled_from([0, 0, 0, 1, -1]),  # mostly exact; sometimes a byte off, which both must reject
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_tensor, min_size=1, max_size=5, unique_by=lambda t: t[0]))
def test_every_file_the_library_opens_we_open_the_same(tensors: list[tuple[str, str, list[int], int]]) -> None:
    data = _file(tensors)
    try:
        opened = deserialize(data)
    except Exception:
        return  # the library refuses it: this direction only checks what it accepts
    ours = parse_header(data, len(data))
    assert {name: (t.dtype, list(t.shape)) for name, t in ours.tensors.items()} == {
        name: (info["dtype"], list(info["shape"])) for name, info in opened
    }
