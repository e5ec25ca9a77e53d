"""The failure table (steps/failure_rules.py): one case per rule, in the wording upstream prints, plus the order
of trust (cause, controller, reward curve, symptom) and where the deciding evidence lives (rank, host, file)."""

from __future__ import annotations

import pytest

from rlcleanup.models.failures import FailureClass
from rlcleanup.models.record import FailureCause
from rlcleanup.models.vocab import TerminalState
from rlcleanup.steps.failure_rules import FAILURE_RULES, NO_RULE, REWARD_RULE, classify_failure, where

INFRA, CONFIG, TRAINING = FailureClass.infrastructure, FailureClass.configuration, FailureClass.training
RDV = "gs://marin-us-central2/tmp/ttl=14d/skyrl/math-rl/2026.11.30/rendezvous/a1"


def _cause(error_type: str, message: str, uri: str = "gs://b/run/attempts/a1/logs/driver.log") -> FailureCause:
    return FailureCause(attempt_id="a1", source_uri=uri, line=12, error_type=error_type, message=message, traceback="")


# (rule, class, error type, message): the wording each rule reads, as the upstream named in the table prints it.
CASES = [
    (
        "gpu_xid",
        INFRA,
        "NVRM.Xid",
        "Xid (PCI:0000:3b:00): 79, pid=4410, name=ray::PolicyWork, GPU has fallen off the bus.",
    ),
    (
        "gpu_ecc",
        INFRA,
        "CUDAError",
        "uncorrectable ECC error encountered\nCUDA kernel errors might be asynchronously reported at some other API call",
    ),
    (
        "accelerator_init",
        INFRA,
        "jax.errors.JaxRuntimeError",
        "UNKNOWN: TPU initialization failed: open(/dev/vfio/0): Device or resource busy",
    ),
    (
        "ray_memory_monitor",
        INFRA,
        "ray.NodeOutOfMemory",
        "Task was killed due to the node running low on memory. Memory on the node (IP: 10.0.3.14, ID: 5f1c) where the "
        "task (actor ID: 8ad1, name=PolicyWorker.__init__, pid=6012, memory used=1703.2GB) was running was 1789.5GB / "
        "1820.0GB (0.983242), which exceeds the memory usage threshold of 0.95.",
    ),
    (
        "kernel_oom_kill",
        INFRA,
        "CgroupOOMKill",
        "Killed process 5533 (ray::RayWorkerW) total-vm:912345678kB, anon-rss:1853412000kB, file-rss:0kB",
    ),
    (
        "external_kill",
        INFRA,
        "torchelastic.WorkerKilled",
        "failed (exitcode: -9) local_rank: 0 (pid: 1322) of binary: /root/miniconda3/bin/python",
    ),
    ("disk_full", INFRA, "OSError", "[Errno 28] No space left on device: '/tmp/ray/session_latest/logs/raylet.out'"),
    (
        "eviction",
        INFRA,
        "PodEvicted",
        "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 2Gi. Container task was "
        "using 410Gi, request is 0, has larger consumption of ephemeral-storage.",
    ),
    # kubelet's graceful node shutdown (kubernetes pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go).
    ("node_shutdown", INFRA, "kubelet.NodeShutdown", "Pod was terminated in response to imminent node shutdown."),
    # Ray's GCS declaring a node dead (python/ray/_private/worker.py printing gcs_node_manager.cc's death info);
    # its "(OOM, preempted node, etc.)" lists possible causes, so the rule precedes `preemption`.
    (
        "node_lost",
        INFRA,
        "ray.NodeDied",
        "has been marked dead because the detector has missed too many heartbeats from it. This can happen when a "
        "(1) raylet crashes unexpectedly (OOM, preempted node, etc.)",
    ),
    ("preemption", INFRA, "TaskPreempted", "task 0 preempted: spot node gke-marin-h100-spot-7c1f reclaimed"),
    (
        "nccl_failure",
        INFRA,
        "torch.distributed.DistBackendError",
        "NCCL error in: ProcessGroupNCCL.cpp:2056, unhandled system error, NCCL version 2.21.5",
    ),
    (
        "nccl_stall",
        INFRA,
        "RuntimeError",
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4021, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800041 milliseconds before timing out.",
    ),
    (
        "storage_error",
        INFRA,
        "google.api_core.exceptions.ServiceUnavailable",
        "503 GET https://storage.googleapis.com/storage/v1/b/marin-us-central2/o: We encountered an internal error.",
    ),
    (
        "network_error",
        INFRA,
        "huggingface_hub.errors.LocalEntryNotFoundError",
        "Qwen/Qwen3-8B model-00003-of-00005.safetensors still failing after 5 attempts",
    ),
    ("tracking_service", INFRA, "wandb.errors.errors.CommError", "Error uploading run: returned error 404"),
    (
        "config_key",
        CONFIG,
        "omegaconf.errors.ConfigAttributeError",
        "Key 'learning_rate' is not in struct\n    full_key: trainer.policy.optimizer_config.learning_rate",
    ),
    (
        "shape_mismatch",
        CONFIG,
        "RuntimeError",
        "Error(s) in loading state_dict for Qwen2ForCausalLM:\n\tsize mismatch for lm_head.weight: copying a param "
        "with shape torch.Size([151936, 896]) from checkpoint, the shape in current model is torch.Size([151646, 896]).",
    ),
    (
        "auth",
        CONFIG,
        "huggingface_hub.errors.GatedRepoError",
        "401 Client Error. Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/"
        "main/config.json. Access to model meta-llama/Llama-3.1-8B is restricted.",
    ),
    (
        "missing_file",
        CONFIG,
        "FileNotFoundError",
        "[Errno 2] No such file or directory: '/data/gsm8k/train.parquet'",
    ),
    (
        "engine_memory_config",
        CONFIG,
        "ValueError",
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
    ),
    (
        "bad_value",
        CONFIG,
        "AssertionError",
        "train_batch_size 1000 should be divisible by policy_mini_batch_size 256",
    ),
    (
        "time_limit",
        CONFIG,
        "slurm_cancelled",
        "*** JOB 867816 ON c0700a-s1 CANCELLED AT 2021-05-11T12:06:17 DUE TO TIME LIMIT ***",
    ),
    (
        "cuda_oom",
        TRAINING,
        "torch.OutOfMemoryError",
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB "
        "is free.",
    ),
    (
        "nan_divergence",
        TRAINING,
        "ValueError",
        "advantages contain NaN at global_step 7: batch 14 (micro-batch 3 of 8, reward model returned NaN)",
    ),
]


