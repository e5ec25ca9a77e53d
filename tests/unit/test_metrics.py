from __future__ import annotations

import json
import math
import tracemalloc
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from rlcleanup.parsing.metrics import (
    MAX_BLOCK_CHARS,
    MetricParser,
    MetricRow,
    StitchedMetrics,
    clean_line,
    metric_value,
    parse_metric_lines,
    stitch,
)

PREFIX = "\x1b[36m(skyrl_entrypoint pid=4242)\x1b[0m "


def mirror(step: int, reward: float, kind: str = "train") -> str:
    metrics = {"reward/avg_raw_reward": reward, "trainer/global_step": step}
    return f"{PREFIX}WANDB_MIRROR kind={kind} step={step} metrics={json.dumps(metrics)}\x1b[0m"


def row(step: int, reward: float, attempt: str = "") -> MetricRow:
    return MetricRow(step, "train", {"reward/avg_raw_reward": reward, "trainer/global_step": step}, attempt_id=attempt)


def test_clean_line_strips_ansi_timestamp_and_ray_prefix() -> None:
    cleaned = clean_line("2025-03-01T10:00:00Z \x1b[33m(SkyRLTrainer pid=12, ip=10.0.0.3)\x1b[0m   File 'x'")
    assert cleaned.text == "  File 'x'"
    assert cleaned.timestamp is not None and cleaned.timestamp.isoformat() == "2025-03-01T10:00:00+00:00"


def test_mirror_rows_train_and_eval() -> None:
    rows = list(parse_metric_lines(["noise", mirror(7, 0.75), mirror(7, 0.5, kind="eval")], "log://a"))
    assert [(r.step, r.kind, r.line, r.fmt) for r in rows] == [(7, "train", 2, "mirror"), (7, "eval", 3, "mirror")]
    assert rows[0].metrics == {"reward/avg_raw_reward": 0.75, "trainer/global_step": 7}
    assert rows[0].source_uri == "log://a"


def test_mirror_without_step_attr_uses_global_step_and_bad_json_is_skipped() -> None:
    lines = [
        'WANDB_MIRROR kind=train metrics={"trainer/global_step": 3, "x": 1}',
        'WANDB_MIRROR kind=train step=4 metrics={"broken": ',
    ]
    assert [r.step for r in parse_metric_lines(lines)] == [3]


def test_legacy_multiline_block_with_prefixes_numpy_and_nan() -> None:
    lines = [
        f"{PREFIX}{{'async/staleness_max': 0,",
        f"{PREFIX} 'reward/avg_raw_reward': np.float64(0.25),",
        "INFO 03-01 10:00:00 llm_engine.py:1] interleaved line from another process",
        f"{PREFIX} 'policy/policy_loss': nan,",
        f"{PREFIX} 'trainer/global_step': 12}}",
    ]
    rows = list(parse_metric_lines(lines))
    assert len(rows) == 1
    r = rows[0]
    assert (r.step, r.kind, r.line, r.fmt) == (12, "train", 1, "legacy")
    assert r.metrics["reward/avg_raw_reward"] == 0.25
    assert math.isnan(r.metrics["policy/policy_loss"])
    assert metric_value(r, "policy/policy_loss") is None  # NaN cannot be scored


def test_legacy_single_line_and_non_metric_dicts_ignored() -> None:
    lines = [
        "{'trainer': {'epochs': 1}, 'data': {'train_data': ['a.parquet']}}",  # a config dump: no global_step
        "step summary {'reward/avg_raw_reward': 0.5, 'trainer/global_step': 3}",
        "{'eval/gsm8k/avg_score': 0.9, 'trainer/global_step': 3}",
    ]
    rows = list(parse_metric_lines(lines))
    assert [(r.step, r.kind) for r in rows] == [(3, "train"), (3, "eval")]


def test_runaway_brace_is_dropped_and_parsing_recovers() -> None:
    parser = MetricParser()
    assert parser.feed("{'a': 1,", 1) is None
    for i in range(2, 5000):
        parser.feed(f" 'k{i}': {'x' * 100!r},", i)
        assert parser._chars <= MAX_BLOCK_CHARS + 200
    assert parser.dropped_blocks >= 1
    got = parser.feed(mirror(5, 1.0), 5000)
    assert got is not None and got.step == 5


