"""The log scan's shortcuts (issue 48, the scan's CPU) give what the long way gave.

Each shortcut skips work only where the work cannot change the result: the part's JSON without dataclasses.asdict's
deep copy, the ANSI regex with its ESC factored out, the `[repeated Nx across cluster]` strip and the event searches
gated by a literal their match must hold. Every test here compares against the long way, so it fails if a shortcut
changes a byte.
"""

from __future__ import annotations

import json
import math
import re
import re._parser as sre_parse  # the stdlib's own parse of a pattern: which literals every match holds
from dataclasses import asdict
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from rlcleanup.parsing import metrics
from rlcleanup.parsing.log_grammar import EVENT_GATES, EVENT_HINTS, EVENT_PATTERNS, MAX_MATCH_CHARS, EventKind
from rlcleanup.parsing.log_scanner import ErrorCandidate, LogScan, TrainerEvent, scan_lines
from rlcleanup.parsing.metrics import MetricRow, clean_line
from rlcleanup.steps.logscan import _jsonable, scans_json

FAST = settings(max_examples=50, deadline=None)

# metrics.py's ANSI pattern and repeat strip before the shortcuts: the reference the shortcuts are held to.
_ANSI_BEFORE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_RAY_REPEAT_BEFORE = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")


def _as_before(scans: list[LogScan]) -> bytes:
    """steps/logscan.scan_part's bytes before scans_json: asdict, then the same encoder."""
    return json.dumps([asdict(s) for s in scans], default=_jsonable, sort_keys=True).encode()


def _scan_with_everything() -> LogScan:
    stamp = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    scan = LogScan(uri="gs://b/run/logs/worker-0.err", attempt_id="a1", lines=42, errors_dropped=1)
    scan.first_timestamp, scan.last_timestamp = stamp, stamp + timedelta(hours=1)
    odd = {"nan": math.nan, "inf": -math.inf, "set": {3, 1}, "bytes": b"\x00", "complex": 1j, "tuple": (1, "x")}
    scan.metric_rows = [
        MetricRow(7, "train", {"loss": 0.5, "nested": {"a": [1, 2, {"b": None}]}, **odd}, 3, scan.uri, "a1"),
        MetricRow(8, "eval", {"eval/score": 1}, 9, None, None, "console"),
    ]
    scan.events = [
        TrainerEvent(EventKind.saved_checkpoint, scan.uri, 5, 7, "Saved", stamp),
        TrainerEvent(
            EventKind.budget_stated,
            scan.uri,
            6,
            None,
            "t",
            datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5))),
            100,
        ),
    ]
    scan.errors = [
        ErrorCandidate(scan.uri, "a1", 10, "RuntimeError", "boom", "Traceback ...\nRuntimeError: boom", "traceback"),
        ErrorCandidate(
            scan.uri, None, 11, "x", "y", "z", "noise_line", False, "nccl", "why", stamp, True, False, "n", "s"
        ),
    ]
    scan.problems = ["one"]
    return scan


def test_a_parts_json_is_the_bytes_asdict_gave() -> None:
    scans = [_scan_with_everything(), LogScan(uri="empty", attempt_id=None)]
    assert scans_json(scans) == _as_before(scans)


def test_a_scanned_logs_json_is_the_bytes_asdict_gave() -> None:
    lines = [
        '\x1b[36m(pid=1)\x1b[0m 2026-11-30 08:00:00 WANDB_MIRROR kind=train step=3 metrics={"loss": NaN, "a/b": [1]}',
        "{'trainer/global_step': 4, 'x': {1, 2}, 'y': (1, 2)}",
        "Successfully saved checkpoint for global_step_4",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "RuntimeError: CUDA error: an illegal memory access",
        "INFO 11-30 09:00:00 [core.py:1] Reached max training steps (4)",
    ]
    scans = [scan_lines(lines, "u", "a"), scan_lines(lines[::-1], "v", None)]
    assert scans_json(scans) == _as_before(scans)


_LINE_PIECES = st.sampled_from(
    [
        "\x1b",
        "[",
        "0",
        "1;3",
        "?",
        "m",
        " ",
        "-",
        "~",
        "@",
        "Z",
        "\\",
        "_",
        "x",
        "\t",
        "[repeated ",
        "2",
        "x across cluster]",
        "  ",
        "(actor pid=3) ",
        "2026-11-30 08:00:00 ",
        "é",
        "\x1b[",
        "\x1b[0m",
        "\x1bM",
    ]
)


@FAST
@given(st.lists(_LINE_PIECES, max_size=40).map("".join))
def test_the_ansi_and_repeat_shortcuts_clean_as_the_regexes_did(line: str) -> None:
    assert metrics._ANSI.sub("", line) == _ANSI_BEFORE.sub("", line)
    if "\x1b" not in line:  # clean_line skips the substitution
        assert _ANSI_BEFORE.sub("", line) == line
    if "[repeated " not in line:  # clean_line skips the strip
        assert _RAY_REPEAT_BEFORE.sub("", line) == line


def _top_level_literals(pattern: re.Pattern[str]) -> list[str]:
    """The runs of plain characters at the top level of pattern (outside groups, branches and repeats)."""
    runs, run = [], ""
    for op, value in sre_parse.parse(pattern.pattern, pattern.flags).data:
        if op is sre_parse.LITERAL:
            run += chr(value)
        else:
            runs.append(run)
            run = ""
    return [*runs, run]


def test_every_event_gate_is_a_literal_every_match_holds() -> None:
    assert len(EVENT_GATES) == len(EVENT_PATTERNS)
    for (kind, pattern), gate in zip(EVENT_PATTERNS, EVENT_GATES, strict=True):
        if gate is None:
            continue
        assert not pattern.flags & re.IGNORECASE, f"{kind}: a caseless pattern cannot be gated by a plain `in`"
        assert any(gate in run for run in _top_level_literals(pattern)), f"{kind}: {gate!r} is not always matched"
    caseless = [gate for (_, pattern), gate in zip(EVENT_PATTERNS, EVENT_GATES, strict=True) if pattern.flags & re.I]
    assert caseless == [None] * len(caseless)


_PHRASES = [
    "Successfully saved checkpoint for global_step_12",
    "Resumed at global_step 9 >= max training steps (9); run is already COMPLETE",
    "Reached max training steps (9)",
    "Reached max_training_steps=9, stopping early",
    "Steps per epoch: 4, TOTAL Training Steps: 40",
    "Saved final checkpoint.",
    "Training done!",
    "Loaded complete checkpoint state from global_step_3",
    "No checkpoint found, starting training from scratch",
    "Training already complete on resume",
    "Training stopped early by callback",
    "*** JOB 42 ON node-1 CANCELLED AT 2026-11-30T08:00:00 ***",
    "trainer/global_step",
]


@FAST
@given(st.lists(st.sampled_from(_PHRASES), min_size=1, max_size=3), st.text(max_size=20))
def test_the_gated_event_search_finds_what_every_search_found(phrases: list[str], noise: str) -> None:
    line = (noise + " ".join(phrases)).replace("\n", " ").replace("\r", " ")
    text = clean_line(line).text[:MAX_MATCH_CHARS]
    hinted = any(hint in text for hint in EVENT_HINTS)
    expected = next((kind for kind, pattern in EVENT_PATTERNS if pattern.search(text)), None) if hinted else None
    assert [event.kind for event in scan_lines([line], "u").events] == ([expected] if expected else [])