def test_every_rule_has_a_case() -> None:
    assert sorted(name for name, *_ in CASES) == sorted(rule.name for rule in FAILURE_RULES)


@pytest.mark.parametrize(("rule", "expected", "error_type", "message"), CASES, ids=[c[0] for c in CASES])
def test_rule_reads_its_wording_from_the_cause(
    rule: str, expected: FailureClass, error_type: str, message: str
) -> None:
    failure_class, evidence = classify_failure(TerminalState.failed, _cause(error_type, message))
    assert (failure_class, evidence and evidence.rule, evidence and evidence.evidence) == (expected, rule, "cause")


def test_an_ecc_fault_behind_a_cuda_error_is_the_gpu_not_the_training() -> None:
    """Order matters: `CUDA error: uncorrectable ECC error` is infrastructure even though a CUDA error rule of the
    training class could read it."""
    cause = _cause("CUDAError", "CUDA error: uncorrectable ECC error encountered")
    assert classify_failure(TerminalState.failed, cause)[0] is INFRA


def test_a_completed_run_has_no_class() -> None:
    assert classify_failure(TerminalState.completed, _cause("torch.OutOfMemoryError", "CUDA out of memory")) == (
        None,
        None,
    )


def test_the_controller_decides_when_the_cause_matches_no_rule() -> None:
    """A preemption leaves nothing in the logs: the controller's own words (an attempt's failure) decide."""
    failure_class, evidence = classify_failure(
        TerminalState.failed, None, [("preempted", None), ("Iris job failed: task 0 exited with code 1", None)]
    )
    assert (
        failure_class is INFRA
        and evidence is not None
        and (evidence.rule, evidence.evidence)
        == (
            "preemption",
            "controller",
        )
    )


