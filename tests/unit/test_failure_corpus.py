"""The failure corpus (tests/corpus/failures.yaml): real failures quoted from public issue threads, upstream tests and
upstream docs, each embedded in a driver log five ways (plain, ANSI, Ray prefix, tqdm `\\r`, CRI records) and run
through the cause finder and the classifier (tests/unit/corpus_support.py). At least 95% of the runs must get the
right cause line and class; the misses left are listed on failure. bench/bench_failure_corpus.py prints recall per
class and every miss."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from corpus_support import DECORATIONS, describe_miss, evaluate, load_corpus

MIN_RECALL = 0.95
MIN_EXCERPTS = 150
MIN_PROJECTS = 10


def test_the_corpus_is_large_varied_and_sourced() -> None:
    excerpts = load_corpus()
    ids = Counter(e.id for e in excerpts)
    assert not [i for i, n in ids.items() if n > 1], "duplicate ids"
    assert len(excerpts) >= MIN_EXCERPTS, len(excerpts)
    assert len({e.project for e in excerpts}) >= MIN_PROJECTS
    for e in excerpts:
        assert e.source.strip() and e.log.strip(), e.id
        if e.cause is not None:
            assert e.cause in e.log, f"{e.id}: its cause is not quoted in its log"
        for line in e.teardown:
            assert line in e.log, f"{e.id}: teardown {line!r} is not in its log"


def test_the_cause_finder_gets_95_percent_of_real_failures_right(tmp_path: Path) -> None:
    report = evaluate(tmp_path)
    assert len(report.outcomes) == len(load_corpus()) * len(DECORATIONS)
    misses = "\n".join(describe_miss(o) for o in report.misses)
    assert report.recall >= MIN_RECALL, f"recall {report.recall:.1%}; misses:\n{misses}"
