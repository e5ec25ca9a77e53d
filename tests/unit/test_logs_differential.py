"""Differential test: the block scanner gives exactly the line scanner's scan (errors, events, metric rows, line
numbers, timestamps, counters) on generated logs.

The reference (logscan_reference.py) is the line scanner: every line, read the way iter_lines reads a file, fed to
the product's LogScanner, the same class the block scanner feeds the lines it finds.
Generated logs mix chatter with every kind of line that matters (trainer events, tracebacks, fatal and teardown
lines, mirror and legacy metric rows), with mixed-case hints, timestamps (valid and not), Ray prefixes, ANSI codes
around and inside anchors and timestamps, invalid UTF-8, CRLF and lone CR line ends; tiny block sizes cut lines,
\r\n pairs and multi-byte characters at block edges. Giant lines (past MAX_LINE_CHARS characters and past
MAX_LINE_BYTES bytes) get their own, fewer, examples.
"""

from __future__ import annotations

import bisect
import json
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from logscan_reference import reference_scan

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.models.parts import LogSegment
from rlcleanup.parsing import log_engine
from rlcleanup.parsing.attempt_logs import scan_log
from rlcleanup.parsing.log_engine import BLOCK_BYTES, MAX_LINE_BYTES, BlockScan, hit_finder
from rlcleanup.parsing.log_grammar import FATAL_HINTS
from rlcleanup.parsing.log_scanner import MAX_ERRORS_PER_FILE, LogScan, LogScanner
from rlcleanup.parsing.metrics import MAX_LINE_CHARS, CleanLine
from rlcleanup.parsing.pod_logs import cri_lines, is_cri
from rlcleanup.parsing.segments import line_start, merge_segments, scan_segment
from rlcleanup.samples.generator import SCENARIOS, write_sample_run

MANY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CUTS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def block_scan(data: bytes, block: int, uri: str = "log://x") -> LogScan:
    finder = hit_finder()
    assert finder is not None, "google-re2 is a dependency: the block scanner must be the one under test"
    scanner = LogScanner(uri, "a1")
    BlockScan(scanner, finder, block).run(lambda start, length: data[start : start + length])
    return scanner.finish()


def canonical(scan: LogScan) -> str:
    # JSON so NaN metric values compare equal to themselves; datetimes with their offset.
    return json.dumps(asdict(scan), default=str, sort_keys=True)


def assert_same(data: bytes, block: int) -> LogScan:
    want = reference_scan(data, "log://x", "a1")
    got = block_scan(data, block)
    if canonical(got) != canonical(want):  # name the first field that differs, not two walls of JSON
        for key, value in asdict(want).items():
            assert asdict(got)[key] == value, f"{key} differs (block={block}, data={data[:300]!r})"
    assert canonical(got) == canonical(want)
    return want


# -- generated logs ---------------------------------------------------------------------------------------------

