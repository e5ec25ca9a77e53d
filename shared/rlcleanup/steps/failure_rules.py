"""The failure table: what kind of failure a run died of, from its evidence in order of trust (docs/failures.md).

One table (`FAILURE_RULES`), as `parsing/teardown.py` is one table: each rule names its class, the wording it
matches and the upstream source that prints that wording, so a reader can check it and a new wording is one row.
The first rule that matches decides, so the order matters: a CUDA error caused by an ECC fault is the GPU's, an
NCCL abort is the fabric's, and only then do configuration and training wordings get their turn.

The evidence is read in the order the pipeline trusts it: the first cause (a failure receipt, a termination
artifact, a rank's Ray log, the driver's log, as `steps/first_cause.py` chose it), then the controller's own words
(an attempt's `failure`, the controller state: a preemption or an eviction often leaves nothing else), then, for a
run that failed without any exception, its reward curve, and last the earliest teardown symptom (an NCCL watchdog
timeout names the collective a rank stalled on). A cancelled run is classified only from a cause or the
controller: a person's cancel is not a failure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rlcleanup.models.failures import FailureClass, FailureEvidence
from rlcleanup.models.record import FailureCause
from rlcleanup.models.vocab import TerminalState
from rlcleanup.parsing.teardown import client_connection_error

INFRA, CONFIG, TRAINING = FailureClass.infrastructure, FailureClass.configuration, FailureClass.training

NVIDIA_XID = "NVIDIA driver (dmesg `NVRM: Xid`), docs.nvidia.com/deploy/xid-errors; run-layout-v3.md §4 dmesg tail"
CUDA_RUNTIME = "CUDA runtime cudaGetErrorString (cudaErrorECCUncorrectable, cudaErrorMemoryAllocation)"
LINUX_OOM = "linux mm/oom_kill.c + mm/memcontrol.c (dmesg in a termination artifact, run-layout-v3.md §4)"
RAY_MEMORY_MONITOR = "ray src/ray/raylet/node_manager.cc memory monitor + python/ray/exceptions.py OutOfMemoryError"
KUBELET = "kubernetes pkg/kubelet/eviction/helpers.go (`The node was low on resource: ...`)"
KUBELET_SHUTDOWN = "kubernetes pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go (graceful node shutdown)"
RAY_NODE_DEATH = "ray src/ray/gcs/gcs_node_manager.cc (heartbeats missed), gcs_actor_manager.cc GenNodeDiedCause"
PREEMPTION = (
    "Iris TaskState PREEMPTED / Slurm `DUE TO PREEMPTION` / GCE `Instance was preempted` / Ray GenNodeDiedCause"
    " `the actor's node was preempted`"
)
TORCH_NCCL = "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, NCCL src/misc/utils (ncclResult strings)"
CLOUD_STORAGE = "google-api-core exceptions / botocore exceptions / gcsfs retry"
IRIS_TPU_HEALTH = "marin-community/marin lib/iris/src/iris/cluster/worker/tpu_health.py detect_tpu_init_failure"
VLLM_KV_CACHE = "vllm vllm/worker/worker.py raise_if_cache_size_invalid, vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory"
SLURM_TIME_LIMIT = (
    "SchedMD/slurm slurmstepd (`*** JOB N ON host CANCELLED AT … DUE TO TIME LIMIT ***`): the run asked too little"
)
WANDB = "wandb wandb/errors/errors.py (CommError: the W&B service or its storage refused or failed a request)"
CLIENTS = "requests / urllib3 / aiohttp / httpx / huggingface_hub file_download.py (parsing/teardown.py)"
OMEGACONF = "omegaconf omegaconf/errors.py, hydra hydra/errors.py (ConfigCompositionException)"
TORCH_SHAPES = (
    "pytorch torch/nn/modules/module.py load_state_dict (`size mismatch for`), aten shape checks,"
    " torch/distributed/checkpoint/default_planner.py (`Size mismatch between saved … and current`)"
)
AUTH = "huggingface_hub errors.py (GatedRepoError, RepositoryNotFoundError), google-auth, botocore"
SKYRL_VALIDATE = "SkyRL skyrl_train/utils/utils.py validate_batch_sizes (`... should be divisible by ...`)"
TORCH_OOM = "pytorch c10/cuda/CUDACachingAllocator.cpp (`CUDA out of memory. Tried to allocate`)"
SKYRL_TRAINER = "SkyRL skyrl_train/trainer.py (loss, advantages and grad norms checked for NaN/inf)"


@dataclass(frozen=True)
class FailureRule:
    name: str
    failure_class: FailureClass
    pattern: re.Pattern[str]
    source: str  # the upstream that prints the wording


def _r(name: str, failure_class: FailureClass, pattern: str, source: str) -> FailureRule:
    return FailureRule(name, failure_class, re.compile(pattern), source)


FAILURE_RULES: tuple[FailureRule, ...] = (
    # --- infrastructure: the node, the GPU, the fabric, the scheduler, storage and network
    _r("gpu_xid", INFRA, r"\bNVRM: Xid\b|\bXid \(PCI:|\bNVRM\.Xid\b|GPU has fallen off the bus", NVIDIA_XID),
    _r(
        "gpu_ecc",
        INFRA,
        r"(?i)uncorrectable ECC error|\bECC error|double bit (?:ECC )?error|\bDBE\b|row remapping failure",
        CUDA_RUNTIME,
    ),
    _r(
        "accelerator_init",
        INFRA,
        r"TPU initialization failed|Couldn't open iommu group|/dev/vfio/\d+\): Device or resource busy",
        IRIS_TPU_HEALTH,
    ),
    _r(
        "ray_memory_monitor",
        INFRA,
        r"ray\.NodeOutOfMemory|NODE_OUT_OF_MEMORY|killed due to the node running low on memory"
        r"|ray\.exceptions\.OutOfMemoryError",
        RAY_MEMORY_MONITOR,
    ),
    _r(
        "kernel_oom_kill",
        INFRA,
        r"^(?:CgroupOOMKill|OOMKill|kubernetes\.OOMKilled):|invoked oom-killer|Memory cgroup out of memory"
        r"|Out of memory: Killed process|\bOOMKilled\b",
        LINUX_OOM,
    ),
    _r(
        "external_kill",
        INFRA,
        r"^torchelastic\.WorkerKilled:|exitcode: -9\b|(?i:signal 9 \(SIGKILL\) received by PID)",
        "pytorch torch/distributed/elastic (a worker SIGKILLed from outside: the OOM killer, the node, a person)",
    ),
    _r("disk_full", INFRA, r"No space left on device|\[Errno 28\]|\bENOSPC\b|Disk quota exceeded", "cpython OSError"),
    _r(
        "eviction",
        INFRA,
        r"^kubelet\.Evicted:|The node was low on resource|(?i:\bpod (?:was )?evicted\b)|Evicted: "
        r"|ephemeral local storage usage exceeds",
        KUBELET,
    ),
    _r(
        "node_shutdown",
        INFRA,
        r"^kubelet\.NodeShutdown:|Pod was terminated in response to imminent node shutdown",
        KUBELET_SHUTDOWN,
    ),
    _r(
        "node_lost",
        INFRA,
        r"^ray\.NodeDied:|marked dead because the detector has missed too many heartbeats"
        r"|The actor died because its node has died|health check failed due to missing too many heartbeats",
        RAY_NODE_DEATH,
    ),
    _r(
        "preemption",
        INFRA,
        r"(?i)\bpreempt(?:ed|ion)\b|spot (?:node|instance|vm)\b.*\breclaimed\b|DUE TO PREEMPTION",
        PREEMPTION,
    ),
    _r(
        "nccl_failure",
        INFRA,
        r"DistBackendError|NCCL error|ncclSystemError|ncclInternalError|ncclRemoteError|unhandled system error"
        r"|NCCL communicator was aborted",
        TORCH_NCCL,
    ),
    _r(
        "nccl_stall",
        INFRA,
        r"(?i)watchdog caught collective operation timeout|collective operation timed ?out"
        r"|WorkNCCL\(.*OpType=\w+.*\) ran for|Heartbeat monitor timed out",
        TORCH_NCCL,
    ),
    _r(
        "storage_error",
        INFRA,
        r"google\.api_core\.exceptions\.(?:ServiceUnavailable|InternalServerError|TooManyRequests|GatewayTimeout"
        r"|DeadlineExceeded)|botocore\.exceptions\.(?:EndpointConnectionError|ReadTimeoutError|ConnectTimeoutError)"
        r"|\bSlow ?Down\b|503 Service Unavailable|gcsfs\.retry\.HttpError|\b50[0234] Server Error\b",
        CLOUD_STORAGE,
    ),
    _r(
        "network_error",
        INFRA,
        r"still failing after \d+ attempts|Temporary failure in name resolution|Name or service not known"
        r"|Network is unreachable|(?:Read|Connect)Timeout(?:Error)?\b|\b429 Client Error\b|Too Many Requests"
        r"|DistStoreError|DistNetworkError|\bSocket Timeout\b|client socket has timed out",
        CLIENTS,
    ),
    _r("tracking_service", INFRA, r"wandb\.errors\.(?:errors\.)?CommError|\bCommError\b", WANDB),
    # --- configuration: what the experiment's author wrote
    _r(
        "config_key",
        CONFIG,
        r"omegaconf\.errors\.|ConfigAttributeError|ConfigKeyError|MissingMandatoryValue|ConfigCompositionException"
        r"|Could not override '|is not in struct|Could not find '[^']+' in the config",
        OMEGACONF,
    ),
    _r(
        "shape_mismatch",
        CONFIG,
        r"(?i:size mismatch (?:for|between saved))|shape mismatch|shapes cannot be multiplied|The size of tensor a \(\d+\) must match"
        r"|mismatched shapes",
        TORCH_SHAPES,
    ),
    _r(
        "auth",
        CONFIG,
        r"GatedRepoError|RepositoryNotFoundError|\b40[13] (?:Client Error|Unauthorized|Forbidden)\b|PermissionDenied"
        r"|Permission denied|AccessDenied|InvalidAccessKeyId|DefaultCredentialsError|invalid_grant",
        AUTH,
    ),
    _r(
        "missing_file",
        CONFIG,
        r"FileNotFoundError|No such file or directory|\[Errno 2\]|does not appear to have a file named"
        r"|EntryNotFoundError|ModuleNotFoundError|No module named|ImportError: .*undefined symbol",
        "cpython OSError / importlib / huggingface_hub",
    ),
    _r(
        "engine_memory_config",
        CONFIG,
        r"No available memory for the cache blocks|Try increasing `gpu_memory_utilization`"
        r"|larger than the available KV cache memory",
        VLLM_KV_CACHE,
    ),
    _r(
        "bad_value",
        CONFIG,
        r"(?i)should be divisible by|must be divisible by|must be (?:a multiple of|one of)|invalid choice",
        SKYRL_VALIDATE,
    ),
    _r("time_limit", CONFIG, r"DUE TO TIME LIMIT|\bTIMEOUT\b.*\bwall ?time\b", SLURM_TIME_LIMIT),
    # --- training: the model and its optimisation
    _r(
        "cuda_oom",
        TRAINING,
        r"torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory|CUDA (?:driver )?error: out of memory|CUBLAS_STATUS_ALLOC_FAILED",
        TORCH_OOM,
    ),
    _r(
        "nan_divergence",
        TRAINING,
        r"(?i)\bnan\b|\binf(?:inity)?\b|non-finite|not finite|diverg",
        SKYRL_TRAINER,
    ),
)

# A run that failed without any exception but whose reward collapsed: the last REWARD_TAIL points average at most
# REWARD_COLLAPSE of the curve's peak (with at least REWARD_MIN_POINTS points).
REWARD_METRIC = "reward/avg_raw_reward"
REWARD_TAIL, REWARD_MIN_POINTS, REWARD_COLLAPSE = 3, 6, 0.1
REWARD_RULE = FailureRule("reward_collapse", TRAINING, re.compile(r"$^"), f"{REWARD_METRIC} (SkyRL trainer)")
NO_RULE = "no_rule"
MAX_CONTINUATION_CHARS = 2000  # of an exception's message continuation lines, read for the class

_RAY_NODE = re.compile(r"/(?:ray_session_logs|debug_artifacts)/rank(?P<rank>\d+)-(?P<host>[^/]+)/")
_RECEIPT = re.compile(r"/outcomes/[^./]+\.(?P<host>[^/]+?)\.\d+\.\d+(?:\.exception)?\.json$")
_RANK_WORDS = re.compile(r"(?i)\b(?:global_)?rank[ =:]*(?P<rank>\d+)")


def rule_for(text: str) -> FailureRule | None:
    """The first rule whose wording is in `text`; a client's connection failure is a network error too."""
    for rule in FAILURE_RULES:
        if rule.pattern.search(text):
            return rule
    error_type, _, message = text.partition(": ")
    if client_connection_error(error_type, message):
        return next(r for r in FAILURE_RULES if r.name == "network_error")
    return None


