"""Infrastructure statements: lines in which the infrastructure itself says why a process died.

One table, like the teardown table (parsing/teardown.py): each entry names the wording, the error type the cause is
recorded under (`steps/failure_rules.py` classifies by it) and the upstream file that prints it, so a reader can
check it and a new wording is one row. A statement is a cause even when it arrives in teardown clothing (Ray's
`ActorDiedError` message carries `Worker exit type: NODE_OUT_OF_MEMORY`), and it outranks the Python exceptions of
its attempt (`steps/first_cause.py`): those are what the dying process and its peers printed after the
infrastructure killed it (a lost actor, a reset connection, a collective that timed out).

Sources (read upstream):
- ray-project/ray `src/ray/raylet/node_manager.cc` (the memory monitor's kill summary, printed to the driver:
  `(raylet) node_manager.cc:3040: 1 Workers (tasks / actors) killed due to memory pressure (OOM), ...`, quoted in
  `doc/source/ray-core/scheduling/ray-oom-prevention.rst`), `src/ray/raylet/worker_killing_policy*.cc` and
  `python/ray/exceptions.py` (`Worker exit type: NODE_OUT_OF_MEMORY`, `Task was killed due to the node running low
  on memory`), `src/ray/gcs/gcs_node_manager.cc` (`The node with node id: … has been marked dead because the
  detector has missed too many heartbeats from it.`, printed by `python/ray/_private/worker.py`),
  `src/ray/gcs/gcs_actor_manager.cc` `GenNodeDiedCause` (`The actor died because its node has died. Node Id: …`
  then `the actor's node was preempted: …` / `terminated unexpectedly: …`).
- kubernetes/kubernetes `pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go` (`Pod was terminated in response
  to imminent node shutdown.`), `pkg/kubelet/eviction/helpers.go` (`The node was low on resource: …`), the
  container status reason `OOMKilled` (`pkg/kubelet/kuberuntime`).
- torvalds/linux `mm/oom_kill.c` (`Out of memory: Killed process …`, `Memory cgroup out of memory: Killed process …`
  in the dmesg tail of an Iris termination artifact, run-layout-v3.md §4).
- NVIDIA's driver (`NVRM: Xid (PCI:…): 79, …`), docs.nvidia.com/deploy/xid-errors.
A failure receipt (parsing/debug_artifacts.py) is the other statement a run can hold: steps/first_cause.py puts
it first of all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RAY_RAYLET = "ray-project/ray src/ray/raylet/node_manager.cc (memory monitor kill summary)"
RAY_EXIT = "ray-project/ray python/ray/exceptions.py + src/ray/raylet/node_manager.cc (worker exit detail)"
RAY_GCS_NODE = "ray-project/ray src/ray/gcs/gcs_node_manager.cc + python/ray/_private/worker.py"
RAY_GCS_ACTOR = "ray-project/ray src/ray/gcs/gcs_actor_manager.cc GenNodeDiedCause"
KUBELET_SHUTDOWN = "kubernetes/kubernetes pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go"
KUBELET_EVICTION = "kubernetes/kubernetes pkg/kubelet/eviction/helpers.go"
KUBE_OOMKILLED = "kubernetes/kubernetes container status reason OOMKilled (pkg/kubelet/kuberuntime)"
LINUX_OOM = "torvalds/linux mm/oom_kill.c (dmesg; Iris termination artifact, run-layout-v3.md §4)"
SLURM_OOM = "SchedMD/slurm src/plugins/task/cgroup (`Detected N oom-kill event(s) in StepId=…`)"
TORCH_ELASTIC = "pytorch torch/distributed/elastic/multiprocessing/api.py + errors/__init__.py"
SUBMITIT = "facebookincubator/submitit submitit/core/job_environment.py (SIGUSR2 handler)"
NVIDIA_XID = "NVIDIA driver NVRM Xid (docs.nvidia.com/deploy/xid-errors)"


@dataclass(frozen=True)
class InfraStatement:
    name: str
    pattern: re.Pattern[str]  # group 1, when present, is the message
    error_type: str  # the cause's type: steps/failure_rules.py classifies by it
    source: str  # the upstream that prints the wording
    # A lowercased substring every match holds (the scanner's and the block engine's gate). Never a `k`, nor an `i`
    # at its end: U+212A and U+0130 lowercase to them, which the engine's ASCII folding cannot see
    # (test_logs_differential.test_non_ascii_lowercase_cannot_complete_a_hint).
    hint: str


def _s(name: str, pattern: str, error_type: str, source: str, hint: str) -> InfraStatement:
    return InfraStatement(name, re.compile(pattern), error_type, source, hint)


# No leading `.*`: these run on every hinted line. Order: the first match names the line.
INFRA_STATEMENTS: tuple[InfraStatement, ...] = (
    _s(
        "ray_memory_pressure",
        r"((?:\d+ Workers \(tasks / actors\) )?killed due to memory pressure \(OOM\).*)",
        "ray.NodeOutOfMemory",
        RAY_RAYLET,
        "memory pressure",
    ),
    _s(
        "ray_memory_threshold_kill",
        r"(Memory on the node \(IP: .*which exceeds the memory usage threshold of [\d.]+\. Ray killed this worker.*)",
        "ray.NodeOutOfMemory",
        RAY_EXIT,
        "memory usage threshold",
    ),
    _s("ray_exit_oom", r"Worker exit type: NODE_OUT_OF_MEMORY\b(.*)", "ray.NodeOutOfMemory", RAY_EXIT, "out_of_memory"),
    _s(
        "ray_killed_low_memory",
        r"((?:Task|Worker|Actor) was killed due to the node running low on memory.*)",
        "ray.NodeOutOfMemory",
        RAY_EXIT,
        "low on memory",
    ),
    _s(
        "ray_node_marked_dead",
        r"(has been marked dead because the detector has missed too many heartbeats.*)",
        "ray.NodeDied",
        RAY_GCS_NODE,
        "too many heartbeats",
    ),
    _s(
        "ray_actor_node_preempted",
        r"(the actor's node was preempted: ?.*)",
        "ray.NodePreempted",
        RAY_GCS_ACTOR,
        "node was preempted",
    ),
    _s(
        "ray_actor_node_died",
        r"(The actor died because its node has died\..*)",
        "ray.NodeDied",
        RAY_GCS_ACTOR,
        "node has died",
    ),
    _s(
        "kubelet_node_shutdown",
        r"(Pod was terminated in response to (?:imminent )?node shutdown\..*)",
        "kubelet.NodeShutdown",
        KUBELET_SHUTDOWN,
        "node shutdown",
    ),
    _s(
        "kubelet_eviction",
        r"(The node was low on resource: .*)",
        "kubelet.Evicted",
        KUBELET_EVICTION,
        "low on resource",
    ),
    _s(
        "kubernetes_oomkilled",
        r"((?:[Rr]eason|[Ss]tatus)\W{0,20}OOMKilled\b.*|\bOOMKilled \(exit code 137\).*)",
        "kubernetes.OOMKilled",
        KUBE_OOMKILLED,
        "oom",
    ),
    # Kernels before 4.19 print `Memory cgroup out of memory: Kill process N (comm) score S or sacrifice child`.
    _s(
        "kernel_cgroup_oom",
        r"Memory cgroup out of memory: (Kill(?:ed)? process .*)",
        "CgroupOOMKill",
        LINUX_OOM,
        "out of memory",
    ),
    _s("kernel_oom", r"Out of memory: (Kill(?:ed)? process .*)", "OOMKill", LINUX_OOM, "out of memory"),
    _s(
        "slurm_cgroup_oom",
        r"(Detected \d+ oom[-_]kill events? in \S+.*|Detected \d+ oom-kill event\(s\) in .*)",
        "CgroupOOMKill",
        SLURM_OOM,
        "oom",
    ),
    # torchelastic reporting a worker killed by SIGKILL, which no Python code sends itself: the kernel's OOM killer,
    # the node agent, or a person (pytorch torch/distributed/elastic/multiprocessing/api.py `failed (exitcode: -9)
    # local_rank: …`, errors/__init__.py `Signal 9 (SIGKILL) received by PID …`).
    _s(
        "torchelastic_exit_sigkill",
        r"(failed \(exitcode: -9\) local_rank: .*)",
        "torchelastic.WorkerKilled",
        TORCH_ELASTIC,
        "exitcode: -9",
    ),
    _s(
        "torchelastic_sigkill",
        r"((?i:signal 9 \(SIGKILL\) received by PID) \d+.*)",
        "torchelastic.WorkerKilled",
        TORCH_ELASTIC,
        ") received by pid",
    ),
    # submitit forwards Slurm's preemption signal and says so (facebookincubator/submitit
    # submitit/core/job_environment.py `Caught signal SIGUSR2 on {host}: this job is preempted.`).
    _s("submitit_preempted", r"(this job is preempted\.?.*)", "submitit.Preempted", SUBMITIT, "is preempted"),
    _s("gpu_xid", r"NVRM: (Xid \(PCI:[^)]*\): \d+.*)", "NVRM.Xid", NVIDIA_XID, "xid"),
)
STATEMENT_HINTS = tuple(sorted({s.hint for s in INFRA_STATEMENTS}))


def statement_for(text: str, lowered: str | None = None) -> InfraStatement | None:
    """The first table entry whose wording is in `text` (a whole line, or `ErrorType: message`); `lowered` is
    `text.lower()` when the caller has it already (the scanner does, for every hinted line)."""
    lowered = text.lower() if lowered is None else lowered
    for statement in INFRA_STATEMENTS:
        if statement.hint in lowered and statement.pattern.search(text):
            return statement
    return None


def statement_message(statement: InfraStatement, text: str) -> str:
    """What the statement says: its group 1 when it has one, else the matched words."""
    match = statement.pattern.search(text)
    if match is None:
        return text.strip()
    said = match.group(1) if statement.pattern.groups else match.group(0)
    return said.strip() or text.strip()