ANSI = ["\x1b[0m", "\x1b[32m", "\x1b[1;31m", "\x1b[?25l", "\x1b[2K", "\x1bM", "\x1b", "\x1b[", "\x1b[3"]
STAMPS = [
    "2026-11-30 08:00:00.000 ",
    "[2026-11-30T08:00:01Z] ",
    "2026-11-30 08:00:02,5 | ",
    "2026-11-30T08:00:03+01:00 ",
    "2026-13-45 25:61:61 ",  # looks like one, does not parse
    "0000-00-00 00:00:00 ",
    "\x1b[32m2026-11-30 08:00:04.000\x1b[0m | ",
    "2026-11-\x1b[1m30 08:00:05 ",  # an ANSI code inside the stamp
    "2024-06-01 00:00:00 ",  # a leap year: vLLM's 02-29 after it is a date
    "2025-06-01T00:00:00+05:00 ",  # another year and zone for the yearless stamps after it
    "INFO 03-30 08:16:00 [metrics.py:455] ",  # vLLM: no year (the last full stamp's is taken)
    "WARNING 02-29 08:16:00.123 [core.py:7] ",  # a leap day: valid only in some years
    "INFO 02-30 08:16:00 [metrics.py:455] ",  # no such day
    "DEBUG 12-31 23:59:59 [a/b.py:1] 2026-11-30 08:00:06 ",  # both: the full one wins
]
PREFIXES = [
    "",
    "",
    "(TrainWorker pid=12) ",
    "\x1b[36m(skyrl_entrypoint pid=4100)\x1b[0m ",
    "(Training pid=3) ",
    "[rank3]: ",
    "(Worker_TP2 pid=1) [rank0]:",
]
CHATTER = [
    "gpu-node-2:4182:4182 [0] NCCL INFO Channel 16/0 : 18[0] -> peer via P2P/CUMEM/read",
    "[rank 18] throughput 1106.8 tokens/s/gpu mfu=0.305 allgather 1.472s",
    "INFO 03-30 08:16:00 [metrics.py:455] Avg generation throughput: 1326.7 tokens/s",
    "rank 18: micro_batch 16/16 forward 1.672s backward 3.343s",
    "",
    "   ",
    "    indented continuation",
    "{not a dict}",
    "value } closing",
]
HITS = [
    "Successfully saved checkpoint for global_step_5 to: /ckpt/global_step_5",
    "Successfully loaded complete checkpoint state from global_step_4",
    "LOADED checkpoint from global_step_7",
    "Reached max training steps (20)",
    "Resumed at global_step 21 >= max training steps (20); run is already COMPLETE",
    "Saved final checkpoint.",
    "Training done!",
    "Training already complete on resume",
    "Training stopped early by callback",
    "No checkpoint found, starting training from scratch",
    "*** JOB 4242 ON gpu-node-1 CANCELLED AT 2026-11-30T09:00:00 DUE TO TIME LIMIT ***",
    "Segmentation fault (core dumped)",
    "SEGMENTATION FAULT in rank 3",
    "*** SIGSEGV received at time=1700000000 ***",
    "Fatal Python error: Aborted",
    "CUDA error: an illegal memory access was encountered",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "terminate called after throwing an instance of 'c10::Error'",
    "Worker rank 3 received signal 15",
    "*** SIGTERM received at time=1796028360 on cpu 7 ***",
    "[rank0]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
    "ERROR something went wrong",
    "an ErRoR in mixed case",
    "timed out waiting; TIME OUT; TimeOut",
    "Bus error",
    'WANDB_MIRROR kind=train step=3 metrics={"trainer/global_step": 3, "loss": 0.5}',
    'WANDB_MIRROR kind=eval step=3 metrics={"eval/score": NaN}',
    "WANDB_MIRROR kind=train step=x metrics={broken",
    "{'trainer/global_step': 4, 'loss': 0.25}",
    "{'async/staleness_max': 0,",
    " 'trainer/global_step': 6}",
    '{"a": 1}',
    "KeyboardInterrupt",
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] NCCL error: unhandled system error",
    "what(): CUDA error: device-side assert triggered",
    "what(): std::bad_alloc",
    "CANCELLED AT 2026-11-30T09:00:00",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
]
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/trainer.py", line 10, in train',
    "    ray.get(ref)",
    "ray.exceptions.RayTaskError(ValueError): ray::Policy.step() (pid=9, ip=10.0.0.2)",
    '  File "/app/policy.py", line 3, in step',
    "ValueError: reward shape mismatch",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/app/main.py", line 1, in <module>',
    "RuntimeError: training failed",
]
BAD_BYTES = [b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\x80", b"\xc3\xa9", b"\xe2\x84\xaa"]
ENDINGS = [b"\n", b"\n", b"\n", b"\r\n", b"\r"]


@st.composite
def with_inserts(draw: st.DrawFn, text: str) -> bytes:
    """text as UTF-8 with ANSI codes and stray bytes inserted at random places (inside anchors too)."""
    data = text.encode()
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        piece = draw(st.one_of(st.sampled_from(ANSI).map(str.encode), st.sampled_from(BAD_BYTES)))
        data = data[:at] + piece + data[at:]
    return data


@st.composite
def log_line(draw: st.DrawFn) -> bytes:
    body = draw(
        st.one_of(
            st.sampled_from(CHATTER),
            st.sampled_from(HITS),
            st.sampled_from(TRACEBACK),
            st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), max_size=30),
            st.sampled_from([h.upper() for h in FATAL_HINTS] + ["İ sİg", "\u212a", "sig\u0307", "ﬁ"]),
        )
    )
    # Prefixes and stamps nest in any order (Ray's prefix comes before the process's own stamp).
    text = "".join(draw(st.lists(st.sampled_from([*PREFIXES, *STAMPS]), max_size=3))) + body
    if draw(st.booleans()):
        text += draw(st.sampled_from(["", " [repeated 3x across cluster]", "\x1b[0m"]))
    raw = draw(with_inserts(text)) if draw(st.integers(0, 3)) == 0 else text.encode()
    return raw