def test_metric_value_matches_on_suffix_boundary() -> None:
    assert metric_value({"train/reward/avg_raw_reward": 0.5}, "reward/avg_raw_reward") == 0.5
    assert metric_value({"skyrl.reward/avg_raw_reward": 1}, "reward/avg_raw_reward") == 1.0
    assert metric_value({"xreward/avg_raw_reward": 0.5}, "reward/avg_raw_reward") is None
    assert metric_value({"eval_reward/avg_raw_reward": 0.5}, "reward/avg_raw_reward") is None
    # NovaSky's console tracker prints floats as '%.4f' strings (issue 34): numeric text is a number, other text not.
    assert metric_value({"reward/avg_raw_reward": "0.5"}, "reward/avg_raw_reward") == 0.5
    assert metric_value({"reward/avg_raw_reward": "high"}, "reward/avg_raw_reward") is None
    # Exact beats a prefixed key.
    assert metric_value({"a/reward/avg_raw_reward": 1.0, "reward/avg_raw_reward": 2.0}, "reward/avg_raw_reward") == 2.0


def test_stitch_first_seen_wins_overlaps_gaps_and_spans() -> None:
    a1 = [row(1, 0.1), row(2, 0.2), row(3, 0.3)]
    a2: list[MetricRow] = []  # an early link that logged nothing
    a3 = [row(3, 0.99), row(4, 0.4), row(7, 0.7), row(7, 0.7)]  # re-logs 3, then jumps to 7
    evals = [MetricRow(4, "eval", {"eval/score": 1.0})]
    out = stitch([("a1", a1), ("a2", a2), ("a3", a3 + evals)])
    assert list(out.train) == [1, 2, 3, 4, 7]
    assert out.train[3].metrics["reward/avg_raw_reward"] == 0.3
    assert out.train[3].attempt_id == "a1"
    assert [(o.step, o.kept_attempt, o.later_attempt, o.same_values) for o in out.overlaps] == [(3, "a1", "a3", False)]
    assert [(s.attempt_id, s.first_step, s.last_step, s.rows) for s in out.attempts] == [
        ("a1", 1, 3, 3),
        ("a2", None, None, 0),
        ("a3", 3, 7, 4),
    ]
    assert out.coverage.first_step == 1 and out.coverage.last_step == 7
    assert out.coverage.gaps == [(5, 6)]
    assert list(out.eval) == [4]
    assert out.series("reward/avg_raw_reward") == {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4, 7: 0.7}


def test_stitch_reports_missing_start_when_asked() -> None:
    out = stitch([("a", [row(3, 0.1), row(4, 0.2)])], expect_from=1)
    assert out.coverage.gaps == [(1, 2)]


def test_jsonl_is_compact_strict_and_round_trips() -> None:
    nan_row = MetricRow(2, "train", {"x": math.nan, "trainer/global_step": 2})
    out = stitch([("a1", [row(1, 0.5), nan_row]), ("a2", [row(4, 0.6)])])
    text = out.to_jsonl()
    lines = text.splitlines()
    assert len(lines) == 4 and text.endswith("\n")
    assert all(", " not in line and ": " not in line for line in lines)
    assert json.loads(lines[0])["coverage"] == {"first_step": 1, "last_step": 4, "gaps": [[3, 3]]}
    assert json.loads(lines[2])["metrics"]["x"] is None  # strict JSON: NaN written as null
    back = StitchedMetrics.from_jsonl(lines)
    assert list(back.train) == [1, 2, 4]
    assert back.coverage == out.coverage
    assert back.attempts == out.attempts
    assert back.train[4].attempt_id == "a2"


_garbage = st.lists(
    st.one_of(
        st.text(max_size=200),
        st.sampled_from(["{", "{'", "{'a': 1,", "}", "WANDB_MIRROR kind=train step=1 metrics={", " 'x': [", "'"]),
        st.builds(lambda n: "{" * n + "'", st.integers(0, 300)),
        st.builds(lambda s: f"WANDB_MIRROR kind=train step={s} metrics={{}}", st.text(max_size=20)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(_garbage)
def test_parser_never_raises_and_stays_bounded(lines: list[str]) -> None:
    parser = MetricParser("uri")
    for i, line in enumerate(lines, 1):
        got = parser.feed(line, i)
        assert got is None or isinstance(got.step, int)
        assert parser._chars <= MAX_BLOCK_CHARS + 1024
    parser.finish()
    assert parser._parts == []


def test_parser_memory_is_bounded_on_a_long_unclosed_block() -> None:
    def lines() -> Iterator[str]:
        yield "{'a': 0,"
        for i in range(200_000):
            yield f" 'key_{i}': {i},"

    tracemalloc.start()
    try:
        assert list(parse_metric_lines(lines())) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024
