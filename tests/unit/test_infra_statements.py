"""Infrastructure statements are causes (issue 44 items 1-3): a line in which Ray, the kubelet or the kernel says why
a process died outranks the Python exceptions around it, and gives the cause its class; SkyRL's crash tracker opens
its traceback even when its `[-10000:]` cut lost the traceback's own header.

Wordings as upstream prints them: ray-project/ray doc/source/ray-core/scheduling/ray-oom-prevention.rst (the raylet's
kill summary), src/ray/gcs/gcs_actor_manager.cc GenNodeDiedCause, python/ray/_private/worker.py (the node marked
dead); kubernetes pkg/kubelet/nodeshutdown; NovaSky-AI/SkyRL skyrl/train/utils/tracking.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcleanup.models.failures import FailureClass
from rlcleanup.models.vocab import TerminalState
from rlcleanup.parsing.attempt_logs import assemble_attempt
from rlcleanup.parsing.infra_statements import INFRA_STATEMENTS, statement_for
from rlcleanup.parsing.log_engine import BlockScan, hit_finder
from rlcleanup.parsing.log_scanner import LogScanner, scan_lines
from rlcleanup.steps.failure_rules import classify_failure
from rlcleanup.steps.first_cause import find_first_error

RAY_OOM_DRIVER = """\
2026-03-02 10:00:00,000 INFO worker.py:1841 -- Connected to Ray cluster.
Training Step Progress:  41%|████      | 41/100
Traceback (most recent call last):
  File "/app/skyrl_train/trainer.py", line 212, in train
    ray.get(refs)
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: FSDPPolicyWorker
\tactor_id: 8ad1e4f3c2b7a6d5e4f3c2b701000000
\tpid: 6012
\tip: 10.0.3.14
The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: \
Task was killed due to the node running low on memory.
Memory on the node (IP: 10.0.3.14, ID: 5f1c) where the task was running was 1789.5GB / 1820.0GB (0.983242), which \
exceeds the memory usage threshold of 0.95.
(raylet, ip=10.0.3.14) [2026-03-02 10:00:05,445 E 395 395] (raylet) node_manager.cc:3049: 1 Workers (tasks / actors) \
killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: e5d9, IP: 10.0.3.14) over \
the last time period.
"""

NODE_DEAD_DRIVER = """\
2026-03-02 10:00:00,000 INFO trainer.py:88 -- step 12
2026-03-02 10:05:30,774 WARNING worker.py:1866 -- The node with node id: 9426f44574cc and address: 10.130.0.113 and \
node name: 10.130.0.113 has been marked dead because the detector has missed too many heartbeats from it. This can \
happen when a       (1) raylet crashes unexpectedly (OOM, preempted node, etc.)
        (2) raylet has lagging heartbeats due to slow network or busy workload.
Traceback (most recent call last):
  File "/app/main.py", line 40, in main
    trainer.train()
RuntimeError: generation failed: 1 of 8 engines returned no output
"""

ACTOR_NODE_DIED = """\
Traceback (most recent call last):
  File "/app/main.py", line 40, in main
    ray.get(actor.ping.remote())
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: InferenceEngineActor
The actor died because its node has died. Node Id: 214f5e4656d1ef48
\tthe actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats
"""

KUBELET_SHUTDOWN = """\
2026-03-02T10:00:00.000000000Z stdout F step 12 loss 0.41
Pod was terminated in response to imminent node shutdown.
Traceback (most recent call last):
  File "/app/main.py", line 40, in main
    dist.barrier()
torch.distributed.DistStoreError: Socket Timeout
"""

# SkyRL's tracker: `traceback.format_exc()[-10000:]`, so a long traceback reaches the log without its header.
SKYRL_EXPORT_FAILED = """\
2026-03-02 11:59:58.001 | INFO | skyrl.train.trainer:train:512 - Reached max_training_steps=40, stopping early.
2026-03-02 12:00:00.123 | ERROR | skyrl.train.utils.tracking:log_exception:88 - Training failed at step 40 with \
SafetensorError:
    save_file(shard, os.path.join(export_dir, name), metadata={"format": "pt"})
  File "/usr/local/lib/python3.12/site-packages/safetensors/torch.py", line 286, in save_file
    serialize_file(_flatten(tensors), filename, metadata=metadata)
safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 122, kind: FilesystemQuotaExceeded, \
message: "Disk quota exceeded" })
2026-03-02 12:00:00.500 | INFO | skyrl.train.entrypoints.main_base:main:77 - shutting down
"""


def _first(log: str):  # type: ignore[no-untyped-def]
    scan = scan_lines(log.splitlines(), "gs://b/run/logs/driver.log", "a0")
    first = find_first_error([assemble_attempt("a0", [scan])])
    assert first is not None and first.causal, scan.errors
    return first


def _class(first) -> tuple[FailureClass | None, str | None]:  # type: ignore[no-untyped-def]
    failure_class, evidence = classify_failure(TerminalState.failed, first.cause())
    return failure_class, evidence.rule if evidence else None


@pytest.mark.parametrize(
    ("log", "line", "error_type", "rule"),
    [
        # item 1: the ActorDiedError is teardown; its message's exit type and the raylet's summary state the cause
        (RAY_OOM_DRIVER, 11, "ray.NodeOutOfMemory", "ray_memory_monitor"),
        # item 1: a node declared dead outranks the RuntimeError the driver raised after it
        (NODE_DEAD_DRIVER, 2, "ray.NodeDied", "node_lost"),
        (ACTOR_NODE_DIED, 6, "ray.NodeDied", "node_lost"),
        # item 2: the kubelet's graceful node shutdown is an infrastructure ending
        (KUBELET_SHUTDOWN, 2, "kubelet.NodeShutdown", "node_shutdown"),
    ],
)
def test_an_infrastructure_statement_is_the_first_cause_and_decides_the_class(
    log: str, line: int, error_type: str, rule: str
) -> None:
    first = _first(log)
    assert (first.candidate.line, first.candidate.error_type) == (line, error_type)
    assert first.candidate.statement is not None
    assert _class(first) == (FailureClass.infrastructure, rule)


def test_a_statement_outranks_an_earlier_python_exception_of_its_attempt() -> None:
    """The driver's own wrapper error printed before the raylet's summary is what the kill caused."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/app/main.py", line 40, in main\n'
        "    ray.get(refs)\n"
        "RuntimeError: policy step failed on 1 of 8 workers\n"
        "(raylet) node_manager.cc:3040: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers "
        "crashed due to other reasons at node (ID: 2c82, IP: 172.31.183.172) over the last time period.\n"
    )
    first = _first(log)
    assert (first.candidate.line, first.candidate.error_type) == (5, "ray.NodeOutOfMemory")


def test_skyrl_tracker_line_opens_a_traceback_whose_header_was_cut() -> None:
    """item 3: the final export's SafetensorError is the first cause, type, message and traceback."""
    first = _first(SKYRL_EXPORT_FAILED)
    cause = first.cause()
    assert cause.line == 2 and cause.error_type == "safetensors_rust.SafetensorError"
    assert "Disk quota exceeded" in cause.message
    assert cause.traceback.startswith("Training failed at step 40 with SafetensorError:")
    assert "serialize_file" in cause.traceback
    assert _class(first) == (FailureClass.infrastructure, "disk_full")


def test_skyrl_tracker_line_alone_still_names_the_type() -> None:
    log = "2026-03-02 12:00:00 | ERROR | x - Training failed at step 7 with ValueError:\n"
    first = _first(log)
    assert first.candidate.error_type == "ValueError" and not first.candidate.complete


@pytest.mark.parametrize(
    "log", [RAY_OOM_DRIVER, NODE_DEAD_DRIVER, ACTOR_NODE_DIED, KUBELET_SHUTDOWN, SKYRL_EXPORT_FAILED]
)
def test_the_block_engine_feeds_every_statement_line(log: str) -> None:
    """New wordings need their hints in the engine's gates: it must find exactly what the line scanner finds."""
    finder = hit_finder()
    assert finder is not None
    scanner = LogScanner("u", "a0")
    data = log.encode()
    BlockScan(scanner, finder).run(lambda start, length: data[start : start + length])
    engine = scanner.finish()
    reference = scan_lines(log.splitlines(), "u", "a0")
    assert [(e.line, e.error_type, e.statement) for e in engine.errors] == [
        (e.line, e.error_type, e.statement) for e in reference.errors
    ]


def test_every_statement_names_its_upstream_and_matches_its_own_hint() -> None:
    for statement in INFRA_STATEMENTS:
        assert statement.source and statement.hint == statement.hint.lower()
        assert "k" not in statement.hint and not statement.hint.endswith("i")


def test_prose_that_only_lists_possible_causes_is_not_a_statement() -> None:
    assert (
        statement_for("There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer")
        is None
    )
    assert statement_for("INFO scheduler: Sequence group 12 is preempted by PreemptionMode.RECOMPUTE") is None


# End to end on the embedded pipeline: the all-teardown sample (no cause: no_causal_error_found, class unknown) with
# the infrastructure's own statement appended to its driver log, as Ray and the kubelet print it there.
RAY_OOM_TAIL = (
    "\x1b[36m(skyrl_entrypoint pid=4100)\x1b[0m The actor is dead because its worker process has died. Worker exit "
    "type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on memory.\n"
    "(raylet, ip=10.0.3.14) [2026-11-30 08:21:05,445 E 395 395] (raylet) node_manager.cc:3049: 1 Workers (tasks / "
    "actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: e5d9, IP: "
    "10.0.3.14) over the last time period.\n"
)
NODE_SHUTDOWN_TAIL = "Pod was terminated in response to imminent node shutdown.\n"


@pytest.fixture
def _no_report(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlcleanup.runtime import evidence

    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)


@pytest.mark.usefixtures("_no_report")
@pytest.mark.parametrize(
    ("tail", "error_type", "rule"),
    [
        (RAY_OOM_TAIL, "ray.NodeOutOfMemory", "ray_memory_monitor"),
        (NODE_SHUTDOWN_TAIL, "kubelet.NodeShutdown", "node_shutdown"),
    ],
)
def test_the_record_names_the_statement_as_first_cause_and_class(
    tmp_path: Path, tail: str, error_type: str, rule: str
) -> None:
    from sample_runs import run_embedded

    from rlcleanup.samples.generator import write_sample_run

    run = write_sample_run(tmp_path / "runs", "all-teardown")
    log = next(Path(tmp_path / "runs").rglob("finelog.log"))
    log.write_text(log.read_text() + tail)
    _, record = run_embedded(tmp_path, str(run))
    cause = record.first_failure_cause
    assert cause is not None, record.terminal_reasoning
    assert cause.error_type == error_type and record.first_failure_reason is None
    assert record.failure_class == FailureClass.infrastructure
    assert record.failure_evidence is not None and record.failure_evidence.rule == rule
