"""The failure corpus through the cause finder and the classifier: recall per class, per project, per decoration,
and every miss with why.

tests/corpus/failures.yaml holds real failures quoted from public issue threads, upstream tests and upstream docs;
tests/unit/corpus_support.py embeds each in a driver log five ways (plain, ANSI colour, Ray's `(pid=…, ip=…)` prefix,
a tqdm bar redrawn with `\\r`, kubelet CRI records) and judges the first cause and class the pipeline's readers give.
tests/unit/test_failure_corpus.py holds the same run to ≥ 95%; this prints where it stands.
Run: .venv/bin/python bench/bench_failure_corpus.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import REPO, figure

sys.path.insert(0, str(REPO / "tests" / "unit"))

from corpus_support import describe_miss, evaluate, load_corpus


def _rows(title: str, recall: dict[str, tuple[int, int]]) -> None:
    print(f"\n{title}")
    for name, (right, total) in recall.items():
        print(f"  {name:<28} {right:>4}/{total:<4} {right / total:7.1%}")


def main() -> int:
    excerpts = load_corpus()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        report = evaluate(Path(tmp), excerpts)
        seconds = time.perf_counter() - start
    print(f"{len(excerpts)} excerpts from {len({e.project for e in excerpts})} projects, {len(report.outcomes)} runs")
    _rows("recall per class", report.recall_by("class"))
    _rows("recall per project", report.recall_by("project"))
    by_decoration: Counter[str] = Counter(o.decoration for o in report.outcomes)
    right_by_decoration: Counter[str] = Counter(o.decoration for o in report.outcomes if o.right)
    _rows("recall per decoration", {d: (right_by_decoration[d], n) for d, n in by_decoration.items()})
    print(f"\nmisses ({len(report.misses)}):")
    for miss in report.misses:
        print("  " + describe_miss(miss))
    figure("failure corpus: right cause line and class", f"{report.recall:.1%} of {len(report.outcomes)}", ">= 95%")
    figure("failure corpus: time to judge every run", f"{seconds:.2f} s", "seconds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