@st.composite
def log_file(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.one_of(log_line(), st.just(b"\n".join(t.encode() for t in TRACEBACK))), max_size=40))
    out = b""
    for line in lines:
        out += line + draw(st.sampled_from(ENDINGS))
    if out and draw(st.booleans()):
        out = out.rstrip(b"\r\n")  # no newline at the end
    return out


@MANY
@given(data=log_file(), block=st.one_of(st.integers(1, 64), st.sampled_from([256, 4096, 1 << 20])))
@example(data=b"a\r\nb\rc\n\rd", block=2)  # \r\n cut by a block edge
@example(data=b"Trace\x1b[1mback (most recent call last):\n  File 'x'\nValueError: x\n", block=7)
@example(data=b"\x1b\x1b[0m[31mError\n", block=3)  # removing one code makes another: clean_line does not
@example(data=b"\xc3\x1b[0m\xa9 error\n", block=1)  # a code between the two bytes of one character
@example(data=b"2026-11-30 08:00:00 a\n2026-11-30 08:00:09 b\nquiet\nSegmentation fault\n", block=4096)  # inherits :09
@example(  # a yearless vLLM stamp takes the year of the full stamp before it in the same quiet stretch
    data=b"2026-11-30 08:00:00 a\n2024-06-01 00:00:00 b\nINFO 02-29 08:16:00 [m.py:1] c\nx\nSegmentation fault\n",
    block=4096,
)
@example(data=b"2025-06-01T00:00:00+05:00 a\n(W pid=1) INFO 03-30 08:16:00 [m.py:1] b\nCUDA error: x\n", block=4096)
def test_block_scanner_matches_the_line_scanner(data: bytes, block: int) -> None:
    assert_same(data, block)


@MANY
@given(data=log_file(), block=st.sampled_from([32, 4096]), window=st.sampled_from([1, 40, 200]))
def test_backward_stamp_search_past_its_window(data: bytes, block: int, window: int) -> None:
    """The last stamp before a hit is searched backwards over _BACK_WINDOW bytes, then forwards (RE2) over the rest:
    shrink the window so generated logs take both paths."""
    with mock.patch.object(log_engine, "_BACK_WINDOW", window):
        assert_same(data, block)


def test_every_block_size_on_a_mixed_log() -> None:
    lines = [s.encode() for s in (*STAMPS, *CHATTER, *HITS, *TRACEBACK)]
    data = b"".join(line + ENDINGS[i % len(ENDINGS)] for i, line in enumerate(lines))
    want = assert_same(data, 1 << 20)
    assert want.errors and want.events and want.metric_rows and want.first_timestamp  # the log exercises them all
    for block in range(1, 97):
        assert_same(data, block)


def test_backward_stamp_search_window_edges() -> None:
    """Every window size up to past a line: some window edge falls inside the last stamp."""
    data = b"2026-11-30 08:00:01 a\nINFO 03-30 08:16:00 [m.py:1] b\n2025-01-02 03:04:05 c\nquiet\nCUDA error: x\n"
    want = assert_same(data, 4096)
    assert want.errors[0].timestamp is not None and want.errors[0].timestamp.year == 2025
    for window in range(1, 80):
        with mock.patch.object(log_engine, "_BACK_WINDOW", window):
            assert_same(data, 4096)


# -- giant lines ----------------------------------------------------------------------------------------------


