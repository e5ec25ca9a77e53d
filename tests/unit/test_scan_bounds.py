"""Small files, large costs (issue 37 item 13): the publish scan's work per file is bounded.

- a PNG text chunk that inflates far past its size (a decompression bomb) is refused without being inflated;
- a line longer than the scan's bound is refused, never held or published unscanned;
- the scan's time is linear in a line's length: no step looks back to a line's start from every segment of it,
  no decoder backtracks through a run of blanks, and the base64 pre-filter's DFA stays small on random base64.
"""

from __future__ import annotations

import random
import re
import string
import struct
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority import secret_prefilter, secret_views, secrets
from rlcleanup.authority.secrets import ScanReport, scan_objects

TOKEN = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345678"  # pragma: allowlist secret


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png(*chunks: bytes) -> bytes:
    ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    idat = _chunk(b"IDAT", zlib.compress(b"\x00\x00"))
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"".join(chunks) + idat + _chunk(b"IEND", b"")


def _ztxt(text: bytes, key: bytes = b"Comment") -> bytes:
    return _chunk(b"zTXt", key + b"\x00\x00" + zlib.compress(text, 9))


def _itxt(text: bytes, key: bytes = b"Comment") -> bytes:
    return _chunk(b"iTXt", key + b"\x00\x01\x00en\x00\x00" + zlib.compress(text, 9))


def _bomb(size: int) -> bytes:
    """A zlib stream of `size` zero bytes, compressed chunk by chunk (never holding them)."""
    comp, block = zlib.compressobj(9), b"\x00" * (1 << 20)
    out = [comp.compress(block) for _ in range(size // len(block))]
    return b"".join(out) + comp.flush()


def _scan_files(tmp_path: Path, files: dict[str, bytes]) -> ScanReport:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    storage = LocalStorage()
    infos = [storage.stat(str(tmp_path / name)) for name in files]
    return scan_objects(storage, [i for i in infos if i is not None])


@pytest.mark.parametrize(
    "chunk",
    [
        pytest.param(lambda: _chunk(b"zTXt", b"Comment\x00\x00" + _bomb(512 << 20)), id="zTXt-512MiB"),
        pytest.param(lambda: _chunk(b"iTXt", b"Comment\x00\x01\x00en\x00\x00" + _bomb(512 << 20)), id="iTXt-512MiB"),
        pytest.param(lambda: _ztxt(b"A" * (4 << 20)), id="zTXt-ratio-past-100x"),
        pytest.param(lambda: b"".join(_ztxt(random.Random(i).randbytes(1 << 20)) for i in range(20)), id="total"),
    ],
)
def test_a_png_whose_text_inflates_past_the_bounds_is_refused_without_inflating_it(
    tmp_path: Path, chunk: Callable[[], bytes]
) -> None:
    data = _png(chunk())
    tracemalloc.start()
    report = _scan_files(tmp_path, {"chart.png": data})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert not report.clean and len(report.refused) == 1, report
    assert "past the scan's bounds" in report.refused[0]
    assert peak < 3 * len(data) + (64 << 20)  # the 512 MiB never existed in memory


def test_a_png_within_the_bounds_is_still_scanned_and_its_token_found(tmp_path: Path) -> None:
    report = _scan_files(
        tmp_path,
        {"ok.png": _png(_ztxt(f"HF_TOKEN={TOKEN}".encode()), _itxt(b"plain words " * 1000))},
    )
    assert not report.refused and [f.uri.rsplit("/", 1)[-1] for f in report.findings] == ["ok.png#text"]


def test_a_truncated_compressed_chunk_is_a_png_that_does_not_parse(tmp_path: Path) -> None:
    cut = _chunk(b"zTXt", b"Comment\x00\x00" + zlib.compress(b"x" * 1000)[:-6])
    report = _scan_files(tmp_path, {"cut.png": _png(cut)})
    assert [r.rsplit("/", 1)[-1] for r in report.refused] == ["cut.png: a PNG whose chunks do not parse"]


@pytest.mark.parametrize("tail", [b"", b"\nshort line after\n", b"\r\n"])
def test_a_line_past_the_bound_is_refused_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: bytes
) -> None:
    monkeypatch.setattr(secrets, "MAX_LINE_BYTES", 6 << 20)
    monkeypatch.setattr(secrets, "_BLOCK", 1 << 20)
    report = _scan_files(tmp_path, {"one-line.log": b"first line\n" + b"x" * (8 << 20) + tail})
    assert len(report.refused) == 1 and "line 2 is longer than the scan's bound" in report.refused[0]


def test_a_line_within_the_bound_is_scanned_whole_and_a_token_at_its_end_is_found(tmp_path: Path) -> None:
    line = b"y" * (3 << 20) + f' token="{TOKEN}"'.encode()
    report = _scan_files(tmp_path, {"long.log": b"a\n" + line + b"\nb\n"})
    assert not report.refused and [f.line for f in report.findings] == [2]


def test_a_concatenation_across_the_end_of_a_long_line_is_still_joined() -> None:
    long_line = "z" * 50_000 + f' HF_TOKEN = "{TOKEN[:20]}" \\'
    text = f'{long_line}\n    "{TOKEN[20:]}"\n'
    assert {(f.line, f.rule) for f in secrets.scan_string(text, "x")} == secrets.reference_findings(text)
    assert any(f.line == 1 for f in secrets.scan_string(text, "x"))


def test_no_view_of_a_line_is_longer_than_two_windows() -> None:
    line = '"' + "q" * 100_000 + '" + "' + "r" * 100_000
    views = secret_views.line_views(line, '"' + "s" * 100_000 + '"')
    assert max(len(v) for v in views) <= 2 * secret_views.WINDOW + 1


# ------------------------------------------------------------------ linear time


def test_finding_the_candidate_lines_of_one_huge_line_is_one_pass() -> None:
    """It looked back to the line's start from every 4 KiB segment: 16 MiB took seconds (quadratic); now ms."""
    buf = b"a" * (16 << 20)
    started = time.perf_counter()
    hits = list(secrets._candidates(buf))
    assert time.perf_counter() - started < 1.0
    assert [(i, s, e) for i, s, e, _ in hits] == [(0, 0, len(buf))]


@pytest.mark.parametrize("blanks", [20_000, 200_000])
def test_the_concatenation_decoder_does_not_backtrack_through_blanks(blanks: int) -> None:
    text = ('"' + " " * blanks + "x") * 3
    started = time.perf_counter()
    secret_views.join_pieces(text)
    assert time.perf_counter() - started < 0.5  # 8,000 blanks took 0.8 s, 20,000 would take 5 s


def test_concatenation_joins_are_unchanged_by_the_possessive_rewrite() -> None:
    old = re.compile(r"""(["'])\s*(?:\+|\.\.|\\\n|\n)?\s*\1""")
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(
            rng.choice(["'", '"', " ", "\n", "+", "..", "\\\n", "a", "\t"]) for _ in range(rng.randint(0, 20))
        )
        assert secret_views._CONCAT.sub("", text) == old.sub("", text), repr(text)


def _old_b64_regex() -> Any:
    import re2

    b64 = secret_prefilter._B64
    windows = "|".join(f"{b64}{{{i}}}[A-Z]{b64}{{{23 - i}}}" for i in range(24))
    return re2.compile(f"{b64}*(?:{windows}){b64}*")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.ascii_letters + string.digits + "+/_- \n.=", max_size=200))