def where(uri: str | None, text: str) -> tuple[int | None, str | None]:
    """(rank, host) that the evidence file's location names (a rank's Ray node dir, a receipt's name), else a
    rank the quoted words name."""
    rank: int | None = None
    host: str | None = None
    if uri and (node := _RAY_NODE.search(uri)):
        rank, host = int(node.group("rank")), node.group("host")
    if uri and host is None and (receipt := _RECEIPT.search(uri)):
        host = receipt.group("host")
    if rank is None and (said := _RANK_WORDS.search(text)):
        rank = int(said.group("rank"))
    return rank, host


def _evidence(rule: FailureRule, read: str, text: str, uri: str | None) -> FailureEvidence:
    rank, host = where(uri, text)
    match = rule.pattern.search(text)
    quoted = text if match is None else text[max(match.start() - 120, 0) : match.end() + 180]
    return FailureEvidence(rule=rule.name, evidence=read, rank=rank, host=host, evidence_uri=uri, quoted=quoted[:300])


def _cause_text(cause: FailureCause) -> str:
    """`ErrorType: message`, and the lines after the traceback's final exception line (a message continues there:
    `Error(s) in loading state_dict for X:` then `\tsize mismatch for …`), never its frames."""
    text = f"{cause.error_type}: {cause.message}"
    lines = (cause.traceback or "").splitlines()
    last = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith(cause.error_type)), None)
    tail = "\n".join(lines[last + 1 :]) if last is not None else ""
    return f"{text}\n{tail[:MAX_CONTINUATION_CHARS]}" if tail.strip() else text


