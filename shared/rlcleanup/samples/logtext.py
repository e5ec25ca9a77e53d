"""Log-line primitives as SkyRL/Ray/torch really print them: ANSI codes, Ray prefixes, loguru, tracebacks, NCCL."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

CYAN, GREEN, BOLD, RESET = "\x1b[36m", "\x1b[32m", "\x1b[1m", "\x1b[0m"
SITE = "/app/.venv/lib/python3.11/site-packages"
SKYRL = "/app/skyrl-train/skyrl_train"

Frame = tuple[str, int, str, str]  # file, line, function, source line


def ray_prefix(pid: int, text: str, actor: str = "skyrl_entrypoint") -> str:
    """Ray re-prints remote output on the driver as `(actor pid=N) text`, the prefix coloured."""
    return f"{CYAN}({actor} pid={pid}){RESET} {text}"


def loguru(ts: datetime, level: str, where: str, msg: str) -> str:
    stamp = ts.strftime("%Y-%m-%d %H:%M:%S") + f".{ts.microsecond // 1000:03d}"
    return f"{GREEN}{stamp}{RESET} | {BOLD}{level:<8}{RESET} | {CYAN}{where}{RESET} - {BOLD}{msg}{RESET}"


def wandb_mirror(kind: str, step: int, metrics: dict[str, Any]) -> str:
    return f"WANDB_MIRROR kind={kind} step={step} metrics={json.dumps(metrics)}"


def legacy_dict(metrics: dict[str, Any]) -> list[str]:
    """The old console logger's pprint-style dict, one key per line, sorted (so `trainer/global_step` is last)."""
    items = [f"{k!r}: {v!r}" for k, v in sorted(metrics.items())]
    lines = [(" " if i else "{") + item + ("," if i < len(items) - 1 else "}") for i, item in enumerate(items)]
    return lines


def traceback_lines(frames: list[Frame], final: str, header: str = "Traceback (most recent call last):") -> list[str]:
    out = [header]
    for file, line, func, code in frames:
        out += [f'  File "{file}", line {line}, in {func}', f"    {code}"]
    return [*out, *final.splitlines()]


def oom_traceback(rank: int, pid: int, gib: str = "2.00") -> list[str]:
    frames: list[Frame] = [
        (
            f"{SITE}/ray/_private/function_manager.py",
            689,
            "actor_method_executor",
            "return method(__ray_actor, *args, **kwargs)",
        ),
        (f"{SITE}/ray/util/tracing/tracing_helper.py", 463, "_resume_span", "return method(self, *_args, **_kwargs)"),
        (
            f"{SKYRL}/workers/worker.py",
            731,
            "ppo_train",
            "status = self.training_step(experience, global_step, local_step, accumulation_steps)",
        ),
        (f"{SKYRL}/workers/worker.py", 655, "training_step", "action_log_probs, output = self.model("),
        (f"{SITE}/torch/nn/modules/module.py", 1775, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
        (f"{SITE}/torch/nn/modules/module.py", 1786, "_call_impl", "return forward_call(*args, **kwargs)"),
        (
            f"{SKYRL}/models.py",
            318,
            "forward",
            "log_probs = logprobs_from_logits(logits, output.labels, inplace_backward=True)",
        ),
        (
            f"{SKYRL}/utils/torch_utils.py",
            142,
            "logprobs_from_logits",
            "log_probs = torch.log_softmax(logits.float(), dim=-1)",
        ),
    ]
    final = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib} GiB. GPU {rank} has a total capacity of "
        f"79.10 GiB of which 1.21 GiB is free. Process {pid} has 77.88 GiB memory in use. Of the allocated memory "
        "74.02 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    return traceback_lines(frames, final)


def actor_died_traceback(driver_pid: int, actor_pid: int, actor_id: str, ip: str = "10.0.3.17") -> list[str]:
    """What the driver prints when a worker actor died: a Ray `ray::` wrapper around RayActorError."""
    outer: list[Frame] = [
        (f"{SKYRL}/entrypoints/main_base.py", 312, "main", "ray.get(skyrl_entrypoint.remote(cfg))"),
        (f"{SITE}/ray/_private/auto_init_hook.py", 22, "auto_init_wrapper", "return fn(*args, **kwargs)"),
        (f"{SITE}/ray/_private/client_mode_hook.py", 104, "wrapper", "return func(*args, **kwargs)"),
        (
            f"{SITE}/ray/_private/worker.py",
            2858,
            "get",
            "values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
        ),
        (f"{SITE}/ray/_private/worker.py", 958, "get_objects", "raise value.as_instanceof_cause()"),
    ]
    inner: list[Frame] = [
        (f"{SKYRL}/entrypoints/main_base.py", 298, "skyrl_entrypoint", "exp.run()"),
        (f"{SKYRL}/trainer.py", 412, "train", "status = self.train_critic_and_policy(data)"),
        (f"{SKYRL}/workers/worker_dispatch.py", 188, "ppo_train", "return ray.get(refs)"),
    ]
    wrapper = f"ray.exceptions.RayTaskError(RayActorError): ray::skyrl_entrypoint() (pid={driver_pid}, ip={ip})"
    final = (
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: FSDPPolicyWorker\n"
        f"\tactor_id: {actor_id}\n"
        f"\tpid: {actor_pid}\n"
        f"\tnamespace: skyrl\n\tip: {ip}\n"
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file."
    )
    body = traceback_lines(inner, final, header="")[1:]
    return [*traceback_lines(outer, wrapper), *body]


def nccl_watchdog(rank: int, ts: datetime, pid: int, seq: int) -> str:
    stamp = ts.strftime("%m%d %H:%M:%S") + f".{ts.microsecond:06d}"
    return (
        f"[rank{rank}]:[E{stamp} {pid} ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective operation "
        f"timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600000 milliseconds before timing out."
    )


def nccl_abort(rank: int, ts: datetime, pid: int) -> str:
    stamp = ts.strftime("%m%d %H:%M:%S") + f".{ts.microsecond:06d}"
    return (
        f"[rank{rank}]:[F{stamp} {pid} ProcessGroupNCCL.cpp:1610] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
        "Process group watchdog thread terminated with exception: [Rank "
        f"{rank}] Watchdog caught collective operation timeout"
    )


def sigterm_notice(ts: datetime, cpu: int = 7) -> str:
    return f"*** SIGTERM received at time={int(ts.timestamp())} on cpu {cpu} ***"


def pg_not_destroyed(rank: int, ts: datetime, pid: int) -> str:
    stamp = ts.strftime("%m%d %H:%M:%S") + f".{ts.microsecond:06d}"
    return (
        f"[rank{rank}]:[W{stamp} {pid} ProcessGroupNCCL.cpp:1496] Warning: WARNING: destroy_process_group() was not "
        "called before program exit, which can leak resources. (function operator())"
    )
