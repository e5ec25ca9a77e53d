"""Sample runs whose first cause is not in the driver's log (run-layout-v3.md §§4, 7; issue 34 item 3).

Each scenario is a failed Layout A run whose driver log shows only teardown noise, plus the one place the cause
survives, written the way upstream writes it:
- `cloud/iris/task_runtime.py`@006eddc: `<rendezvous>/term_artifacts/<task>_<ts>.txt` (`=== TERMINATION ARTIFACT
  task=… ts=… reason=… ===`, df, disk hogs, nvidia-smi, top RSS, the dmesg OOM tail), `<rendezvous>/debug_artifacts/
  <node_id>/` with `sync-manifest.json`, and Ray session logs `ray_session_logs/<node_id>/<session>/<file>` with
  `node_id = rank<k>-<hostname>`;
- `marinskyrl/process_diagnostics.py`@24442f9: `outcomes/<role>.<host>.<pid>.<ns>.exception.json`;
- the kubelet's CRI pod logs, rotated to `0.log.<YYYYMMDD-HHMMSS>` and gzipped (marin `logship.py`@3ba1fb0).
The rendezvous is the one the driver log's banner names: `<temp root>/rendezvous/<attempt id>`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from rlcleanup.samples.failure_samples import FAILURE_DECORATE, SCENARIOS_FAILURES

SCENARIOS_RDV: dict[str, str] = {
    "rendezvous-rank-cause": "driver log shows teardown only; rank 1's Ray worker log under the rendezvous holds the "
    "failure; a node's sync-manifest.json lists a flight-recorder dump that is missing and one it skipped (budget)",
    "termination-oom": "driver log shows teardown only; a termination artifact's dmesg tail shows the cgroup OOM kill",
    "ray-node-oom": "Ray's memory monitor killed a rank's worker (Worker exit type: NODE_OUT_OF_MEMORY) in its raylet "
    "and worker logs under the rendezvous",
    "rotated-pod-logs": "the cause survives only in a kubelet-rotated, gzipped CRI pod log with partial (P) lines",
    "failure-receipts": "a failure receipt (outcomes/*.exception.json) records the first cause; the logs show later "
    "errors only",
    **SCENARIOS_FAILURES,  # one per failure class the scenarios above do not cover (samples/failure_samples.py)
}

_T0 = datetime(2026, 11, 30, 8, 0, 0)
_SESSION = "session_2026-11-30_08-00-03_417212_1"


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def _rank_failure() -> str:
    return "\n".join(
        [
            "(RayWorkerWrapper pid=5521) INFO 11-30 08:06:58 loader.py:88 loading shard 3/8",
            "Traceback (most recent call last):",
            '  File "/app/skyrl-train/skyrl_train/workers/fsdp/fsdp_worker.py", line 211, in init_model',
            "    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)",
            '  File "/app/.venv/lib/python3.12/site-packages/huggingface_hub/file_download.py", line 1484, in hf_hub_download',
            "    raise LocalEntryNotFoundError(message)",
            "huggingface_hub.errors.LocalEntryNotFoundError: Qwen/Qwen3-8B model-00003-of-00005.safetensors still "
            "failing after 5 attempts",
        ]
    )


def _rank_cause(rdv: Path) -> None:
    node = rdv / "ray_session_logs" / "rank1-gke-h100-b" / _SESSION / "logs"
    _write(node / "worker-9f2c41d0a1-01000000-5521.err", _rank_failure() + "\n")
    _write(node / "raylet.out", "[2026-11-30 08:00:04,112 I 311 311] main.cc:180: Setting cluster ID\n")
    debug = rdv / "debug_artifacts" / "rank1-gke-h100-b"
    _write(debug / "stacks" / "policy.gke-h100-b.5521.log", "Thread 0x7f (most recent call first):\n")
    manifest = {
        "schema_version": 1,
        "node_id": "rank1-gke-h100-b",
        "reason": "signal 15 (worker rank 1)",
        "source_root": "/tmp/skyrl-debug",
        "copied": [
            {"path": "stacks/policy.gke-h100-b.5521.log", "bytes": 34},
            {"path": "flight_recorder/nccl_fr_rank_1", "bytes": 48123},
        ],
        "skipped": [{"path": "flight_recorder/nccl_fr_rank_1.full", "bytes": 700 * 1024 * 1024, "reason": "budget"}],
        "copied_bytes": 48157,
    }
    _write(debug / "sync-manifest.json", json.dumps(manifest, sort_keys=True))


def _termination_oom(rdv: Path) -> None:
    ts = int((_T0 + timedelta(minutes=7)).timestamp())
    text = "\n".join(
        [
            f"=== TERMINATION ARTIFACT task=/marin/job/2 ts={ts} reason=signal 15 (worker rank 2) ===",
            "--- df -h /tmp /dev/shm ---",
            "Filesystem      Size  Used Avail Use% Mounted on",
            "overlay         512G  101G  411G  20% /tmp",
            "--- top /tmp disk hogs (ephemeral-storage eviction cause) ---",
            "38G\t/tmp/ray/session_2026-11-30_08-00-03_417212_1/logs",
            "--- nvidia-smi (VRAM OOM cause) ---",
            "index, memory.used [MiB], memory.total [MiB], utilization.gpu [%]",
            "0, 1 MiB, 81559 MiB, 0 %",
            "--- top RSS procs (host-RAM OOM cause) ---",
            "    PID   RSS COMMAND",
            "   5533 1853412 ray::RayWorkerW",
            "--- dmesg OOM/kill tail ---",
            "[ 4211.118812] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
            "[ 4211.119920] Memory cgroup out of memory: Killed process 5533 (ray::RayWorkerW) total-vm:912345678kB, "
            "anon-rss:1853412000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:3612kB oom_score_adj:0",
        ]
    )
    _write(rdv / "term_artifacts" / f"_marin_job_2_{ts}.txt", text + "\n")


def _ray_node_oom(rdv: Path) -> None:
    node = rdv / "ray_session_logs" / "rank3-gke-h100-d" / _SESSION / "logs"
    raylet = [
        "[2026-11-30 08:06:40,001 I 311 311] (raylet) node_manager.cc:3049: 1 Workers (tasks / actors) killed due to "
        "memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 5f1c, IP: 10.0.3.14) over the "
        "last time period.",
        "[2026-11-30 08:06:40,002 W 311 311] (raylet) Task was killed due to the node running low on memory. Memory on "
        "the node (IP: 10.0.3.14, ID: 5f1c) where the task (actor ID: 8ad1, name=PolicyWorker.__init__, pid=6012, "
        "memory used=1703.2GB) was running was 1789.5GB / 1820.0GB (0.983242), which exceeds the memory usage "
        "threshold of 0.95.",
    ]
    _write(node / "raylet.out", "\n".join(raylet) + "\n")
    worker = [
        "[2026-11-30 08:06:40,120 I 6012 6012] core_worker.cc:912: Exit signal received, this process will exit "
        "after all outstanding tasks have finished, exit_type=NODE_OUT_OF_MEMORY",
        "Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on "
        "memory.",
    ]
    _write(node / "python-core-worker-8ad1_6012.log", "\n".join(worker) + "\n")  # skipped by the scan (upstream name)
    _write(node / "worker-8ad1-01000000-6012.err", "\n".join(worker) + "\n")


def _cri(t: datetime, line: str, stream: str = "stderr", tag: str = "F") -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d}000Z {stream} {tag} {line}"


def _rotated_pod_logs(logs: Path) -> None:
    t = _T0 + timedelta(minutes=6, seconds=50)
    records = [
        _cri(t, "INFO 11-30 08:06:50 step 7 rollout start", "stdout"),
        _cri(t, "Traceback (most recent call last):"),
        _cri(t, '  File "/app/skyrl-train/skyrl_train/trainer.py", line 402, in train'),
        _cri(t, "    status = self.train_critic_and_policy(data)"),
        # A long exception line the runtime split into partial records (P), then finished (F).
        _cri(t, "ValueError: advantages contain NaN at global_step 7: batch 14 ", tag="P"),
        _cri(t, "(micro-batch 3 of 8, reward model ", tag="P"),
        _cri(t, "returned NaN for 17 samples)"),
    ]
    pod = logs / "pods" / "marin_job-0_a1b2c3" / "task"
    stamp = f"{t + timedelta(seconds=20):%Y%m%d-%H%M%S}"
    _write(pod / f"0.log.{stamp}.gz", gzip.compress(("\n".join(records) + "\n").encode(), mtime=0))
    later = t + timedelta(seconds=30)
    _write(pod / "0.log", _cri(later, "INFO 11-30 08:07:20 shutting down Ray", "stdout") + "\n")


def _failure_receipt(rdv: Path) -> None:
    observed = int((_T0 + timedelta(minutes=6, seconds=12)).timestamp() * 1e9)
    receipt = {
        "schema_version": 1,
        "role": "policy",
        "hostname": "gke-h100-c",
        "pid": 7021,
        "observed_at_ns": observed,
        "kind": "exception",
        "exception_type": "torch.distributed.DistBackendError",
        "message": "NCCL error in: ProcessGroupNCCL.cpp:2056, unhandled system error, NCCL version 2.21.5",
        "traceback": "Traceback (most recent call last):\n"
        '  File "/app/skyrl-train/skyrl_train/workers/fsdp/fsdp_worker.py", line 390, in ppo_train\n'
        "    dist.all_reduce(loss)\n"
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2056, unhandled system error, "
        "NCCL version 2.21.5\n",
        "metadata": {},
    }
    name = f"policy.gke-h100-c.7021.{observed}"
    outcomes = rdv / "debug_artifacts" / "rank2-gke-h100-c" / "outcomes"
    _write(outcomes / f"{name}.exception.json", json.dumps(receipt, sort_keys=True) + "\n")
    outcome = {"schema_version": 1, "role": "policy", "hostname": "gke-h100-c", "pid": 7021, "observed_at_ns": observed}
    outcome |= {"kind": "signal", "raw_returncode": -6, "public_exit_code": 134, "signal": 6, "signal_name": "SIGABRT"}
    _write(outcomes / f"{name}.json", json.dumps(outcome | {"metadata": {}}, sort_keys=True) + "\n")
    # The rank's Ray log shows a later symptom of the same failure: the receipt decides, not this.
    node = rdv / "ray_session_logs" / "rank2-gke-h100-c" / _SESSION / "logs"
    _write(node / "worker-77aa-01000000-7021.err", "RuntimeError: collective operation timed out after 1800s\n")


_DECORATE: dict[str, Callable[[Path, Path], None]] = {
    **FAILURE_DECORATE,
    "rendezvous-rank-cause": lambda rdv, logs: _rank_cause(rdv),
    "termination-oom": lambda rdv, logs: _termination_oom(rdv),
    "ray-node-oom": lambda rdv, logs: _ray_node_oom(rdv),
    "rotated-pod-logs": lambda rdv, logs: _rotated_pod_logs(logs),
    "failure-receipts": lambda rdv, logs: _failure_receipt(rdv),
}


def add_rendezvous_evidence(temp_root: Path, scenario: str) -> None:
    """Write `scenario`'s evidence for the run's last attempt: into the rendezvous its banner names, or its logs."""
    attempts = sorted(p.stem for p in (temp_root / "attempts").glob("*.json"))
    attempt = attempts[-1]
    _DECORATE[scenario](temp_root / "rendezvous" / attempt, temp_root / "attempts" / attempt / "logs")
