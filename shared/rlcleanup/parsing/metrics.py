"""Metric rows from training logs, and stitching them across a restart chain.

Three formats (run-layout.md "Logs and metrics", run-layout-v3.md §5):
  current  `WANDB_MIRROR kind=train step=7 metrics={...json...}` (also kind=eval), one line;
  legacy   a Python-dict block `{'async/staleness_max': 0, ..., 'trainer/global_step': 7}`, maybe several lines;
  console  NovaSky SkyRL's console tracker: `Step 7: ` then `pprint.pformat` of the payload on the next lines, every
           float printed as a `'%.4f'` string (NovaSky-AI/SkyRL `skyrl/train/utils/tracking.py` `ConsoleLogger.log` /
           `stringify_floats` @a956457): a legacy block whose step may come from the `Step N:` header, and whose
           numeric strings are read as numbers (`metric_value`).
ANSI colour codes, Ray `(name pid=N, ip=...) ` prefixes and leading timestamps may surround either.
`MetricParser` is fed one line at a time so the log scanner reads each file once, in bounded memory.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from rlcleanup.formats.config import as_int
from rlcleanup.models.record import ChainCoverage
from rlcleanup.parsing.dict_literal import parse_dict_literal

MAX_LINE_CHARS = 1024 * 1024  # longer lines are cut before any regex runs
MAX_BLOCK_CHARS = 256 * 1024  # a legacy dict block larger than this is dropped (runaway `{`)
MAX_BLOCK_LINES = 2000
MAX_FOREIGN_LINES = 64  # interleaved non-dict lines tolerated inside a legacy block

# ESC first, the alternation after it: the same matches as `ESC[...|ESC[@-Z\\-_]` (`[` is in neither second class),
# and sre's literal-prefix search finds each ESC without trying the pattern at every character.
_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_])")
_TIMESTAMP = re.compile(
    r"^\[?(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)\]?\s?"
)
_RAY_PREFIX = re.compile(r"^\([^()]*\bpid=\d+[^()]*\) ?")
# torch.distributed's per-rank prefix (`[rank3]:` before every line a rank prints, tracebacks included).
_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")
# vLLM's logger: `ERROR 08-06 21:18:16 [core.py:711] ` (vllm/logger.py _FORMAT: no year in the stamp).
# vLLM before 0.8 wrote the location without its opening bracket: `ERROR 11-18 18:07:28 engine.py:366] `.
_VLLM_PREFIX = re.compile(
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)? \[?[\w./-]+:\d+\] ?"
)
# docker compose's service prefix (`vllm-1  | `): the service name, its replica number, then a bar.
_COMPOSE_PREFIX = re.compile(r"^[a-z][\w.-]*-\d+ +\| ")
_MAX_PREFIXES = 6  # `(Worker_TP2 pid=1) (Worker_TP5 pid=2) [rank0]: 2026-...` nests a few deep, never more
_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_MIRROR = re.compile(r"WANDB_MIRROR\b(?P<attrs>.*?)\bmetrics=")
# The console tracker's header (`logger.info(f"Step {step}: \n{data_as_str}")`): the dict follows on the next line,
# or on the same one where a writer joined them.
CONSOLE_STEP = re.compile(r"\bStep (?P<step>[0-9]{1,12}): ?(?=\{|$)")
# A number printed as text: `'%.4f'` (`'0.5000'`, `'-1.2500'`), also plain ints and exponents; `nan`/`inf` parse too
# and are dropped as non-finite, as numeric ones are.
_NUMERIC_TEXT = re.compile(
    r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity)", re.IGNORECASE | re.ASCII
)
MAX_NUMERIC_TEXT = 64
_ATTR = re.compile(r"(\w+)=(\S+)")
_JSON = json.JSONDecoder()  # stateless: one for every mirror line, not one built per line
_GLOBAL_STEP = "trainer/global_step"


@dataclass(frozen=True)
class CleanLine:
    text: str  # decorations removed, indentation kept
    timestamp: datetime | None
    month_day_time: str | None = None  # vLLM's yearless `MM-DD HH:MM:SS`; the scanner supplies the year


def parse_timestamp(value: str) -> datetime | None:
    try:
        ts = datetime.fromisoformat(value.replace(",", ".").replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)  # naive stamps are taken as UTC so all compare


def clean_line(raw: str) -> CleanLine:
    """Strip ANSI codes and the per-line prefixes (Ray's `(actor pid=N)`, torch's `[rankN]:`, a timestamp, vLLM's
    `LEVEL MM-DD HH:MM:SS [file:line]`) in whatever order they nest; keep the rest and its indentation.

    Ray prints the prefix before the process's own line, so `(actor pid=N) 2026-11-30 08:00:00.000 | ERROR ...`
    carries its timestamp after the prefix: prefixes are peeled repeatedly, not in one fixed order.
    """
    text = raw[:MAX_LINE_CHARS]
    if "\x1b" in text:  # most lines carry no colour: no substitution to run
        text = _ANSI.sub("", text)
    text = text.rstrip("\r\n")
    timestamp = None
    month_day_time = None
    for _ in range(_MAX_PREFIXES):
        match = _RAY_PREFIX.match(text) or _RANK_PREFIX.match(text) or _COMPOSE_PREFIX.match(text)
        if match:
            text = text[match.end() :]
            continue
        if timestamp is None and (match := _TIMESTAMP.match(text)):
            timestamp = parse_timestamp(match.group("ts"))
            text = text[match.end() :]
            continue
        if month_day_time is None and (match := _VLLM_PREFIX.match(text)):
            month_day_time = match.group("md")
            text = text[match.end() :]
            continue
        break
    if "[repeated " in text:  # _RAY_REPEAT's literal: without it the `\s*` scan from every character finds nothing
        text = _RAY_REPEAT.sub("", text)
    return CleanLine(text, timestamp, month_day_time)


@dataclass(frozen=True)
class MetricRow:
    step: int
    kind: str  # "train" | "eval"
    metrics: dict[str, Any]
    line: int = 0  # 1-based line where the row starts in source_uri
    source_uri: str | None = None
    attempt_id: str | None = None
    fmt: str = "mirror"  # "mirror" | "legacy" | "console"


def _key_matches(key: str, name: str) -> bool:
    if key == name:
        return True
    if not key.endswith(name):
        return False
    before = key[-len(name) - 1]
    return not (before.isalnum() or before == "_")  # a prefix ends on a separator, never mid-word


def metric_value(row: MetricRow | Mapping[str, Any], name: str) -> float | None:
    """The value of metric `name`, matched exactly or on a suffix after a sink prefix (`train/reward/...`).

    Returns a finite float, else None (absent, non-numeric, NaN or infinite: none of these can be scored).
    """
    metrics = row.metrics if isinstance(row, MetricRow) else row
    value = metrics.get(name)
    if value is None:
        keys = sorted((k for k in metrics if isinstance(k, str) and _key_matches(k, name)), key=len)
        value = metrics[keys[0]] if keys else None
    if isinstance(value, str):
        value = numeric_text(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def numeric_text(text: str) -> float | None:
    """A number the console tracker printed as a string (`'0.5000'`); None for any other text."""
    text = text.strip()
    if len(text) > MAX_NUMERIC_TEXT or not _NUMERIC_TEXT.fullmatch(text):
        return None
    return float(text)


_int_step = as_int


def _global_step(metrics: Mapping[str, Any]) -> int | None:
    if _GLOBAL_STEP in metrics:
        return _int_step(metrics[_GLOBAL_STEP])
    for key, value in metrics.items():
        if isinstance(key, str) and _key_matches(key, _GLOBAL_STEP):
            return _int_step(value)
    return None


def _brace_delta(text: str, depth: int, quote: str | None) -> tuple[int, str | None, int | None]:
    """Scan text tracking brace depth outside string literals; returns (depth, open quote, index where depth hit 0)."""
    escaped = False
    for i, ch in enumerate(text):
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return 0, None, i
    return depth, quote, None


def _kind_of(metrics: Mapping[str, Any]) -> str:
    keys = [k for k in metrics if isinstance(k, str) and not _key_matches(k, _GLOBAL_STEP)]
    return "eval" if keys and all(k.startswith("eval") or "/eval/" in k for k in keys) else "train"


class MetricParser:
    """Feed lines one at a time; returns the rows they complete. Memory is bounded by MAX_BLOCK_CHARS."""

    def __init__(self, source_uri: str | None = None, attempt_id: str | None = None) -> None:
        self.source_uri = source_uri
        self.attempt_id = attempt_id
        self.dropped_blocks = 0  # legacy blocks abandoned (too big, never closed or not a literal)
        self._parts: list[str] = []
        self._chars = 0
        self._depth = 0
        self._quote: str | None = None
        self._start_line = 0
        self._foreign = 0
        self._header: tuple[int, int] | None = None  # (step, line) of the last console-tracker `Step N:` header
        self._block_step: int | None = None  # the header's step, when it opened the block being read

    def feed(self, raw: str, lineno: int, cleaned: CleanLine | None = None) -> MetricRow | None:
        text = (cleaned or clean_line(raw)).text
        if "WANDB_MIRROR" in text:
            self._abandon()  # a mirror line never continues a dict block
            return self._mirror(text, lineno)
        if self._parts:
            return self._continue(text, lineno)
        header = CONSOLE_STEP.search(text)
        if header is not None:
            self._header = (int(header.group("step")), lineno)
        start = self._dict_start(text)
        if start is None:
            return None
        self._begin(lineno)
        return self._consume(text[start:], lineno)

    def finish(self) -> None:
        self._abandon()

    @property
    def in_block(self) -> bool:
        """A legacy dict block is open: every following line matters until it closes (the block scanner asks)."""
        return bool(self._parts)

    def _mirror(self, text: str, lineno: int) -> MetricRow | None:
        match = _MIRROR.search(text)
        if not match:
            return None
        attrs = dict(_ATTR.findall(match.group("attrs")))
        try:
            metrics, _ = _JSON.raw_decode(text, match.end())
        except ValueError:
            return None
        if not isinstance(metrics, dict):
            return None
        step = _int_step(attrs.get("step"))
        if step is None:
            step = _global_step(metrics)
        if step is None:
            return None
        kind = attrs.get("kind", "train").lower()
        return self._row(step, "eval" if kind == "eval" else "train", metrics, lineno, "mirror")

    @staticmethod
    def _dict_start(text: str) -> int | None:
        idx = text.find("{")
        while idx != -1:
            if text[idx + 1 : idx + 2] in ("'", '"'):
                return idx
            idx = text.find("{", idx + 1)
        return None

    def _begin(self, lineno: int) -> None:
        self._parts, self._chars, self._depth, self._quote = [], 0, 0, None
        self._start_line, self._foreign = lineno, 0
        # Only a header on this line or the one right before it names the block's step (the block engine feeds
        # just the lines that can matter, so "the last header seen" could differ between the two scanners).
        header = self._header
        self._block_step = header[0] if header is not None and lineno - header[1] in (0, 1) else None

    def _abandon(self) -> None:
        if self._parts:
            self.dropped_blocks += 1
        self._parts, self._chars, self._depth, self._quote = [], 0, 0, None

    def _continue(self, text: str, lineno: int) -> MetricRow | None:
        stripped = text.lstrip()
        restart = self._dict_start(text) if self._quote is None and text[:1] not in ("", " ", "\t") else None
        if restart is not None:
            # An unindented line opening a dict starts a new block (pprint continuations are indented).
            self._abandon()
            self._begin(lineno)
            return self._consume(text[restart:], lineno)
        if self._quote is None and stripped and not (text[0].isspace() or stripped[0] in "'\"}])-0123456789."):
            # An interleaved line from another process (pprint continuations are indented or quoted).
            self._foreign += 1
            if self._foreign > MAX_FOREIGN_LINES:
                self._abandon()
            return None
        return self._consume(text, lineno)

    def _consume(self, text: str, lineno: int) -> MetricRow | None:
        depth, quote, end = _brace_delta(text, self._depth, self._quote)
        piece = text if end is None else text[: end + 1]
        self._parts.append(piece)
        self._chars += len(piece) + 1
        self._depth, self._quote = depth, quote
        if end is None:
            if self._chars > MAX_BLOCK_CHARS or len(self._parts) > MAX_BLOCK_LINES:
                self._abandon()
            return None
        block = "\n".join(self._parts)
        self._parts, self._chars, self._depth, self._quote = [], 0, 0, None
        value = parse_dict_literal(block) if len(block) <= MAX_BLOCK_CHARS else None
        if value is None:
            self.dropped_blocks += 1
            return None
        metrics = {str(k): v for k, v in value.items()}
        step = _global_step(metrics)
        fmt = "legacy"
        if self._block_step is not None:
            fmt = "console"
            step = self._block_step if step is None else step
        if step is None:
            return None  # a dict that is not a metric row (a config dump, a sample, ...)
        return self._row(step, _kind_of(metrics), metrics, self._start_line, fmt)

    def _row(self, step: int, kind: str, metrics: dict[str, Any], lineno: int, fmt: str) -> MetricRow:
        return MetricRow(step, kind, metrics, lineno, self.source_uri, self.attempt_id, fmt)


def parse_metric_lines(
    lines: Iterable[str], source_uri: str | None = None, attempt_id: str | None = None
) -> Iterator[MetricRow]:
    parser = MetricParser(source_uri, attempt_id)
    for lineno, raw in enumerate(lines, start=1):
        row = parser.feed(raw, lineno)
        if row is not None:
            yield row
    parser.finish()


# -- stitching -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptSpan:
    attempt_id: str
    first_step: int | None
    last_step: int | None
    rows: int  # train rows this attempt logged (including re-logged ones)


@dataclass(frozen=True)
class Overlap:
    step: int
    kept_attempt: str  # the attempt that logged it first (its row is kept)
    later_attempt: str
    same_values: bool


@dataclass
class StitchedMetrics:
    train: dict[int, MetricRow] = field(default_factory=dict)  # step -> first-seen row, ascending steps
    eval: dict[int, MetricRow] = field(default_factory=dict)
    attempts: list[AttemptSpan] = field(default_factory=list)
    overlaps: list[Overlap] = field(default_factory=list)
    coverage: ChainCoverage = field(default_factory=ChainCoverage)

    def series(self, name: str, kind: str = "train") -> dict[int, float]:
        """step -> finite value of metric `name` (suffix-matched); steps without it are left out."""
        rows = self.train if kind == "train" else self.eval
        out: dict[int, float] = {}
        for step, row in rows.items():
            value = metric_value(row, name)
            if value is not None:
                out[step] = value
        return out

    def iter_jsonl(self) -> Iterator[str]:
        """A `chain` header line, then one line per kept row (train, then eval, by step).

        Non-finite floats are written as null so every line is strict JSON.
        """
        header = {
            "kind": "chain",
            "coverage": self.coverage.model_dump(mode="json"),
            "attempts": [vars(a) for a in self.attempts],
            "overlaps": [vars(o) for o in self.overlaps],
        }
        yield _dumps(header)
        for rows in (self.train, self.eval):
            for row in rows.values():
                yield _dumps(
                    {
                        "kind": row.kind,
                        "step": row.step,
                        "attempt": row.attempt_id,
                        "uri": row.source_uri,
                        "line": row.line,
                        "fmt": row.fmt,
                        "metrics": row.metrics,
                    }
                )

    def to_jsonl(self) -> str:
        return "".join(line + "\n" for line in self.iter_jsonl())

    @classmethod
    def from_jsonl(cls, lines: Iterable[str]) -> StitchedMetrics:
        out = cls()
        for text in lines:
            if not text.strip():
                continue
            obj = json.loads(text)
            if obj.get("kind") == "chain":
                out.coverage = ChainCoverage.model_validate(obj["coverage"])
                out.attempts = [AttemptSpan(**a) for a in obj["attempts"]]
                out.overlaps = [Overlap(**o) for o in obj["overlaps"]]
                continue
            row = MetricRow(
                obj["step"], obj["kind"], obj["metrics"], obj["line"], obj["uri"], obj["attempt"], obj["fmt"]
            )
            (out.eval if row.kind == "eval" else out.train)[row.step] = row
        return out


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _dumps(obj: Any) -> str:
    return json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False, default=str)


def coverage_of(steps: Iterable[int], expect_from: int | None = None) -> ChainCoverage:
    """First/last step and the inclusive ranges missing between them (from `expect_from` when given)."""
    ordered = sorted(set(steps))
    if not ordered:
        return ChainCoverage()
    gaps: list[tuple[int, int]] = []
    if expect_from is not None and ordered[0] > expect_from:
        gaps.append((expect_from, ordered[0] - 1))
    for prev, cur in pairwise(ordered):
        if cur > prev + 1:
            gaps.append((prev + 1, cur - 1))
    return ChainCoverage(first_step=ordered[0], last_step=ordered[-1], gaps=gaps)


def stitch(per_attempt: list[tuple[str, list[MetricRow]]], *, expect_from: int | None = None) -> StitchedMetrics:
    """Join attempts (in chain order) by step, first seen wins. A step a later attempt logs again is an overlap."""
    out = StitchedMetrics()
    train: dict[int, MetricRow] = {}
    evals: dict[int, MetricRow] = {}
    overlapped: set[tuple[int, str]] = set()
    for attempt_id, rows in per_attempt:
        steps: list[int] = []
        for row in rows:
            if row.attempt_id != attempt_id:
                row = replace(row, attempt_id=attempt_id)
            if row.kind == "eval":
                evals.setdefault(row.step, row)
                continue
            steps.append(row.step)
            kept = train.get(row.step)
            if kept is None:
                train[row.step] = row
            elif kept.attempt_id != attempt_id and (row.step, attempt_id) not in overlapped:
                overlapped.add((row.step, attempt_id))  # the same row in finelog and a worker log counts once
                out.overlaps.append(Overlap(row.step, kept.attempt_id or "", attempt_id, kept.metrics == row.metrics))
        out.attempts.append(
            AttemptSpan(attempt_id, min(steps) if steps else None, max(steps) if steps else None, len(steps))
        )
    out.train = dict(sorted(train.items()))
    out.eval = dict(sorted(evals.items()))
    out.coverage = coverage_of(out.train, expect_from)
    return out
