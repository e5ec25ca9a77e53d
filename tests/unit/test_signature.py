"""Signatures (steps/signature.py) on generated logs: a failure's log is generated many times over, as another day,
rank, host, run, process and machine would print it, then read by the log scanner as the pipeline reads it.
The same failure always gives the same signature; another exception type, message, frame or collective never does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from rlcleanup.models.record import FailureCause
from rlcleanup.parsing.log_scanner import scan_lines
from rlcleanup.steps.first_cause import FirstError
from rlcleanup.steps.signature import SIGNATURE_PREFIX, failing_collective, normalise_message, our_frames, signature


@dataclass(frozen=True)
class Failure:
    error_type: str
    message: str  # a template: {rank} {host} {ip} {addr} {path} {pid} {n} {x} {step}
    frames: tuple[tuple[str, str, str], ...]  # (file under the source root, function, code line)


_WORKER = ("skyrl_train/workers/fsdp/fsdp_worker.py", "ppo_train", "loss = self.forward(batch)")
_TRAINER = ("skyrl_train/trainer.py", "train", "status = self.train_critic_and_policy(data)")
_MODELS = ("skyrl_train/models.py", "forward", "logits = self.model(input_ids)")
_LOADER = ("skyrl_train/dataset/dataset.py", "load", "table = pq.read_table(path)")
_REDUCE = ("skyrl_train/distributed/utils.py", "all_reduce_mean", "dist.all_reduce(tensor)")
_GATHER = ("skyrl_train/distributed/utils.py", "all_gather_logprobs", "dist.all_gather_into_tensor(out, tensor)")

FAILURES = (
    Failure(
        "torch.OutOfMemoryError",
        "CUDA out of memory. Tried to allocate {x} GiB. GPU {n} has a total capacity of 79.10 GiB of which {x} GiB "
        "is free. Process {pid} has {x} GiB memory in use.",
        (_TRAINER, _WORKER, _MODELS),
    ),
    Failure(
        "torch.distributed.DistBackendError",
        "NCCL error in: ProcessGroupNCCL.cpp:{n}, unhandled system error, NCCL version 2.21.5 (rank {rank} on "
        "{host}, peer {ip})",
        (_TRAINER, _REDUCE),
    ),
    Failure(
        "torch.distributed.DistBackendError",
        "NCCL error in: ProcessGroupNCCL.cpp:{n}, unhandled system error, NCCL version 2.21.5 (rank {rank} on "
        "{host}, peer {ip})",
        (_TRAINER, _GATHER),
    ),
    Failure("FileNotFoundError", "[Errno 2] No such file or directory: '{path}/train.parquet'", (_TRAINER, _LOADER)),
    Failure("OSError", "[Errno 28] No space left on device: '{path}/train.parquet'", (_TRAINER, _LOADER)),
    Failure(
        "ValueError", "advantages contain NaN at global_step {step} on rank {rank} (batch {n})", (_TRAINER, _WORKER)
    ),
    Failure("ValueError", "policy loss is inf at global_step {step} on rank {rank} (batch {n})", (_TRAINER, _WORKER)),
    Failure("omegaconf.errors.ConfigAttributeError", "Key 'learning_rate' is not in struct", (_TRAINER, _WORKER)),
    Failure("omegaconf.errors.ConfigAttributeError", "Key 'lr_warmup_steps' is not in struct", (_TRAINER, _WORKER)),
    Failure("RuntimeError", "tensor at {addr} freed twice by worker {pid} on {host}", (_TRAINER, _WORKER, _MODELS)),
    Failure("AssertionError", "tensor at {addr} freed twice by worker {pid} on {host}", (_TRAINER, _WORKER, _MODELS)),
)

_label = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
_hosts = st.one_of(
    st.builds(lambda pool, n: f"gke-{pool}-{n}", st.sampled_from(["h100", "a3-highgpu-8g", "tpu-v5p"]), _label),
    st.builds(lambda n: f"nid{n:06d}", st.integers(0, 999_999)),
    st.builds(lambda n, d: f"node-{n}.{d}.internal", st.integers(0, 4096), st.sampled_from(["c", "us-central2"])),
)


@dataclass(frozen=True)
class Occurrence:
    """What varies between two occurrences of one failure."""

    at: datetime
    rank: int
    host: str
    ip: str
    addr: int
    pid: int
    run: str
    root: str  # where the source tree is installed
    numbers: tuple[int, int, int]


_occurrences = st.builds(
    Occurrence,
    at=st.datetimes(datetime(2025, 1, 1), datetime(2027, 12, 31)),
    rank=st.integers(0, 1023),
    host=_hosts,
    ip=st.builds(lambda a, b, c: f"10.{a}.{b}.{c}", st.integers(0, 255), st.integers(0, 255), st.integers(1, 254)),
    addr=st.integers(0x1000, 2**48),
    pid=st.integers(2, 4_000_000),
    run=st.builds(lambda n, v: f"math-rl-{n}/2026.{v}", _label, st.integers(1, 12)),
    root=st.sampled_from(["/app/skyrl-train", "/home/ray/src/skyrl-train", "/tmp/ray/session_1/runtime/skyrl-train"]),
    numbers=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 10**4)),
)


def log_of(failure: Failure, o: Occurrence) -> list[str]:
    """The failure as a rank's log prints it: chatter, then the traceback with our frames and a library frame."""
    n, x, step = o.numbers
    message = failure.message.format(
        rank=o.rank,
        host=o.host,
        ip=o.ip,
        addr=hex(o.addr),
        pid=o.pid,
        n=n,
        x=f"{x / 1000:.2f}",
        step=step,
        path=f"gs://marin-us-central2/{o.run}/data",
    )
    stamp = f"{o.at:%Y-%m-%d %H:%M:%S},{o.at.microsecond // 1000:03d}"
    lines = [f"{stamp} INFO trainer.py:{n % 900} -- rank {o.rank} on {o.host}: step {step} rollout start"]
    lines.append("Traceback (most recent call last):")
    for index, (path, function, code) in enumerate(failure.frames):
        lines += [f'  File "{o.root}/{path}", line {(n + index * 37) % 2000 + 1}, in {function}', f"    {code}"]
    library = "/usr/local/lib/python3.12/site-packages/torch/nn/modules/module.py"
    lines += [f'  File "{library}", line {n % 1700 + 1}, in _call_impl', "    return forward_call(*args, **kwargs)"]
    lines.append(f"{failure.error_type}: {message}")
    return lines


