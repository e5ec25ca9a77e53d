"""The failure corpus (tests/corpus/failures.yaml) read back and run through the cause finder and the classifier.

Each excerpt is a real failure quoted from a public issue thread, an upstream test or upstream documentation (its
`source` names the repository and the issue or file). It is embedded in a driver log the way a run writes one:
plain, behind ANSI colour codes, behind Ray's `(Worker pid=…, ip=…)` prefix, after a tqdm bar that redraws with a
bare `\\r` (the excerpt's first line lands on the bar's physical line), and as a kubelet CRI pod log whose long
lines are split into `P` records. Each copy is scanned the way the pipeline scans a log (parsing/attempt_logs
`scan_log`: the block engine, or CRI records joined), then steps/first_cause picks the first cause and
steps/failure_rules the class. An excerpt is right when the chosen cause holds the line that states the cause (its
`cause`), none of its `teardown` lines, and the class is its `class`.

Used by tests/unit/test_failure_corpus.py (the ≥ 95% bar) and bench/bench_failure_corpus.py (recall per class).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.models.failures import FailureClass
from rlcleanup.models.vocab import TerminalState
from rlcleanup.parsing.attempt_logs import assemble_attempt, scan_log
from rlcleanup.steps.failure_rules import classify_failure
from rlcleanup.steps.first_cause import find_first_error

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "failures.yaml"
DECORATIONS = ("plain", "ansi", "ray_prefix", "tqdm", "cri")
_PREAMBLE = [
    "2026-03-02 10:00:00,000 INFO worker.py:1841 -- Connected to Ray cluster at 10.0.3.14:6379.",
    "2026-03-02 10:00:01,000 INFO trainer.py:212 -- Started training: 4 nodes, 32 GPUs.",
]
_TQDM_FRAMES = "".join(f"\rTraining Step Progress:  {p}%|{'█' * (p // 10):<10}| {p}/100" for p in (40, 41, 42))
_CRI_STAMP = "2026-03-02T10:00:02.000000000Z"
_CRI_CHUNK = 120  # the kubelet splits a long line into partial (`P`) records


@dataclass(frozen=True)
class Excerpt:
    id: str
    project: str
    source: str
    log: str
    cause: str | None  # None: nothing causal was printed; the earliest teardown `symptom` then gives the class
    failure_class: FailureClass
    teardown: tuple[str, ...] = ()
    symptom: str | None = None


@dataclass
class Outcome:
    excerpt: Excerpt
    decoration: str
    right: bool
    chosen: str  # what the finder chose, quoted
    chosen_class: FailureClass | None
    why: str = ""


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def misses(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.right]

    @property
    def recall(self) -> float:
        return sum(o.right for o in self.outcomes) / max(len(self.outcomes), 1)

    def recall_by(self, key: str) -> dict[str, tuple[int, int]]:
        """(right, total) per class or per project."""
        right: Counter[str] = Counter()
        total: Counter[str] = Counter()
        for o in self.outcomes:
            name = o.excerpt.failure_class.value if key == "class" else o.excerpt.project
            total[name] += 1
            right[name] += o.right
        return {name: (right[name], total[name]) for name in sorted(total)}


def load_corpus(path: Path = CORPUS) -> list[Excerpt]:
    entries: list[dict[str, Any]] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [
        Excerpt(
            id=e["id"],
            project=e["project"],
            source=e["source"],
            log=e["log"],
            cause=e["cause"],
            failure_class=FailureClass(e["class"]),
            teardown=tuple(e.get("teardown") or ()),
            symptom=e.get("symptom"),
        )
        for e in entries
    ]


def decorate(log: str, how: str) -> str:
    """The excerpt inside a driver log, decorated as `how` says."""
    lines = log.rstrip("\n").split("\n")
    if how == "ansi":
        lines = [f"\x1b[1m\x1b[31m{line}\x1b[0m" if line.strip() else line for line in lines]
    elif how == "ray_prefix":
        lines = [f"\x1b[36m(PolicyWorker pid=4242, ip=10.0.3.14)\x1b[0m {line}" for line in lines]
    elif how == "tqdm":
        lines = [_TQDM_FRAMES + "\r" + lines[0], *lines[1:]]
    body = "\n".join([*_PREAMBLE, *lines]) + "\n"
    if how != "cri":
        return body
    records = []
    for line in body.rstrip("\n").split("\n"):
        chunks = [line[i : i + _CRI_CHUNK] for i in range(0, len(line), _CRI_CHUNK)] or [""]
        for index, chunk in enumerate(chunks):
            tag = "F" if index == len(chunks) - 1 else "P"
            records.append(f"{_CRI_STAMP} stderr {tag} {chunk}")
    return "\n".join(records) + "\n"


def _quoted(etype: str, message: str, traceback: str) -> str:
    """The chosen error and the lines that state it: a fatal line, or a traceback's head and final exception block."""
    lines = traceback.splitlines()
    return "\n".join([f"{etype}: {message}", *lines[:1], *lines[-4:]])


def judge(excerpt: Excerpt, how: str, root: Path) -> Outcome:
    name = "0.log" if how == "cri" else "driver.log"
    folder = root / excerpt.id / how / ("pods" if how == "cri" else "logs")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(decorate(excerpt.log, how), encoding="utf-8")
    storage = LocalStorage(checksums=False)
    scan = scan_log(storage, str(folder / name), "a0")
    first = find_first_error([assemble_attempt("a0", [scan])])
    if excerpt.cause is None:  # only teardown: no cause, the symptom is quoted and classified
        symptom = first.cause() if first is not None and not first.causal else None
        failure_class, _ = classify_failure(TerminalState.failed, None, symptom=symptom)
        chosen = _quoted(symptom.error_type, symptom.message, symptom.traceback) if symptom else "nothing"
        why = []
        if first is not None and first.causal:
            why.append("a teardown line was taken as the cause")
        elif symptom is None or (excerpt.symptom or "") not in chosen:
            why.append("another symptom was quoted")
        if failure_class is not excerpt.failure_class:
            why.append(f"class {failure_class.value if failure_class else None} != {excerpt.failure_class.value}")
        return Outcome(excerpt, how, not why, chosen, failure_class, "; ".join(why))
    if first is None or not first.causal:
        chosen = _quoted(first.candidate.error_type, first.candidate.message, "") if first else "nothing"
        return Outcome(excerpt, how, False, chosen, None, "no causal error found")
    c = first.candidate
    chosen = _quoted(c.error_type, c.message, c.traceback)
    failure_class, _ = classify_failure(TerminalState.failed, first.cause())
    why = []
    if excerpt.cause not in chosen:
        why.append("another line was chosen as the cause")
    if any(t in f"{c.error_type}: {c.message}" for t in excerpt.teardown):
        why.append("a teardown line was chosen")
    if failure_class is not excerpt.failure_class:
        why.append(f"class {failure_class.value if failure_class else None} != {excerpt.failure_class.value}")
    return Outcome(excerpt, how, not why, chosen, failure_class, "; ".join(why))


def evaluate(root: Path, excerpts: list[Excerpt] | None = None) -> Report:
    report = Report()
    for excerpt in excerpts if excerpts is not None else load_corpus():
        for how in DECORATIONS:
            report.outcomes.append(judge(excerpt, how, root))
    return report


def describe_miss(o: Outcome) -> str:
    chosen = o.chosen.replace("\n", " | ")[:220]
    return f"{o.excerpt.id} [{o.decoration}] ({o.excerpt.source}): {o.why}; chose: {chosen}"