def test_the_base64_prefilter_finds_the_same_lines_as_before(text: str) -> None:
    """Same candidate lines as the old 24-window spelling, whose DFA needed 2^24 states on random base64."""
    buf = text.encode()

    def lines(search: Callable[..., Any], group: int) -> set[int]:
        found: set[int] = set()
        pos = 0
        while pos <= len(buf) and (m := search(buf, pos)) is not None:
            start = m.start(group)
            found.add(buf.count(b"\n", 0, start))
            end = buf.find(b"\n", start)
            pos = (len(buf) if end < 0 else end) + 1
        return found

    assert lines(secret_prefilter.b64_run_regex().search, 1) == lines(_old_b64_regex().search, 0)


def test_random_base64_lines_are_found_in_linear_time() -> None:
    rng = random.Random(3)
    raw = "".join(rng.choices(string.ascii_letters + string.digits + "+/", k=1 << 20))
    buf = "\n".join(raw[i : i + 76] for i in range(0, len(raw), 76)).encode()
    rx = secret_prefilter.b64_run_regex()
    started, pos, found = time.perf_counter(), 0, 0
    while (m := rx.search(buf, pos)) is not None:
        found += 1
        end = buf.find(b"\n", m.start(1))
        pos = (len(buf) if end < 0 else end) + 1
    assert found == sum(len(line) >= 24 for line in buf.split(b"\n"))
    assert time.perf_counter() - started < 5.0  # the old spelling: about two minutes per MiB