def cause_of(failure: Failure, o: Occurrence) -> FailureCause:
    scan = scan_lines(log_of(failure, o), f"gs://marin-us-central2/{o.run}/logs/worker.err", "a1")
    first = next(e for e in scan.errors if e.causal)
    return FirstError(first, 0, True).cause()  # quoted as the record quotes a first cause


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(FAILURES), _occurrences, _occurrences)
def test_the_same_failure_on_another_day_rank_host_or_run_has_the_same_signature(
    failure: Failure, one: Occurrence, other: Occurrence
) -> None:
    first, second = signature(cause_of(failure, one)), signature(cause_of(failure, other))
    assert first == second
    assert first[0].startswith(SIGNATURE_PREFIX)


@settings(max_examples=150, deadline=None)
@given(st.data(), _occurrences, _occurrences)
def test_different_failures_have_different_signatures(data: st.DataObject, one: Occurrence, other: Occurrence) -> None:
    """Another exception type, message, innermost frames or collective: every pair of FAILURES differs in one."""
    i = data.draw(st.integers(0, len(FAILURES) - 1))
    j = data.draw(st.integers(0, len(FAILURES) - 1).filter(lambda k: k != i))
    assert signature(cause_of(FAILURES[i], one))[0] != signature(cause_of(FAILURES[j], other))[0]


def test_the_generated_failures_differ_in_each_part_the_signature_reads() -> None:
    """The separation test above covers each part: type only, message only, frames/collective only."""
    bases = [signature(cause_of(f, _FIXED))[1] for f in FAILURES]
    assert bases[9].message == bases[10].message and bases[9].error_type != bases[10].error_type  # type
    assert bases[7].error_type == bases[8].error_type and bases[7].message != bases[8].message  # message
    assert bases[1].message == bases[2].message and (bases[1].collective, bases[2].collective) == (
        "allreduce",
        "allgather",
    )
    assert bases[1].frames != bases[2].frames  # and the innermost frame


_FIXED = Occurrence(
    datetime(2026, 11, 30, 8, 6, 58), 1, "gke-h100-b", "10.0.3.14", 0x7F3A2C, 5521, "r/1", "/app/s", (1, 2, 3)
)


def test_normalisation_keeps_the_words_and_drops_what_varies() -> None:
    text = (
        "Tried to allocate 2.00 GiB on gke-marin-pool-5f1c2a3b-x9kq rank 3 (10.0.3.14:29500) at 0x7ffe12 for "
        "gs://b/run-17/x.bin and /tmp/ray/session_2026/logs, node-4.c.internal, nid004012"
    )
    assert normalise_message(text) == (
        "Tried to allocate <n> GiB on <host> rank <n> (<ip>) at <addr> for <uri> and <path>, <host>, <host>"
    )


def test_fault_codes_are_kept() -> None:
    """An Xid or an errno names the fault: two codes are two failures."""
    xid = "Xid (PCI:0000:3b:00): {}, pid=4410, name=python, GPU fault"
    assert normalise_message(xid.format(79)) == "Xid 79, pid=<n>, name=python, GPU fault"
    assert normalise_message(xid.format(79)) != normalise_message(xid.format(48))
    assert normalise_message("[Errno 28] disk") != normalise_message("[Errno 2] disk")


def test_frames_are_ours_innermost_first_without_line_numbers() -> None:
    traceback = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/app/skyrl-train/skyrl_train/trainer.py", line 402, in train',
            '  File "/app/skyrl-train/skyrl_train/workers/worker.py", line 88, in training_step',
            '  File "/app/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py", line 1736, in _call_impl',
        ]
    )
    assert our_frames(traceback) == ["workers/worker.py:training_step", "skyrl_train/trainer.py:train"]


def test_the_collective_is_spelt_one_way() -> None:
    watchdog = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=_ALLGATHER_BASE, NumelIn=8)"
    assert failing_collective(watchdog) == "allgather"
    assert failing_collective("    dist.all_reduce(loss)") == "allreduce"
    assert failing_collective("reduce_scatter_tensor(out, x)") == "reducescatter"
    assert failing_collective("no collective here") is None