def reward_collapsed(series: Mapping[int, float]) -> bool:
    values = [series[step] for step in sorted(series)]
    if len(values) < REWARD_MIN_POINTS:
        return False
    peak = max(values)
    tail = values[-REWARD_TAIL:]
    return peak > 0 and sum(tail) / len(tail) <= REWARD_COLLAPSE * peak


def classify_failure(
    terminal_state: TerminalState | None,
    cause: FailureCause | None,
    controller_words: Sequence[tuple[str, str | None]] = (),
    symptom: FailureCause | None = None,
    rewards: Mapping[int, float] | None = None,
) -> tuple[FailureClass | None, FailureEvidence | None]:
    """The failure class and what decided it; (None, None) for a run that did not fail (completed, or cancelled
    with nothing that says it failed). `controller_words` are (text, file) pairs: an attempt's failure, the
    controller state."""
    if terminal_state in (None, TerminalState.completed):
        return None, None
    if cause is not None and (rule := rule_for(_cause_text(cause))):
        return rule.failure_class, _evidence(rule, "cause", _cause_text(cause), cause.source_uri)
    for text, uri in controller_words:
        if rule := rule_for(text):
            return rule.failure_class, _evidence(rule, "controller", text, uri)
    if cause is not None:
        return FailureClass.unknown, FailureEvidence(
            rule=NO_RULE, evidence="cause", evidence_uri=cause.source_uri, quoted=_cause_text(cause)[:300]
        )
    if terminal_state is TerminalState.cancelled:
        return None, None
    if rewards and reward_collapsed(rewards):
        peak, last = max(rewards.values()), rewards[max(rewards)]
        quoted = f"{REWARD_METRIC} peaked at {peak:g}, ended at {last:g} (step {max(rewards)})"
        return TRAINING, FailureEvidence(rule=REWARD_RULE.name, evidence="metrics", quoted=quoted)
    if symptom is not None and (rule := rule_for(_cause_text(symptom))):
        return rule.failure_class, _evidence(rule, "symptom", _cause_text(symptom), symptom.source_uri)
    return FailureClass.unknown, FailureEvidence(rule=NO_RULE, evidence="none")
