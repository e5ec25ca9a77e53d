from __future__ import annotations

from pathlib import Path

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.parsing.attempt_logs import log_order, scan_attempt
from rlcleanup.parsing.log_grammar import EventKind
from rlcleanup.parsing.log_scanner import MAX_ERRORS_PER_FILE, TRACEBACK_MAX_LINES, scan_lines
from rlcleanup.ports.storage import ObjectInfo
from rlcleanup.steps.layout import AttemptFiles

P = "(skyrl_entrypoint pid=77) "

TRAINER_LOG = [
    f"{P}No checkpoint found, starting training from scratch",  # 1
    f'{P}WANDB_MIRROR kind=train step=1 metrics={{"trainer/global_step": 1}}',  # 2
    f"{P}Successfully saved checkpoint for global_step_1 to: /t/checkpoints/global_step_1",  # 3
    f"{P}Successfully loaded complete checkpoint state from global_step_1",  # 4
    f"{P}Reached max training steps (2)",  # 5
    f"{P}Saved final checkpoint.",  # 6
    f"{P}Training done!",  # 7
    f"{P}Training already complete on resume — exiting cleanly.",  # 8
    f"{P}Resumed at global_step 3 >= max training steps (2); run is already COMPLETE",  # 9
    f"{P}Training stopped early by callback",  # 10
]


def test_trainer_events_with_steps_and_lines() -> None:
    scan = scan_lines(TRAINER_LOG, "log://x", "a1")
    got = [(e.kind, e.step, e.line) for e in scan.events]
    assert got == [
        (EventKind.no_checkpoint, None, 1),
        (EventKind.saved_checkpoint, 1, 3),
        (EventKind.loaded_checkpoint, 1, 4),
        (EventKind.reached_max_steps, 2, 5),
        (EventKind.saved_final_checkpoint, None, 6),
        (EventKind.training_done, None, 7),
        (EventKind.already_complete_on_resume, None, 8),
        (EventKind.resumed_already_complete, 3, 9),
        (EventKind.stopped_early, None, 10),
    ]
    assert scan.events[7].max_steps == 2
    assert [r.step for r in scan.metric_rows] == [1]
    assert scan.errors == []


CHAINED = [
    "INFO starting",  # 1
    f"{P}Traceback (most recent call last):",  # 2
    f'{P}  File "/app/trainer.py", line 10, in train',  # 3
    f"{P}    ray.get(ref)",  # 4
    f"{P}ray.exceptions.RayTaskError(ValueError): ray::Policy.step() (pid=9, ip=10.0.0.2)",  # 5
    f'{P}  File "/app/policy.py", line 3, in step',  # 6
    f'{P}    raise ValueError("reward shape mismatch")',  # 7
    f"{P}ValueError: reward shape mismatch",  # 8
    "",  # 9
    "During handling of the above exception, another exception occurred:",  # 10
    "",  # 11
    "Traceback (most recent call last):",  # 12
    '  File "/app/main.py", line 1, in <module>',  # 13
    "RuntimeError: training failed",  # 14
    "INFO shutting down",  # 15
]


def test_traceback_line_root_type_and_whole_text_kept() -> None:
    scan = scan_lines(CHAINED, "log://w", "a1")
    assert len(scan.errors) == 1
    err = scan.errors[0]
    assert (err.line, err.error_type, err.message) == (2, "ValueError", "reward shape mismatch")
    assert err.causal and err.kind == "traceback" and err.complete and not err.truncated
    assert err.traceback.splitlines()[0] == "Traceback (most recent call last):"
    assert err.traceback.splitlines()[-1] == "RuntimeError: training failed"
    assert "INFO shutting down" not in err.traceback


def test_interleaved_foreign_line_inside_frames_is_skipped() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "INFO 03-01 10:00:00 other process says hi",
        "    g()",
        "KeyError: 'missing'",
    ]
    err = scan_lines(lines, "u").errors[0]
    assert (err.error_type, err.message) == ("KeyError", "'missing'")
    assert "other process" not in err.traceback


def test_long_traceback_is_capped_but_keeps_the_final_line() -> None:
    frames = [f'  File "f{i}.py", line {i}, in f' for i in range(5000)]
    lines = ["x", "Traceback (most recent call last):", *frames, "RecursionError: maximum recursion depth exceeded"]
    err = scan_lines(lines, "u").errors[0]
    assert err.line == 2
    assert err.error_type == "RecursionError"
    assert err.truncated
    kept = err.traceback.splitlines()
    assert len(kept) <= TRACEBACK_MAX_LINES + 41
    assert kept[-1] == "RecursionError: maximum recursion depth exceeded"
    assert any("lines omitted" in line for line in kept)


def test_incomplete_traceback_at_end_of_file() -> None:
    err = scan_lines(["Traceback (most recent call last):", '  File "a.py", line 1'], "u").errors[0]
    assert err.error_type == "<incomplete traceback>" and not err.complete and err.causal


