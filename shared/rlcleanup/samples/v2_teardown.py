"""Teardown wording in real upstream shapes for the v2 sample runs (split from samples/v2.py): NCCL's watchdog, Ray's
ActorDiedError, vLLM's EngineCore, absl's SIGTERM notice. Each is text that must never be taken for the cause."""

from __future__ import annotations

from datetime import datetime

from rlcleanup.samples import logtext as lt


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S") + ",118"


def torch_teardown(t: datetime, rank: int, pid: int) -> list[str]:
    """What ProcessGroupNCCL.cpp prints when its watchdog gives up, then libstdc++'s terminate and CPython's abort."""
    glog = f"[rank{rank}]:[E{t:%m%d} {t:%H:%M:%S}.081662161 ProcessGroupNCCL.cpp"
    watchdog = (
        f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: "
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1843, OpType=ALLREDUCE, "
        "NumelIn=1259621, NumelOut=1259621, Timeout(ms)=600000) ran for 600041 milliseconds before timing out."
    )
    return [
        f"{glog}:684] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
        "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"{glog}:698] [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
        f"{glog}:1899] {watchdog}",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {watchdog}",
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 (most recent call first):",
        "Fatal Python error: Aborted",
        "",
        f"Thread 0x00007f{pid:08x} (most recent call first):",
    ]


def ray_actor_died(pid: int, actor_pid: int) -> list[str]:
    """ray python/ray/exceptions.py ActorDiedError with the raylet's worker-exit prose (names SIGSEGV as a maybe)."""
    return [
        lt.ray_prefix(pid, "Traceback (most recent call last):"),
        lt.ray_prefix(pid, '  File "/app/skyrl-train/skyrl_train/trainer.py", line 412, in train'),
        lt.ray_prefix(
            pid, '    status = ray.get(self.policy_model.async_run_ray_method("pass_through", "ppo_train", data))'
        ),
        lt.ray_prefix(pid, "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."),
        lt.ray_prefix(pid, "\tclass_name: FSDPPolicyWorker"),
        lt.ray_prefix(pid, f"\tpid: {actor_pid}"),
        lt.ray_prefix(
            pid,
            "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
            "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root "
            "causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force "
            "is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.",
        ),
    ]


def vllm_engine_fatal(t: datetime, pid: int) -> list[str]:
    """vllm/v1/engine/core.py logs 'EngineCore encountered a fatal error.' with the traceback, every line behind
    `(EngineCore_0 pid=N) ERROR MM-DD HH:MM:SS [core.py:711]`; EngineDeadError (exceptions.py) follows elsewhere."""
    pre = f"{lt.CYAN}(EngineCore_0 pid={pid}){lt.RESET} ERROR {t:%m-%d %H:%M:%S} [core.py:711] "
    body = [
        "EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        '  File "/app/.venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 702, in run_engine_core',
        "    engine_core.run_busy_loop()",
        '  File "/app/.venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 729, in run_busy_loop',
        "    self._process_engine_step()",
        '  File "/app/.venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_model_runner.py", line 1571, in execute_model',
        "    sampled_token_ids = sampler_output.sampled_token_ids.tolist()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    ]
    return [pre + line for line in body]


def vllm_engine_dead(t: datetime, pid: int) -> list[str]:
    pre = f"{lt.CYAN}(AsyncVLLMInferenceEngine pid={pid}){lt.RESET} ERROR {t:%m-%d %H:%M:%S} [async_llm.py:538] "
    return [
        pre + "AsyncLLM output_handler failed.",
        pre + "Traceback (most recent call last):",
        pre
        + '  File "/app/.venv/lib/python3.11/site-packages/vllm/v1/engine/core_client.py", line 895, in get_output_async',
        pre + "    raise self._format_exception(outputs) from None",
        pre
        + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ]


def absl_sigterm(t: datetime, cpu: int) -> list[str]:
    return [
        f"*** SIGTERM received at time={int(t.timestamp())} on cpu {cpu} ***",
        "PC: @     0x7f3a1c2e4ee1  (unknown)  pthread_cond_wait",
    ]
