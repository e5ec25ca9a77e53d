"""Sample runs for the failure classes (docs/failures.md) not covered by other scenarios: a GPU fault in a
termination artifact's dmesg tail (infrastructure) and a configuration key error on a rank (configuration).
CUDA OOM (`failed-first-link`, training), NaN advantages (`rotated-pod-logs`, training), the kernel's and Ray's OOM
kills and an NCCL failure receipt (`termination-oom`, `ray-node-oom`, `failure-receipts`, infrastructure) are the
other scenarios'.

Written as `samples/rendezvous.py` writes its evidence (the same upstream shapes): the termination artifact of
MarinSkyRL `cloud/iris/task_runtime.py`@006eddc (its dmesg tail greps `oom|killed process|out of memory|Xid`), and
a rank's Ray worker log under `ray_session_logs/rank<k>-<host>/<session>/logs/`. The Xid line is the NVIDIA
driver's kernel message (`NVRM: Xid (PCI:<bus id>): <code>, pid=<pid>, name=<process>, <description>`); the key
error is OmegaConf's (`omegaconf/errors.py` ConfigAttributeError, raised on a struct config's unknown key).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

SCENARIOS_FAILURES: dict[str, str] = {
    "gpu-xid": "driver log shows teardown only; a termination artifact's dmesg tail shows the GPU falling off the bus "
    "(NVRM Xid 79) on rank 0's node",
    "config-key-error": "rank 0's Ray worker log holds an OmegaConf ConfigAttributeError: the launch set a key the "
    "struct config does not have",
}

_T0 = datetime(2026, 11, 30, 8, 0, 0)
_SESSION = "session_2026-11-30_08-00-03_417212_1"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# The artifact's sections as task_runtime.py writes them (header, then `--- <what> ---` and its output).
_XID_SECTIONS = {
    "df -h /tmp /dev/shm": [
        "Filesystem      Size  Used Avail Use% Mounted on",
        "overlay         512G   41G  471G   8% /tmp",
    ],
    "nvidia-smi (VRAM OOM cause)": ["Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"],
    "top RSS procs (host-RAM OOM cause)": ["    PID   RSS COMMAND", "   4410 91234512 ray::PolicyWork"],
    "dmesg OOM/kill tail": [
        "[ 3907.551201] NVRM: GPU at PCI:0000:3b:00: GPU-6c1e0f7a-1d2b-4c3e-9f4a-2b7d8e9c0a11",
        "[ 3907.551214] NVRM: Xid (PCI:0000:3b:00): 79, pid=4410, name=ray::PolicyWork, GPU has fallen off the bus.",
        "[ 3907.551230] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
    ],
}


def _gpu_xid(rdv: Path) -> None:
    ts = int((_T0 + timedelta(minutes=7)).timestamp())
    out = [f"=== TERMINATION ARTIFACT task=/marin/job/0 ts={ts} reason=signal 15 (worker rank 0) ==="]
    for section, lines in _XID_SECTIONS.items():
        out += [f"--- {section} ---", *lines]
    _write(rdv / "term_artifacts" / f"_marin_job_0_{ts}.txt", "\n".join(out) + "\n")


def _config_key_error(rdv: Path) -> None:
    node = rdv / "ray_session_logs" / "rank0-gke-h100-a" / _SESSION / "logs"
    lines = [
        "(PolicyWorker pid=3301) INFO 11-30 08:01:12 fsdp_worker.py:140 building optimizer",
        "Traceback (most recent call last):",
        '  File "/app/skyrl-train/skyrl_train/workers/fsdp/fsdp_worker.py", line 152, in init_model',
        "    lr=self.cfg.trainer.policy.optimizer_config.learning_rate,",
        '  File "/app/.venv/lib/python3.12/site-packages/omegaconf/dictconfig.py", line 355, in __getattr__',
        "    self._format_and_raise(key=key, value=None, cause=e)",
        "omegaconf.errors.ConfigAttributeError: Key 'learning_rate' is not in struct",
        "    full_key: trainer.policy.optimizer_config.learning_rate",
        "    object_type=dict",
    ]
    _write(node / "worker-3c0d11e2f4-01000000-3301.err", "\n".join(lines) + "\n")


FAILURE_DECORATE: dict[str, Callable[[Path, Path], None]] = {
    "gpu-xid": lambda rdv, logs: _gpu_xid(rdv),
    "config-key-error": lambda rdv, logs: _config_key_error(rdv),
}
