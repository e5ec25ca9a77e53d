"""Readers of the evidence a run keeps outside its driver log (run-layout-v3.md §§4, 7): CRI pod logs, rotated and
gzipped files, failure receipts, sync manifests, the runtime's lines that name the rendezvous, and the fatal lines
that state an OOM kill. Every variant found upstream is a row here."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcleanup.parsing.attempt_logs import is_scanned_log, log_order
from rlcleanup.parsing.debug_artifacts import is_exception_receipt, read_exception_receipt, read_sync_manifest
from rlcleanup.parsing.log_scanner import LogScanner
from rlcleanup.parsing.pod_logs import cri_lines, gzip_lines, is_cri, is_rotated_log
from rlcleanup.steps.layout_model import AttemptFiles, RunLayout
from rlcleanup.steps.layout_rendezvous import locations_in_line, refusal

TS = "2026-12-01T10:10:10.123456789Z"


@pytest.mark.parametrize(
    ("records", "lines"),
    [
        ([f"{TS} stdout F hello"], ["hello"]),
        ([f"{TS} stderr P Value", f"{TS} stderr P Error: ", f"{TS} stderr F boom"], ["ValueError: boom"]),
        # containerd may add tags after a colon; the first decides
        ([f"{TS} stdout P a", f"{TS} stdout F:x b"], ["ab"]),
        # partials of two streams interleave: each stream joins its own
        ([f"{TS} stdout P out-", f"{TS} stderr F err", f"{TS} stdout F 1"], ["err", "out-1"]),
        # a partial still open at the end (the process died mid-line) is kept
        ([f"{TS} stderr F x", f"{TS} stderr P Killed mid"], ["x", "Killed mid"]),
        # an empty message
        ([f"{TS} stdout F "], [""]),
        # a non-CRI line (a truncated write) passes through
        (["not a record", f"{TS} stdout F y"], ["not a record", "y"]),
        # a zone offset instead of Z
        (["2026-12-01T10:10:10.5+00:00 stdout F z"], ["z"]),
    ],
)
def test_cri_lines(records: list[str], lines: list[str]) -> None:
    assert list(cri_lines(records)) == lines


@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=30),
        min_size=1,
        max_size=6,
    )
)
def test_partial_records_join_into_the_written_line(chunks: list[str]) -> None:
    records = [f"{TS} stderr P {c}" for c in chunks[:-1]] + [f"{TS} stderr F {chunks[-1]}"]
    assert list(cri_lines(records)) == ["".join(chunks)]


@pytest.mark.parametrize(
    ("line", "cri"),
    [(f"{TS} stdout F x", True), (f"{TS} stderr P x", True), ("2026-12-01 10:10:10,123 INFO x", False), ("", False)],
)
def test_is_cri(line: str, cri: bool) -> None:
    assert is_cri(line) is cri


@pytest.mark.parametrize(
    ("name", "rotated", "scanned"),
    [
        ("0.log", False, True),
        ("0.log.20261201-101010", True, True),
        ("0.log.20261201-101010.gz", True, True),
        ("3.log.20261130-235959.gz", True, True),
        ("bundle.tar.gz", False, False),
        ("events.json.gz", False, False),
    ],
)
def test_rotated_names(name: str, rotated: bool, scanned: bool) -> None:
    assert is_rotated_log(name) is rotated
    assert is_scanned_log(f"gs://b/a/logs/pods/p/c/{name}") is scanned


def test_a_pods_files_are_scanned_oldest_first() -> None:
    pod = "gs://b/a/logs/pods/p/c"
    names = ["0.log", "0.log.20261201-111111", "0.log.20261201-101010.gz"]
    assert log_order(f"{pod}/{n}" for n in names) == [
        f"{pod}/0.log.20261201-101010.gz",
        f"{pod}/0.log.20261201-111111",
        f"{pod}/0.log",
    ]


def test_rendezvous_logs_come_after_the_attempts_own() -> None:
    own = "gs://b/t/attempts/a1/logs/finelog.log"
    rank = "gs://b/t/rendezvous/a1/ray_session_logs/rank1-h/session_x/logs/worker-1.err"
    term = "gs://b/t/rendezvous/a1/term_artifacts/task_1.txt"
    copied_in_logs = "gs://b/t/attempts/a1/logs/ray_session_logs/worker-1.err"
    assert log_order([term, rank, copied_in_logs, own]) == [own, copied_in_logs, rank, term]


def test_gzip_lines_round_trip_truncation_and_bound() -> None:
    text = "".join(f"line {i}\n" for i in range(5000))
    data = gzip.compress(text.encode())
    assert list(gzip_lines(data)) == [f"line {i}" for i in range(5000)]
    cut = list(gzip_lines(data[: len(data) // 2]))  # rotated while being compressed: what inflated is kept
    assert cut and cut[0] == "line 0" and len(cut) < 5000
    assert sum(len(line) + 1 for line in gzip_lines(data, max_bytes=100)) <= 100 + len("line 0000")
    assert list(gzip_lines(b"not gzip")) == []


RECEIPT = {  # marinskyrl/process_diagnostics.py@24442f9 write_exception_receipt
    "schema_version": 1,
    "role": "policy",
    "hostname": "h",
    "pid": 7,
    "observed_at_ns": 1796025972000000000,
    "kind": "exception",
    "exception_type": "builtins.RuntimeError",
    "message": "boom",
    "traceback": "Traceback (most recent call last):\nRuntimeError: boom\n",
    "metadata": {"k": "v"},
}


@pytest.mark.parametrize(
    ("payload", "short_type"),
    [
        (RECEIPT, "RuntimeError"),
        ({**RECEIPT, "exception_type": "torch.distributed.DistBackendError"}, "torch.distributed.DistBackendError"),
        ({k: v for k, v in RECEIPT.items() if k != "kind"}, "RuntimeError"),
        ({k: v for k, v in RECEIPT.items() if k not in ("metadata", "traceback")}, "RuntimeError"),
        ({**RECEIPT, "kind": "signal", "signal": 6}, None),  # an outcome receipt, not an exception
        ({"schema_version": 1, "kind": "exception"}, None),  # no exception type
    ],
)
def test_exception_receipt_variants(payload: dict[str, object], short_type: str | None) -> None:
    receipt = read_exception_receipt("gs://b/r/outcomes/policy.h.7.1.exception.json", json.dumps(payload).encode())
    assert (receipt.short_type if receipt is not None else None) == short_type


def test_exception_receipt_names_and_junk() -> None:
    assert is_exception_receipt("gs://b/rdv/debug_artifacts/n/outcomes/policy.h.7.1.exception.json")
    assert not is_exception_receipt("gs://b/rdv/debug_artifacts/n/outcomes/policy.h.7.1.json")
    assert not is_exception_receipt("gs://b/rdv/debug_artifacts/n/stacks/x.exception.json")
    assert read_exception_receipt("u", b"{not json") is None
    assert read_exception_receipt("u", b"[1]") is None


def test_sync_manifest_variants() -> None:
    upstream = {  # cloud/iris/task_runtime.py@006eddc sync_debug_artifacts
        "schema_version": 1,
        "node_id": "rank0-h",
        "reason": "periodic",
        "source_root": "/tmp/d",
        "copied": [{"path": "outcomes/a.json", "bytes": 10}],
        "skipped": [{"path": "big", "bytes": 600000000, "reason": "budget"}, {"path": "x", "reason": "OSError: gone"}],
        "copied_bytes": 10,
    }
    manifest = read_sync_manifest(json.dumps(upstream).encode())
    assert manifest is not None and manifest.copied[0].path == "outcomes/a.json"
    assert [(s.bytes, s.reason) for s in manifest.skipped] == [(600000000, "budget"), (None, "OSError: gone")]
    assert read_sync_manifest(b"garbage") is None


def _scan(lines: list[str]) -> list[tuple[str, bool]]:
    scanner = LogScanner("u", "a1")
    for line in lines:
        scanner.feed(line)
    return [(e.error_type, e.causal) for e in scanner.finish().errors]


@pytest.mark.parametrize(
    ("line", "found"),
    [
        (
            "Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on "
            "memory.",
            ("ray.NodeOutOfMemory", True),
        ),
        (
            "[2026-11-30 08:06:40,002 W 311 311] (raylet) Task was killed due to the node running low on memory. "
            "Memory on the node (IP: 10.0.3.14) ...",
            ("ray.NodeOutOfMemory", True),
        ),
        (
            "[ 4211.119920] Memory cgroup out of memory: Killed process 5533 (python) total-vm:9kB, anon-rss:1kB",
            ("CgroupOOMKill", True),
        ),
        ("[ 12.5] Out of memory: Killed process 77 (python) total-vm:9kB", ("OOMKill", True)),
        ("Worker exit type: SYSTEM_ERROR Worker exit detail: lost", ("ray_task_failed", False)),
    ],
)
def test_oom_lines_state_the_cause(line: str, found: tuple[str, bool]) -> None:
    assert _scan([line])[0] == found


@pytest.mark.parametrize(
    ("line", "found"),
    [
        (
            "Rendezvous: gs://b/tmp/ttl=14d/skyrl/users/u/job/rdv",
            [("rendezvous", "gs://b/tmp/ttl=14d/skyrl/users/u/job/rdv")],
        ),
        (
            "[task-runtime] [task-runtime] Ray head subprocess returned; writing rendezvous -> s3://b/iris/rl-rdv/job/ray_head.json",
            [("rendezvous", "s3://b/iris/rl-rdv/job")],
        ),
        (
            "[task-runtime] [term-capture] wrote termination artifact -> gs://b/r/term_artifacts/_job_0_1796025972.txt",
            [("rendezvous", "gs://b/r")],
        ),
        (
            "[task-runtime] [artifact-sync] started (every 300s, first ~60s) -> gs://b/d/ray_session_logs/rank0-h, "
            "gs://b/r/debug_artifacts/rank0-h",
            [("ray_log_root", "gs://b/d/ray_session_logs"), ("rendezvous", "gs://b/r")],
        ),
        (
            "[task-runtime] [ray-log-sync] uploaded 12 file(s) / 0.01 GiB (unchanged=0, failed=0, deferred=0) -> "
            "gs://b/d/ray_session_logs/rank1-h [periodic]",
            [("ray_log_root", "gs://b/d/ray_session_logs")],
        ),
        ("INFO step 3 done", []),
    ],
)
def test_runtime_lines_that_name_evidence(line: str, found: list[tuple[str, str]]) -> None:
    assert locations_in_line(line) == found


def _layout(run_uri: str, temp_root: str) -> RunLayout:
    config = {"config_uri": f"{run_uri}/resolved-skyrl.json", "config_bytes": b"{}", "config": {}, "skyrl": {}}
    roots = {"temp_root": temp_root, "checkpoints_root": f"{temp_root}/checkpoints", "exports_root": f"{run_uri}/x"}
    return RunLayout(run_uri=run_uri, kind="A", attempts=[], **config, **roots)


@pytest.mark.parametrize(
    ("uri", "accepted"),
    [
        ("gs://runs/tmp/ttl=14d/skyrl/users/u/job/rendezvous", True),  # Layout D: under the temp root
        ("gs://runs/users/u/skyrl/job/ray_session_logs", True),  # under the durable root
        ("gs://runs/iris/rl-rdv/job", True),  # legacy, this run's job
        ("gs://runs/iris/rl-rdv/someone-elses-job", False),
        ("gs://runs/other/place/job", False),  # the run's bucket, neither its roots nor a legacy rendezvous
        ("gs://attacker/iris/rl-rdv/job", False),
        ("s3://runs/iris/rl-rdv/job", False),  # another scheme's bucket of the same name
        ("gs://runs/tmp/ttl=14d/skyrl/users/u/job/../../other/job", False),
        ("gs://runs/users/u/skyrl/job-evil", False),  # a sibling that merely shares the prefix
    ],
)
def test_only_this_runs_locations_are_accepted(uri: str, accepted: bool) -> None:
    layout = _layout("gs://runs/users/u/skyrl/job", "gs://runs/tmp/ttl=14d/skyrl/users/u/job")
    assert (refusal(uri, layout) is None) is accepted


def test_a_legacy_rendezvous_must_name_the_runs_job() -> None:
    marin = _layout("gs://runs/durable/math-rl/2026.11.30", "gs://runs/tmp/ttl=14d/skyrl/math-rl/2026.11.30")
    assert refusal("gs://runs/iris/rl-rdv/2026.11.30", marin) is not None  # a version names no job
    marin.attempts = [AttemptFiles("a1", record={"request": {"run_id": "math-rl-2026.11.30"}})]
    assert refusal("gs://runs/iris/rl-rdv/math-rl-2026.11.30", marin) is None
    marin.attempts = [AttemptFiles("a1", record={"response": {"iris_job_id": "/marin/math-rl-x-a1"}})]
    assert refusal("gs://runs/iris/rl-rdv/math-rl-x", marin) is None
    assert refusal("gs://runs/iris/rl-rdv/math-rl-y", marin) is not None


def test_local_runs_accept_nothing_outside_their_roots() -> None:
    layout = _layout("/data/runs/job", "/data/tmp/job")
    assert refusal("/data/tmp/job/rendezvous/a1", layout) is None
    assert refusal("/data/other/rendezvous", layout) is not None
    assert refusal("/etc", layout) is not None
    assert refusal("/data/runs/job/../../../etc", layout) is not None