@pytest.mark.parametrize(
    ("line", "etype"),
    [
        ("RuntimeError: CUDA error: an illegal memory access was encountered", None),  # not standalone: bare line
        ("CUDA error: an illegal memory access was encountered", "CUDAError"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "torch.OutOfMemoryError"),
        ("Segmentation fault (core dumped)", "SegmentationFault"),
        ("SEGMENTATION FAULT in rank 3", "SegmentationFault"),
        (
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
            "ray.exceptions.OutOfMemoryError",
        ),
        ("Fatal Python error: Segmentation fault", "Fatal Python error"),
        ("*** SIGSEGV received at time=1700000000 ***", "SegmentationFault"),
        ("terminate called after throwing an instance of 'c10::Error'", "C++ exception"),
    ],
)
def test_fatal_lines_outside_tracebacks_are_causal(line: str, etype: str | None) -> None:
    errors = scan_lines(["ok", line], "u").errors
    if etype is None:
        assert errors == [] or errors[0].error_type == "CUDAError"
        return
    # Ray's memory monitor states the cause itself: an infrastructure statement (parsing/infra_statements.py).
    kind = "statement" if "running low on memory" in line else "fatal_line"
    assert [(e.line, e.error_type, e.causal, e.kind) for e in errors] == [(2, etype, True, kind)]


def _tb(exc_line: str) -> list[str]:
    return ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "    f()", exc_line]


@pytest.mark.parametrize(
    ("exc_line", "noise"),
    [
        (
            "torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9) ran for 600000 milliseconds",
            "nccl_watchdog",
        ),
        ("torch.distributed.DistBackendError: NCCL communicator was aborted on rank 2.", "nccl_watchdog"),
        ("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.", "actor_died"),
        ("ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task", "actor_died"),
        ("KeyboardInterrupt", "keyboard_interrupt"),
        ("torch.multiprocessing.ProcessExitedException: process 0 terminated with signal SIGTERM", "signal"),
        ("ray.exceptions.RaySystemError: System error: Ray has been shut down", "ray_shutdown"),
        ("asyncio.exceptions.CancelledError", "cancelled"),
        ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.", "engine_dead"),
    ],
)
def test_teardown_noise_table(exc_line: str, noise: str) -> None:
    err = scan_lines(_tb(exc_line), "u").errors[0]
    assert (err.causal, err.noise) == (False, noise)
    assert err.noise_reason


def test_connection_reset_is_noise_only_after_an_error() -> None:
    reset = "ConnectionResetError: [Errno 104] Connection reset by peer"
    alone = scan_lines(_tb(reset), "u").errors
    assert [(e.error_type, e.causal) for e in alone] == [("ConnectionResetError", True)]
    after = scan_lines([*_tb("ValueError: boom"), "", *_tb(reset)], "u").errors
    assert [(e.error_type, e.causal, e.line) for e in after] == [
        ("ValueError", True, 1),
        ("ConnectionResetError", False, 6),
    ]


def test_teardown_lines_outside_tracebacks_are_noise_candidates() -> None:
    lines = [
        "Worker rank 3 received signal 15",
        "[rank0]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
        "INFO: worker terminated gracefully",
    ]
    errors = scan_lines(lines, "u").errors
    assert [(e.line, e.noise, e.causal) for e in errors] == [(1, "signal", False), (2, "nccl_watchdog", False)]


def test_error_list_is_capped_and_counted() -> None:
    lines = [line for _ in range(MAX_ERRORS_PER_FILE + 10) for line in [*_tb("ValueError: x"), ""]]
    scan = scan_lines(lines, "u")
    assert len(scan.errors) == MAX_ERRORS_PER_FILE
    assert scan.errors_dropped == 10


def test_timestamps_are_recorded_and_inherited() -> None:
    lines = ["2025-03-01 10:00:05,123 INFO step", *_tb("ValueError: late")]
    err = scan_lines(lines, "u").errors[0]
    assert err.timestamp is not None and err.timestamp.isoformat() == "2025-03-01T10:00:05.123000+00:00"


def test_log_order_finelog_first_then_workers_and_skips_binaries() -> None:
    uris = [
        "r/logs/ray_session_logs/worker-b.err",
        "r/logs/ray_session_logs/python-core-driver.log",
        "r/logs/ray_session_logs/worker-a.out",
        "r/logs/finelog.stderr",
        "r/logs/finelog.log",
        "r/logs/trace.json",
    ]
    assert log_order(uris) == [
        "r/logs/finelog.log",
        "r/logs/finelog.stderr",
        "r/logs/ray_session_logs/worker-a.out",
        "r/logs/ray_session_logs/worker-b.err",
    ]


def test_scan_attempt_reads_all_logs_and_names_unreadable_ones(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "ray_session_logs").mkdir(parents=True)
    (logs / "finelog.log").write_text('WANDB_MIRROR kind=train step=1 metrics={"trainer/global_step": 1}\n')
    (logs / "ray_session_logs" / "worker-1.err").write_text("\n".join(_tb("ValueError: in worker")) + "\n")
    missing = str(logs / "ray_session_logs" / "worker-2.err")
    attempt = AttemptFiles(
        attempt_id="abc",
        log_objects=[
            ObjectInfo(uri=uri, size=0)
            for uri in (str(logs / "ray_session_logs" / "worker-1.err"), missing, str(logs / "finelog.log"))
        ],
    )
    scan = scan_attempt(LocalStorage(checksums=False), attempt)
    assert scan.log_uris[0].endswith("finelog.log")
    assert [r.step for r in scan.metric_rows] == [1]
    assert [(e.error_type, e.line, e.attempt_id) for e in scan.errors] == [("ValueError", 1, "abc")]
    assert len(scan.problems) == 1 and missing in scan.problems[0]