@st.composite
def giant_file(draw: st.DrawFn) -> bytes:
    fill = draw(st.sampled_from([b"x", "é".encode(), "€".encode(), "😀".encode(), b"\xff", b"\x1b[0m"]))
    target = draw(st.sampled_from([MAX_LINE_CHARS - 1, MAX_LINE_CHARS, MAX_LINE_CHARS + 1, MAX_LINE_BYTES + 3]))
    body = fill * max(1, target // len(fill) + draw(st.integers(-2, 2)))
    head = draw(st.sampled_from([b"", b"2026-11-30 08:00:00 ", b"Segmentation fault ", b"WANDB_MIRROR "]))
    tail = draw(st.sampled_from([b"", b" Training done!", b" error", b"\r"]))
    giant = head + body + tail
    before = draw(st.sampled_from([b"", b"2026-11-30 07:00:00 ok\n", b"Traceback (most recent call last):\n"]))
    after = draw(st.sampled_from([b"", b"\n", b"\r\nCUDA error: x\n", b"\nValueError: after\n"]))
    return before + giant + after


@FEW
@given(data=giant_file(), block=st.sampled_from([65536, 1 << 20, BLOCK_BYTES]))
def test_giant_lines_are_cut_like_the_line_scanner(data: bytes, block: int) -> None:
    assert_same(data, block)


@pytest.mark.parametrize("fill", [b"x", "é".encode(), "😀".encode(), b"\xff"])
@pytest.mark.parametrize("length", [MAX_LINE_CHARS, MAX_LINE_BYTES + 3])
def test_giant_line_carried_across_blocks(fill: bytes, length: int) -> None:
    """A line longer than a block is carried block to block and cut: its first MAX_LINE_CHARS characters count
    (an indented frame line: the traceback keeps it, so the cut shows in the scan)."""
    data = b"Traceback (most recent call last):\n  " + fill * (length // len(fill)) + b" error\nValueError: x\n"
    want = assert_same(data, 65536)
    assert len(want.errors[0].traceback) >= min(2 + length // len(fill), MAX_LINE_CHARS)


def test_giant_line_memory_is_bounded_by_the_cut() -> None:
    """Past MAX_LINE_BYTES the rest of a line is skipped, not carried: the scanner never holds it."""
    sizes: list[int] = []

    class Watch(LogScanner):
        def feed(self, raw: str, cleaned: CleanLine | None = None) -> None:
            sizes.append(len(raw))
            super().feed(raw, cleaned)

    data = b"Segmentation fault " + b"y" * (3 * MAX_LINE_BYTES) + b"\nCUDA error: next\n"
    scanner = Watch("log://g")
    finder = hit_finder()
    assert finder is not None
    reads: list[int] = []

    def read(start: int, length: int) -> bytes:
        reads.append(length)
        return data[start : start + length]

    BlockScan(scanner, finder, 1 << 20).run(read)
    scan = scanner.finish()
    assert sizes == [MAX_LINE_CHARS, len("CUDA error: next")]
    assert [e.line for e in scan.errors] == [1, 2] and scan.lines == 2
    assert max(reads) == 1 << 20


# -- the engine's assumptions --------------------------------------------------------------------------------------


def test_non_ascii_lowercase_cannot_complete_a_hint() -> None:
    """The finder matches the lowercased-line hints with ASCII case classes. That is exact only if no non-ASCII
    character lowercases into text that overlaps a hint consistently (then the hint could appear in line.lower()
    without appearing in the raw bytes under ASCII case folding). Check every code point against every hint."""
    folding = {c: c.lower() for c in map(chr, range(0x80, sys.maxunicode + 1)) if any(x.isascii() for x in c.lower())}
    assert set(folding) == {"\u0130", "\u212a"}  # today: I WITH DOT ABOVE -> "i" + U+0307, KELVIN SIGN -> "k"
    for hint in FATAL_HINTS:
        for char, lowered in folding.items():
            for shift in range(-len(lowered) + 1, len(hint)):  # lowered placed at hint[shift:]
                pairs = [(hint[shift + i], x) for i, x in enumerate(lowered) if 0 <= shift + i < len(hint)]
                assert not all(a == b for a, b in pairs), (hint, char, shift)


# -- real files through the Storage port --------------------------------------------------------------------------


def test_most_sample_runs_have_logs(tmp_path: Path) -> None:
    names = [s for s in SCENARIOS if s != "list"]
    for name in names:
        write_sample_run(tmp_path / name, name)
    with_logs = [name for name in names if _log_files(tmp_path / name)]
    assert len(with_logs) >= len(SCENARIOS) // 2  # the per-scenario comparison below is not mostly skips


def _log_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".log", ".err", ".out", ".txt"))


def _scenarios_with_logs() -> list[str]:
    """Decided at collection by writing each sample once, so the comparison below never skips a case."""
    with tempfile.TemporaryDirectory() as tmp:
        names = [s for s in SCENARIOS if s != "list"]
        for name in names:
            write_sample_run(Path(tmp) / name, name)
        return [name for name in names if _log_files(Path(tmp) / name)]


@pytest.mark.parametrize("scenario", _scenarios_with_logs())
def test_sample_runs_scan_the_same_through_local_storage(tmp_path: Path, scenario: str) -> None:
    write_sample_run(tmp_path, scenario)
    files = _log_files(tmp_path)
    assert files
    storage = LocalStorage(checksums=False)
    for path in files:
        data = path.read_bytes()
        records = data.decode("utf-8", errors="replace").splitlines()
        if records and is_cri(records[0]):  # a pod log is scanned as the lines the program wrote (CRI decoded)
            data = "\n".join(cri_lines(records)).encode() + b"\n"
        assert canonical(scan_log(storage, str(path), "a1")) == canonical(reference_scan(data, str(path), "a1"))


@pytest.fixture
def without_re2(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """google-re2 missing: `import re2` raises ImportError; the cached finder is dropped before and after."""
    monkeypatch.setitem(sys.modules, "re2", None)
    hit_finder.cache_clear()
    yield
    monkeypatch.undo()
    hit_finder.cache_clear()


@pytest.mark.usefixtures("without_re2")
def test_without_the_engine_scan_log_feeds_every_line(tmp_path: Path) -> None:
    path = tmp_path / "worker.err"
    path.write_bytes(b"".join(line.encode() + b"\r\n" for line in (*CHATTER, *TRACEBACK, *HITS)))
    assert hit_finder() is None
    got = scan_log(LocalStorage(checksums=False), str(path), "a1")
    assert canonical(got) == canonical(reference_scan(path.read_bytes(), str(path), "a1"))
    assert got.errors and got.events


def test_the_finder_is_compiled_once_and_shared() -> None:
    """hit_finder is a cached factory: every scan of the process shares one compiled finder."""
    first = hit_finder()
    assert first is not None and hit_finder() is first


def test_unreadable_log_names_the_uri(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone.log")
    scan = scan_log(LocalStorage(checksums=False), missing, "a1")
    assert len(scan.problems) == 1 and missing in scan.problems[0]


# -- a log cut into segments (parsing/segments.py) ------------------------------------------------------------


def cut_scan(data: bytes, stops: list[int], overlap: int) -> LogScan:
    """The chained segments' merged scan: each segment seeded by the one before, as scan-log-part runs them."""
    read = lambda start, length: data[start : start + length]  # noqa: E731
    bounds = [0, *sorted(min(max(s, 0), len(data)) for s in stops), len(data)]
    scans, seed = [], None
    for index in range(len(bounds) - 1):
        segment = LogSegment(
            index=index, count=len(bounds) - 1, start=bounds[index], stop=bounds[index + 1], size=len(data), seed=seed
        )
        result = scan_segment(read, "log://x", "a1", segment, overlap)
        scans.append(result.scan)
        seed = result.next_seed
    return merge_segments(scans)


def assert_same_cut(data: bytes, stops: list[int], overlap: int, want: LogScan | None = None) -> LogScan:
    want = want or reference_scan(data, "log://x", "a1")
    got = cut_scan(data, stops, overlap)
    for key, value in asdict(want).items():
        assert asdict(got)[key] == value, f"{key} differs (stops={stops}, overlap={overlap}, data={data[:300]!r})"
    assert canonical(got) == canonical(want)
    return want


TRACEBACK_CHAIN = (
    b'Traceback (most recent call last):\n  File "/app/trainer.py", line 10, in train\n    ray.get(ref)\n'
    b"ray.exceptions.RayTaskError(ValueError): ray::Policy.step() (pid=9, ip=10.0.0.2)\n"
    b'  File "/app/policy.py", line 3, in step\nValueError: reward shape mismatch\n\n'
    b"During handling of the above exception, another exception occurred:\n\n"
    b'Traceback (most recent call last):\n  File "/app/main.py", line 1, in <module>\nRuntimeError: training failed\n'
)
NCCL = b"gpu-node-2:4182:4182 [0] NCCL INFO Channel 16/0 : 18[0] -> peer via P2P/CUMEM/read\n"


@CUTS
@given(data=log_file(), cuts=st.lists(st.floats(0, 1), max_size=4), overlap=st.sampled_from([1 << 20, 4096, 600]))
@example(data=b"a\r\nb\rc\n\rd", cuts=[0.3, 0.31, 0.5], overlap=1)  # cuts between \r and \n, empty segments
@example(
    data=b"x\nterminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: boom\ny\n",
    cuts=[0.2, 0.75],
    overlap=4096,
)  # the what() line is past the cut: the segment that kept the terminate line completes it
@example(
    data=(TRACEBACK_CHAIN * 2 + NCCL * 2) * 2
    + b"Traceback (most recent call last):\n"
    + NCCL * 3
    + TRACEBACK_CHAIN * 2,
    cuts=[0.8125],
    overlap=600,
)  # a traceback header, chatter, then a traceback: open for 600+ bytes at the cut (the overlap is widened)
def test_cut_segments_give_the_whole_files_scan(data: bytes, cuts: list[float], overlap: int) -> None:
    """Cut anywhere (inside tracebacks, metric blocks, \\r\\n pairs, multi-byte characters) with an overlap that
    covers what is open at the cut: the merged scan is the whole file's, field for field."""
    stops = [int(c * len(data)) for c in cuts]
    want = reference_scan(data, "log://x", "a1")
    assert_same_cut(data, stops, covering_overlap(data, stops, overlap), want)


def covering_overlap(data: bytes, stops: list[int], overlap: int) -> int:
    """`overlap`, widened where the contract needs it. parsing/segments.py promises the whole file's scan when what
    is open at a cut (a traceback, a legacy metric block, a `terminate called` awaiting its what()) began within the
    overlap; a traceback header followed by interleaved chatter, or a `{` block with foreign lines inside, stays open
    for as long as they run, so a 600-byte test overlap may begin inside one. Then the overlap reaches back to the
    first line before the cut that could open one (production's overlap is 1 MiB, 16x a traceback's kept head)."""
    starts = [0, *(m.end() for m in re.finditer(rb"\r\n?|\n", data))]
    lines = re.split(rb"\r\n?|\n", data)
    opens = [
        starts[i]
        for i, line in enumerate(lines)
        if i < len(starts)
        and re.search(rb"traceback|\{|terminate", re.sub(rb"\x1b\[[0-9;]*[A-Za-z]|\x1b", b"", line), re.I)
    ]
    needed = overlap
    for stop in stops:
        at = bisect.bisect_left(starts, stop)
        cut = starts[at] if at < len(starts) else len(data)
        first = next((o for o in opens if o < cut), None)
        if first is not None:
            needed = max(needed, cut - first + 1)
    return needed


def test_every_cut_of_a_mixed_log() -> None:
    lines = [s.encode() for s in (*STAMPS, *CHATTER, *HITS, *TRACEBACK)]
    data = b"".join(line + ENDINGS[i % len(ENDINGS)] for i, line in enumerate(lines))
    want = reference_scan(data, "log://x", "a1")
    assert len(data) > 2000
    for stop in range(0, len(data) + 1, 7):  # inside lines, stamps, \r\n pairs and tracebacks
        assert_same_cut(data, [stop, stop + 700], 4096, want)


def test_caps_count_across_cuts() -> None:
    """64 errors / 16 teardown lines per file: the caps count what earlier segments kept, wherever the cuts fall."""
    data = b"".join(b"Segmentation fault %d\nWorker rank 3 received signal 15\n" % i for i in range(100))
    want = assert_same_cut(data, [len(data) // 5 * k for k in range(1, 5)], 300)
    assert want.errors_dropped > 0 and len(want.errors) == MAX_ERRORS_PER_FILE


def test_a_traceback_longer_than_the_overlap_is_the_limit() -> None:
    """What the overlap buys: a traceback open at the cut is re-read only if it began within the overlap."""
    frames = b"".join(b'  File "x.py", line %d, in f\n' % i for i in range(200))
    data = b"2026-11-30 08:00:00 a\nTraceback (most recent call last):\n" + frames + b"ValueError: boom\n"
    want = assert_same_cut(data, [len(data) - 50], len(data))
    assert want.errors[0].error_type == "ValueError"
    short = cut_scan(data, [len(data) - 50], 1000)  # the header is 5 KB before the cut: not seen by the overlap
    # Only the final line is read, as an exception line without its traceback (the lowest tier of cause).
    assert [(e.error_type, e.kind) for e in short.errors] == [("ValueError", "orphan_line")]
    assert [e.kind for e in want.errors] == ["traceback"]


@pytest.mark.parametrize("at", range(0, 12))
def test_line_start(at: int) -> None:
    data = b"ab\r\ncd\re\n\nf"
    starts = [0, 4, 7, 9, 10, len(data)]
    want = next(s for s in starts if s >= at) if at <= len(data) else len(data)
    assert line_start(lambda start, length: data[start : start + length], at) == want


def test_line_start_past_a_probe() -> None:
    data = b"x" * (200 * 1024) + b"\r\nrest"
    assert line_start(lambda start, length: data[start : start + length], 5) == 200 * 1024 + 2