def test_a_cause_no_rule_knows_is_unknown_with_its_file() -> None:
    cause = _cause("RuntimeError", "something odd happened in the reward server")
    failure_class, evidence = classify_failure(TerminalState.failed, cause, [("exited with code 1", None)])
    assert failure_class is FailureClass.unknown
    assert evidence is not None and (evidence.rule, evidence.evidence_uri) == (NO_RULE, cause.source_uri)


def test_a_cancelled_run_with_nothing_that_says_it_failed_has_no_class() -> None:
    """A person's cancel is not a failure; the teardown it leaves is no evidence of one."""
    symptom = _cause("c10::DistBackendError", "NCCL communicator was aborted on rank 0")
    assert classify_failure(TerminalState.cancelled, None, [("killed", None)], symptom) == (None, None)


def test_a_collapsed_reward_without_exception_is_training() -> None:
    rewards = {step: value for step, value in enumerate([0.1, 0.3, 0.5, 0.62, 0.6, 0.04, 0.02, 0.01], start=1)}
    failure_class, evidence = classify_failure(TerminalState.failed, None, [], None, rewards)
    assert failure_class is TRAINING and evidence is not None and evidence.rule == REWARD_RULE.name
    assert evidence.quoted == "reward/avg_raw_reward peaked at 0.62, ended at 0.01 (step 8)"


def test_a_reward_that_only_dips_is_not_a_collapse() -> None:
    rewards = {step: value for step, value in enumerate([0.1, 0.3, 0.5, 0.62, 0.6, 0.4, 0.5, 0.55], start=1)}
    assert classify_failure(TerminalState.failed, None, [], None, rewards)[0] is FailureClass.unknown


def test_an_nccl_stall_symptom_decides_when_nothing_else_does() -> None:
    symptom = _cause(
        "RuntimeError",
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLGATHER) ran for "
        "1800083 milliseconds before timing out.",
        f"{RDV}/ray_session_logs/rank1-gke-h100-b/session_1/logs/worker-1.err",
    )
    failure_class, evidence = classify_failure(TerminalState.failed, None, [], symptom)
    assert failure_class is INFRA and evidence is not None
    assert (evidence.rule, evidence.evidence, evidence.rank, evidence.host) == (
        "nccl_stall",
        "symptom",
        1,
        "gke-h100-b",
    )


@pytest.mark.parametrize(
    ("uri", "text", "expected"),
    [
        (f"{RDV}/ray_session_logs/rank3-gke-h100-d/session_1/logs/worker-8ad1.err", "", (3, "gke-h100-d")),
        (
            f"{RDV}/debug_artifacts/rank2-gke-h100-c/outcomes/policy.gke-h100-c.7021.1764489972000000000.exception.json",
            "",
            (2, "gke-h100-c"),
        ),
        ("gs://b/x/outcomes/policy.node-7.4410.1764489972000000000.exception.json", "", (None, "node-7")),
        ("gs://b/run/attempts/a1/logs/driver.log", "[Rank 5] Watchdog caught collective operation timeout", (5, None)),
        (None, "no rank here", (None, None)),
    ],
)
def test_where_names_the_rank_and_host_of_the_evidence(
    uri: str | None, text: str, expected: tuple[int | None, str | None]
) -> None:
    assert where(uri, text) == expected
