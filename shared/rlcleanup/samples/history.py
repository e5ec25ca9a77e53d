"""A sample history of runs in a record store, for learning across runs (steps/history.py, docs/failures.md).

Records as wrap-up writes them (a first cause as the scanner quotes it, its class and signature from the same
functions the pipeline uses, the experiment, the kept configuration), over three weeks of November 2026:

- `math-rl-qwen` v1 dies of CUDA OOM on rank 3; v2 halves `trainer.micro_train_batch_size_per_gpu` (8 → 4) and
  completes; v3 completes later with more changes (not the *first* completed run, so not the fix);
- `grpo-llama` v1 dies of the same CUDA OOM on another day, rank and host; nothing of its experiment completed;
- `grpo-llama` v2 is a near miss: CUDA OOM too, but in the generator's frame, not the trainer's (another signature);
- `math-rl-nccl` v1 dies of an NCCL failure (another class, another signature);
- the current run, `math-rl-qwen` v4, dies of the CUDA OOM again on rank 5; `math-rl-qwen` v5 dies of it after.

Also `filler_record`: a record with a signature of its own, to grow a store to any size (bench/bench_similar.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rlcleanup.authority.config_screen import screen_config
from rlcleanup.models.record import CompletionRecord, FailureCause
from rlcleanup.models.vocab import RecordStatus, TerminalState
from rlcleanup.ports.records import RunRecords
from rlcleanup.samples.configs import standard_config
from rlcleanup.steps.failure_rules import classify_failure
from rlcleanup.steps.history import keep_config
from rlcleanup.steps.signature import signature

BUCKET = "gs://marin-us-central2/experiments"
_T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)

_OOM = (
    "CUDA out of memory. Tried to allocate {gib} GiB. GPU {gpu} has a total capacity of 79.10 GiB of which {free} "
    "GiB is free. Process {pid} has 77.31 GiB memory in use."
)
Frames = tuple[tuple[str, str], ...]
_TRAINER_FRAMES: Frames = (
    ("skyrl_train/trainer.py", "train"),
    ("skyrl_train/workers/worker.py", "training_step"),
    ("skyrl_train/utils/torch_utils.py", "logprobs_from_logits"),
)
_GENERATOR_FRAMES: Frames = (
    ("skyrl_train/trainer.py", "train"),
    ("skyrl_train/generators/skyrl_gym_generator.py", "generate"),
)


def _traceback(root: str, frames: Frames, line: str) -> str:
    body = [f'  File "{root}/{path}", line {100 + 7 * i}, in {func}\n    pass' for i, (path, func) in enumerate(frames)]
    return "\n".join(["Traceback (most recent call last):", *body, line])


def _cause(uri: str, error_type: str, message: str, frames: Frames) -> FailureCause:
    return FailureCause(
        attempt_id="a1",
        source_uri=uri,
        line=42,
        error_type=error_type,
        message=message,
        traceback=_traceback("/app/skyrl-train", frames, f"{error_type}: {message}"),
        evidence_source="rank_log",
    )


def _rank_log(run_uri: str, rank: int, host: str) -> str:
    return f"{run_uri}/rendezvous/a1/ray_session_logs/rank{rank}-{host}/session_1/logs/worker-{rank:04x}.err"


def oom_cause(run_uri: str, rank: int, host: str, gib: str, frames: Frames) -> FailureCause:
    message = _OOM.format(gib=gib, gpu=rank % 8, free=f"0.{rank + 1}2", pid=4000 + 17 * rank)
    return _cause(_rank_log(run_uri, rank, host), "torch.OutOfMemoryError", message, frames)


def nccl_cause(run_uri: str) -> FailureCause:
    message = "NCCL error in: ProcessGroupNCCL.cpp:2056, unhandled system error, NCCL version 2.21.5"
    frames = (("skyrl_train/trainer.py", "train"), ("skyrl_train/distributed/utils.py", "all_reduce_mean"))
    return _cause(_rank_log(run_uri, 2, "gke-h100-c"), "torch.distributed.DistBackendError", message, frames)


def record_of(
    experiment: str,
    version: str,
    ended_at: datetime,
    cause: FailureCause | None = None,
) -> CompletionRecord:
    """A finished record as wrap-up leaves it: completed without a cause, else failed with class and signature."""
    run_uri = f"{BUCKET}/{experiment}/{version}"
    state = TerminalState.failed if cause else TerminalState.completed
    failure_class, evidence = classify_failure(state, cause)
    sig, basis = signature(cause) if cause else (None, None)
    return CompletionRecord(
        run_id=f"{experiment}-{version}",
        run_uri=run_uri,
        status=RecordStatus.complete if cause is None else RecordStatus.awaiting_authority,
        terminal_state=state,
        first_failure_cause=cause,
        failure_class=failure_class,
        failure_evidence=evidence,
        signature=sig,
        signature_basis=basis,
        experiment=experiment,
        ended_at=ended_at,
    )


def config_of(experiment: str, version: str, **trainer: Any) -> dict[str, Any]:
    """The sample SkyRL configuration of the run, with `trainer` keys set as its launch overrode them."""
    run_uri = f"{BUCKET}/{experiment}/{version}"
    config = copy.deepcopy(
        standard_config(
            budget=20,
            ckpt_path=f"{run_uri}/ckpts",
            export_path=f"{run_uri}/exports",
            interval=5,
            hf_interval=5,
            run_name=experiment,
            temp_root=f"{run_uri}/tmp",
        )
    )
    config["trainer"].update(trainer)
    return config


@dataclass(frozen=True)
class SampleHistory:
    current: str  # the run whose history is asked
    oom_earlier: tuple[str, ...]  # the earlier runs with its signature, newest first
    fixed_by: str  # the first completed run after math-rl-qwen v1
    near_miss: str
    other_failure: str
    later_same: str  # failed the same way after the current run: not "earlier"


def write_history(records: RunRecords) -> SampleHistory:
    def put(record: CompletionRecord, **trainer: Any) -> str:
        records.create_if_absent(record)
        experiment, version = record.experiment or "", record.run_uri.rsplit("/", 1)[-1]
        keep_config(records, record, config_of(experiment, version, **trainer), screen_config)
        return record.run_id

    day = timedelta(days=1)
    qwen, llama = "math-rl-qwen", "grpo-llama"

    def oom(experiment: str, version: str, days: int, where: tuple[int, str], frames: Frames, batch: int) -> str:
        """A run that died of the CUDA OOM on `where` (rank, host), `days` after the first, at micro batch `batch`."""
        cause = oom_cause(f"{BUCKET}/{experiment}/{version}", *where, f"{1 + days / 4:.2f}", frames)
        return put(record_of(experiment, version, _T0 + days * day, cause), micro_train_batch_size_per_gpu=batch)

    qwen1 = oom(qwen, "v1", 0, (3, "gke-h100-d"), _TRAINER_FRAMES, 8)
    fixed = put(record_of(qwen, "v2", _T0 + 1 * day), micro_train_batch_size_per_gpu=4)
    put(record_of(qwen, "v3", _T0 + 3 * day), micro_train_batch_size_per_gpu=2, eval_interval=10)
    llama1 = oom(llama, "v1", 8, (0, "nid004012"), _TRAINER_FRAMES, 16)
    near = oom(llama, "v2", 10, (1, "gke-h100-a"), _GENERATOR_FRAMES, 8)
    other = put(record_of("math-rl-nccl", "v1", _T0 + 11 * day, nccl_cause(f"{BUCKET}/math-rl-nccl/v1")))
    current = oom(qwen, "v4", 18, (5, "gke-h100-f"), _TRAINER_FRAMES, 8)
    later = oom(qwen, "v5", 20, (6, "gke-h100-g"), _TRAINER_FRAMES, 8)
    return SampleHistory(current, (llama1, qwen1), fixed, near, other, later)


def _letters(number: int) -> str:
    word = ""
    while True:
        number, digit = divmod(number, 26)
        word = chr(ord("a") + digit) + word
        if number == 0:
            return word


def filler_record(index: int, *, start: datetime = _T0) -> CompletionRecord:
    """The index-th record of a store grown to size: a failure of its own (its own key in the message), ended a
    minute after the previous one; every tenth run completed."""
    experiment = f"filler-{index % 500:03d}"
    ended = start - timedelta(minutes=index + 1)
    if index % 10 == 0:
        return record_of(experiment, f"v{index}", ended)
    message = f"Key 'option_{_letters(index)}' is not in struct"  # digits would be normalised away
    cause = _cause(
        f"{BUCKET}/{experiment}/v{index}/logs/driver.log",
        "omegaconf.errors.ConfigAttributeError",
        message,
        _TRAINER_FRAMES,
    )
    return record_of(experiment, f"v{index}", ended, cause)
